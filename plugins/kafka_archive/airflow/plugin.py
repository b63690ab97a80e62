"""The Airflow plugin of the provider: the kafka-archive pages in the Airflow UI (lag,
runs, audit per group), and the check that refuses a trigger naming an unknown param or
topic. Registered by the package's `airflow.plugins` entry point, so every Airflow
component of an environment with the wheel installed loads it; nothing to copy into a
plugins folder. The pages live in kafka_archive.airflow.ui.
"""

from airflow.plugins_manager import AirflowPlugin

from kafka_archive.airflow import trigger_check, ui


class KafkaArchivePlugin(AirflowPlugin):
    name = "kafka_archive"
    fastapi_apps = [{"app": ui.app, "url_prefix": ui.page.PREFIX, "name": "kafka-archive pages"}]
    external_views = ui.EXTERNAL_VIEWS
    # a trigger naming a param the DAG lacks, or a topic its group does not archive: 400
    fastapi_root_middlewares = [{"middleware": trigger_check.ClosedTriggerParams,
                                 "name": "kafka-archive closed trigger params"}]
