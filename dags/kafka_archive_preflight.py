"""Checks that Kafka and the archive root are reachable; trigger it after any change of
connections or config."""

import pendulum
from airflow.sdk import dag, get_current_context, task

from kafka_archive.airflow import tasks


@dag(
    dag_id="kafka_archive_preflight",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["kafka-archive"],
)
def kafka_archive_preflight():
    @task
    def check() -> dict:
        return tasks.preflight(get_current_context()["run_id"])

    check()


kafka_archive_preflight()
