"""A downstream DAG as a data team writes one, for the real Airflow of the tests (a DAG
bundle of its own, tests/support/localservices.py): it runs when the backup group's
commits add asset events (any topic: scheduled on the group's AssetAlias) and returns the
events' extras, so a test can read what arrived through the REST API."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, task

from kafka_archive.airflow import assets

ALIAS = assets.alias("backup")

with DAG(dag_id="downstream_of_backup", schedule=[ALIAS], catchup=False,
         start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), tags=["kafka-archive-tests"]):

    @task(inlets=[ALIAS])
    def arrived(*, triggering_asset_events=None) -> list[dict]:
        return [dict(event.extra) for events in triggering_asset_events.values()
                for event in events]

    arrived()
