"""Airflow 3 Assets on the real Airflow (scheduler, dag-processor, api-server): the
backup DAG's commit adds an asset event per topic it advanced, with what arrived in the
extra; a downstream DAG scheduled on them runs and reads it; a run that fails before its
commit adds none; a rewind's re-archive adds one again, saying it replaced files."""

from __future__ import annotations

import json
import time

import pytest
from kafka import KafkaProducer
from test_airflow_rest import DAG, make_topic, run_to_end

DOWNSTREAM = "downstream_of_backup"
HOURS_DAG, DOWNSTREAM_OF_HOURS = "kafka_archive_partitioned", "downstream_of_partitioned"
HOUR_MS = 3_600_000


def asset_events(stack, topic: str, run_id: str, dag: str = DAG,
                 name: str = "kafka_archive/backup/{topic}") -> list[dict]:
    """The events the DAG's run added to the asset `name` (of the topic)."""
    r = stack.api.get("/api/v2/assets/events", params={"source_dag_id": dag,
                                                        "source_run_id": run_id})
    assert r.status_code == 200, r.text
    return [e for e in r.json()["asset_events"] if e["name"] == name.format(topic=topic)]


def downstream_saw(stack, topic: str, run_id: str, dag: str = DOWNSTREAM,
                   finalized: bool = False, timeout_s: float = 180) -> dict:
    """The extra a finished downstream run received for the topic's event of run_id (a
    commit's, or with `finalized` a finalized time partition's)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        runs = stack.api.get(f"/api/v2/dags/{dag}/dagRuns",
                             params={"state": "success", "limit": 100}).json()["dag_runs"]
        for run in runs:
            r = stack.api.get(f"/api/v2/dags/{dag}/dagRuns/{run['dag_run_id']}/"
                              "taskInstances/arrived/xcomEntries/return_value")
            if r.status_code == 200:
                for extra in r.json()["value"]:
                    if (extra.get("topic"), extra.get("run_id"), "partition" in extra) == (
                            topic, run_id, finalized):
                        return extra
        time.sleep(1)
    pytest.fail(f"no run of {dag} saw {topic}'s {'finalize' if finalized else 'commit'} by "
                f"{run_id} in {timeout_s}s")


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


def test_a_finalized_hour_adds_an_event_that_runs_a_downstream_dag(airflow_stack, kafka, unique):
    """The event-time group's finalize writes _SUCCESS into an hour archived past its
    lateness (1 h) and adds an event on the topic's finalized asset, saying which hour."""
    topic = f"hours-{unique}"
    make_topic(kafka, topic, 0)
    hour_ms = (int(time.time() * 1000) // HOUR_MS - 3) * HOUR_MS  # a whole hour, 3 h ago
    producer = KafkaProducer(bootstrap_servers=kafka, acks="all")
    for i in range(6):
        producer.send(topic, value=json.dumps({"ts": hour_ms + i * 60_000}).encode(), partition=0)
    producer.flush()
    producer.close()
    airflow_stack.unpause(DOWNSTREAM_OF_HOURS)
    airflow_stack.unpause(HOURS_DAG)

    run = run_to_end(airflow_stack, {"topics": [topic]}, dag=HOURS_DAG)
    assert airflow_stack.task_states(HOURS_DAG, run)["finalize"] == "success"
    extra = downstream_saw(airflow_stack, topic, run, dag=DOWNSTREAM_OF_HOURS, finalized=True)
    hour = time.strftime("dt=%Y-%m-%d/hr=%H", time.gmtime(hour_ms / 1000))
    root = airflow_stack.config().archive_root
    assert (extra["partition"], extra["start_ms"], extra["end_ms"], extra["url"]) == (
        hour, hour_ms, hour_ms + HOUR_MS, f"{root}/partitioned/{topic}/{hour}")
    [event] = asset_events(airflow_stack, topic, run, dag=HOURS_DAG,
                           name="kafka_archive/partitioned/{topic}/finalized")
    assert event["uri"] == f"{root}/partitioned/{topic}/_SUCCESS" and event["created_dagruns"]
    # the commit's own event of the same run: what arrived, on the topic's asset
    commit = downstream_saw(airflow_stack, topic, run, dag=DOWNSTREAM_OF_HOURS)
    assert (commit["records"], commit["offsets"]) == (6, {"0": 6})
