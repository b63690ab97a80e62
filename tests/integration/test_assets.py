"""Airflow 3 Assets on the real Airflow (scheduler, dag-processor, api-server): the
backup DAG's commit adds an asset event per topic it advanced, with what arrived in the
extra; a downstream DAG scheduled on them runs and reads it; a run that fails before its
commit adds none; a rewind's re-archive adds one again, saying it replaced files."""

from __future__ import annotations

import time

import pytest
from test_airflow_rest import DAG, make_topic, run_to_end

DOWNSTREAM = "downstream_of_backup"


def asset_events(stack, topic: str, run_id: str) -> list[dict]:
    """The events the backup DAG's run added to the topic's asset."""
    r = stack.api.get("/api/v2/assets/events", params={"source_dag_id": DAG,
                                                        "source_run_id": run_id})
    assert r.status_code == 200, r.text
    return [e for e in r.json()["asset_events"] if e["name"] == f"kafka_archive/backup/{topic}"]


def downstream_saw(stack, topic: str, run_id: str, timeout_s: float = 180) -> dict:
    """The extra a finished downstream run received for the topic's event of run_id."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        runs = stack.api.get(f"/api/v2/dags/{DOWNSTREAM}/dagRuns",
                             params={"state": "success", "limit": 100}).json()["dag_runs"]
        for run in runs:
            r = stack.api.get(f"/api/v2/dags/{DOWNSTREAM}/dagRuns/{run['dag_run_id']}/"
                              "taskInstances/arrived/xcomEntries/return_value")
            if r.status_code == 200:
                for extra in r.json()["value"]:
                    if extra.get("topic") == topic and extra.get("run_id") == run_id:
                        return extra
        time.sleep(1)
    pytest.fail(f"no downstream run saw {topic}'s commit by {run_id} in {timeout_s}s")


def test_commits_add_asset_events_that_run_a_downstream_dag(airflow_stack, kafka, unique):
    topic = f"assets-{unique}"
    make_topic(kafka, topic, 12)
    airflow_stack.unpause(DOWNSTREAM)
    airflow_stack.unpause(DAG)

    failed = airflow_stack.trigger(DAG, {"topics": [topic], "rewind": [
        {"topic": topic, "partition": 0, "offset": 99}]})  # beyond Kafka's end: plan fails
    assert failed.status_code == 200, failed.text
    failed = failed.json()["dag_run_id"]
    assert airflow_stack.wait_for_run(DAG, failed)["state"] == "failed"

    first = run_to_end(airflow_stack, {"topics": [topic], "max_records": 5})
    extra = downstream_saw(airflow_stack, topic, first)
    assert (extra["offsets"], extra["records"], extra["files"], extra["replaced"]) == (
        {"0": 5}, 5, 1, 0)
    again = run_to_end(airflow_stack, {"topics": [topic], "rewind": [
        {"topic": topic, "partition": 0, "offset": 2}]})  # a rewind: the file is replaced
    extra = downstream_saw(airflow_stack, topic, again)
    assert (extra["offsets"], extra["records"], extra["replaced"]) == ({"0": 12}, 12, 1)

    assert asset_events(airflow_stack, topic, failed) == []  # failed before its commit
    [event] = asset_events(airflow_stack, topic, first)
    assert event["uri"] == f"{airflow_stack.config().archive_root}/backup/{topic}"
    assert event["extra"]["records"] == 5 and event["created_dagruns"]  # it ran the downstream
    assert [e["extra"]["records"] for e in asset_events(airflow_stack, topic, again)] == [12]
