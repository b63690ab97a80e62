"""A table group's commit killed (SIGKILL) at spread-out moments of its own run, each kill
followed by the group's next run, which finishes the plan in flight; and a rewind (the
token file deleted) between them. After all of it, the Iceberg table holds each message
Kafka has exactly once, every run is in the table's history once, no plan is in flight
and `verify --full` finds no error (issue 32: exactly once with the tokens, shown with
kills). In both shapes: key_value, and the parsed one of an event-time group, whose
commit writes two tables (each message in its table or its dead letters, once)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

from test_backup_archive import consumed, varied_messages
from test_iceberg_tables import HOUR_MS, json_events, read_in_table
from test_rewind_cli import cli

from kafka_archive import config
from kafka_archive.airflow import connections
from kafka_archive.commit import iceberg
from tests.support import localservices
from tests.support.pipeline import GROUP, Pipeline

PARTITIONS = 2
KILLS = 4


def commit_killed(pipeline: Pipeline, plan_url: str, after_s: float | None) -> bool:
    """The commit task in a process of its own, SIGKILLed after_s in (None: let it end);
    whether it finished first."""
    job = subprocess.Popen([sys.executable, "-c", "import sys\nfrom kafka_archive.airflow "
                            "import tasks\ntasks.commit(sys.argv[1])", plan_url],
                           env=pipeline.env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, start_new_session=True)
    try:
        _, err = job.communicate(timeout=after_s if after_s is not None else 300)
        assert job.returncode == 0, err.decode()[-3000:]
        return True
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
        return False


SHAPES = {"key_value": "format: {kind: parquet}\ntable: {namespace: archive}\n",
          "parsed": "layout: {kind: event_time, granularity: hour}\nformat: {kind: parquet}\n"
                    "parser: {kind: json, field: ts, unit: ms}\ntable: {namespace: archive}\n"}


def messages(shape: str, topic: str, count: int, seed: int):
    if shape == "key_value":
        return varied_messages(topic, PARTITIONS, count, seed)
    start_ms = (int(time.time() * 1000) // HOUR_MS - 8) * HOUR_MS
    return ((t, p % PARTITIONS, k, v, h) for t, p, k, v, h in
            json_events(topic, count, start_ms, seed * 1000))


@pytest.mark.parametrize("shape", SHAPES)
def test_table_commits_killed_at_any_moment_leave_each_message_once(
        airflow_env, kafka, s3, postgres, service_env, unique, tmp_path, monkeypatch, shape):
    database = f"kills{unique}".lower()  # the SQL catalog on PostgreSQL, as deployed,
    localservices.create_database(service_env, database)  # reached through a connection
    catalog_db = {"conn_type": "postgres", "host": "127.0.0.1", "schema": database,
                  "port": int(service_env["KAFKA_ARCHIVE_POSTGRES_PORT"]),
                  "login": localservices.POSTGRES_USER,
                  "password": service_env["KAFKA_ARCHIVE_POSTGRES_PASSWORD"]}
    env = {**airflow_env, "AIRFLOW_CONN_ICEBERG_KILLS": json.dumps(catalog_db)}
    pipeline = Pipeline(env, kafka, s3, f"tk{unique}", tmp_path,
                        group_extra=SHAPES[shape],
                        extra="iceberg_catalogs: {local: {type: sql, conn_id: iceberg_kills}}\n")
    assert catalog_db["password"] not in pipeline.config_path.read_text()
    topic = pipeline.create_topic("events", PARTITIONS)
    pipeline.in_env(monkeypatch)
    pipeline.produce(messages(shape, topic, 100, seed=40))
    plan_url = pipeline.plan("timed")
    pipeline.archive_to_end(plan_url)
    started = time.monotonic()
    assert commit_killed(pipeline, plan_url, None)  # uninterrupted: how long a commit takes
    took = time.monotonic() - started
    finished = []
    for i in range(KILLS):
        pipeline.produce(messages(shape, topic, 50, seed=41 + i))
        if i == KILLS // 2:
            pipeline.tokens.delete(GROUP, topic)  # a rewind between the kills
        plan_url = pipeline.plan(f"killed-{i}")
        pipeline.archive_to_end(plan_url)
        finished.append(commit_killed(pipeline, plan_url, took * (i + 1) / (KILLS + 1)))
        if after := pipeline.plan(f"after-{i}"):  # the next run finishes the plan in flight
            pipeline.archive_to_end(after)
            pipeline.commit(after)

    tables = connections.iceberg_tables(config.load(pipeline.config_path))
    found = [tables.find(GROUP, topic, dead) for dead in tables.kinds(GROUP)]
    held = Counter((r["kafka"]["partition"], r["kafka"]["offset"])
                   for table in found for r in table.scan().to_arrow().to_pylist())
    assert max(held.values()) == 1, "a message is in the tables twice"
    in_kafka = consumed(kafka, [topic])
    assert set(held) == {(p, o) for _, p, o, *_ in in_kafka}, "the tables lack a message"
    if shape == "key_value":
        assert read_in_table(found[0]) == in_kafka  # keys, values, times, headers
    for table in found:
        runs = Counter(s.summary[iceberg.RUN_ID] for s in table.metadata.snapshots)
        assert max(runs.values()) == 1, runs  # no run committed twice
        assert {f"killed-{i}" for i in range(KILLS)} <= set(runs)
    checked = cli(pipeline, "verify", "--group", GROUP, "--full")
    assert checked.returncode == 0 and " 0 errors" in checked.stdout, checked.stdout[-3000:]
    status = cli(pipeline, "status", "--group", GROUP)
    assert "IN FLIGHT" not in status.stdout, status.stdout
    assert not all(finished), f"no kill landed inside a commit (a commit took {took:.1f} s)"
