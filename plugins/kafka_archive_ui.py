"""Airflow plugin: the kafka-archive pages in the Airflow UI (lag, runs, audit per group).

Airflow imports every .py file of its plugins folder; this is the only one meant as a
plugin (.airflowignore keeps the library package out). The pages live in
kafka_archive.airflow.ui.
"""

from airflow.plugins_manager import AirflowPlugin

from kafka_archive.airflow import ui


class KafkaArchivePlugin(AirflowPlugin):
    name = "kafka_archive"
    fastapi_apps = [{"app": ui.app, "url_prefix": ui.page.PREFIX, "name": "kafka-archive pages"}]
    external_views = ui.EXTERNAL_VIEWS
