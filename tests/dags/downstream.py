"""Downstream DAGs as a data team writes them, for the real Airflow of the tests (a DAG
bundle of its own, tests/support/localservices.py): `downstream_of_<group>` runs when the
group's commits (and an event-time group's finalizes) add asset events, whatever the
topic or hour (scheduled on the group's AssetAlias), and returns the events' extras, so a
test can read what arrived through the REST API."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, task

from kafka_archive.airflow import assets

for group in ("backup", "partitioned"):
    alias = assets.alias(group)
    with DAG(dag_id=f"downstream_of_{group}", schedule=[alias], catchup=False,
             start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), tags=["kafka-archive-tests"]):

        @task(inlets=[alias])
        def arrived(*, triggering_asset_events=None) -> list[dict]:
            return [dict(event.extra) for events in triggering_asset_events.values()
                    for event in events]

        arrived()
