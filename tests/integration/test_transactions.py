"""Transactions through the real data path (librdkafka, read_committed): committed
messages are archived once, aborted ones never, their offsets and the markers are gaps, a
range ending in an aborted transaction ends without waiting, and an open transaction
holds the plan at the last stable offset instead of stalling the job, and holds back how
far the topic counts as archived (the finalizer's and the audit's measure)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from kafka_archive import brokers, config, layout
from kafka_archive.airflow import connections
from kafka_archive.commit import finalizing
from tests.support.pipeline import Pipeline


@pytest.fixture
def pipeline(airflow_env, kafka, s3, unique, tmp_path):
    return Pipeline(airflow_env, kafka, s3, f"tx{unique}", tmp_path)


def transaction(producer: Producer, topic: str, values: list[bytes], commit: bool) -> None:
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value, partition=0)
    producer.flush()
    producer.commit_transaction() if commit else producer.abort_transaction()


def manifest(pipeline: Pipeline, plan_url: str) -> dict:
    cfg = config.load(pipeline.config_path)
    run_id = plan_url.rsplit("/", 2)[-2]
    storage = connections.storage(cfg.s3_conn_id)
    return json.loads(storage.get_bytes(layout.run_file(cfg.archive_root, "backup", run_id,
                                                        "manifest.json")))


def test_committed_messages_are_archived_aborted_ones_are_gaps(pipeline, kafka, monkeypatch):
    pipeline.in_env(monkeypatch)
    topic = pipeline.create_topic("t", 1)
    producer = Producer({"bootstrap.servers": kafka, "transactional.id": f"{topic}-tx"})
    producer.init_transactions()
    transaction(producer, topic, [b"a%d" % i for i in range(5)], commit=True)    # 0-4, marker 5
    transaction(producer, topic, [b"x%d" % i for i in range(4)], commit=False)   # 6-9, marker 10
    transaction(producer, topic, [b"c%d" % i for i in range(3)], commit=True)    # 11-13, marker 14
    transaction(producer, topic, [b"y%d" % i for i in range(2)], commit=False)   # 15-16, marker 17

    plan_url = pipeline.plan("tx-1")
    started = time.monotonic()
    pipeline.archive_to_end(plan_url, spark_submit=True)  # its log is read below
    job_s = time.monotonic() - started
    pipeline.commit(plan_url)

    archived = sorted((r[2], r[4]) for r in pipeline.archived_records())
    assert archived == [(o, b"a%d" % o) for o in range(5)] + \
        [(11 + i, b"c%d" % i) for i in range(3)]
    assert pipeline.token_offsets() == {topic: {0: 18}}  # past the aborted tail's marker
    (row,) = manifest(pipeline, plan_url)["slices"]
    assert row["gaps"] == [[5, 11], [14, 18]] and row["records"] == 8
    # the range ends in an aborted transaction: the read learns the partition's end at
    # once, it does not wait out the reader's stall timeout
    assert job_s < 60, f"the job took {job_s:.0f} s"
    log = pipeline.job_log.read_text()
    assert "ERROR" not in log and "rdkafka" not in log, log[-2000:]

    # an open transaction: planned only up to the last stable offset, so the job does not
    # wait for it; once committed, the next run takes its messages
    opened_ms = int(time.time() * 1000)
    producer.begin_transaction()
    producer.produce(topic, b"open-0", partition=0)
    producer.produce(topic, b"open-1", partition=0)
    producer.flush()
    flushed_ms = int(time.time() * 1000)
    assert pipeline.plan("tx-2") is None  # nothing stable beyond offset 18 yet
    # the token is at the last stable offset, but the topic is not archived up to now:
    # the open transaction's first message is not (a finalized hour, an audit window)
    now_ms = flushed_ms + 3_600_000
    assert opened_ms - 1000 <= archived_through(pipeline, topic, now_ms) <= flushed_ms
    producer.commit_transaction()
    plan_url = pipeline.plan("tx-3")
    pipeline.archive_to_end(plan_url)
    pipeline.commit(plan_url)
    assert [r[4] for r in pipeline.archived_records() if r[2] >= 18] == [b"open-0", b"open-1"]
    assert pipeline.token_offsets() == {topic: {0: 21}}
    assert archived_through(pipeline, topic, now_ms) == now_ms


def archived_through(pipeline: Pipeline, topic: str, now_ms: int) -> int | None:
    """How far the finalizer and the audit take the topic as archived, as the tasks ask."""
    cfg = config.load(pipeline.config_path)
    consumer = brokers.consumer(cfg)
    try:
        return finalizing.archived_through(cfg, cfg.group("backup"), connections.token_store(cfg),
                                           consumer, now_ms)[topic]
    finally:
        consumer.close()


def test_verify_asks_kafka_about_offsets_below_a_token_no_row_covers(pipeline, kafka,
                                                                    monkeypatch):
    """A person puts the token past what any run archived (an older copy of the file
    restored): offsets no row covers are below it. `kafka-archive verify` asks Kafka:
    up to its first message there (an aborted transaction, markers) that is a gap, from
    it on a hole (an error)."""
    pipeline.in_env(monkeypatch)
    topic = pipeline.create_topic("v", 1)
    producer = Producer({"bootstrap.servers": kafka, "transactional.id": f"{topic}-tx"})
    producer.init_transactions()
    transaction(producer, topic, [b"a%d" % i for i in range(5)], commit=True)  # 0-4, marker 5
    pipeline.run()
    assert pipeline.token_offsets() == {topic: {0: 6}}
    transaction(producer, topic, [b"x%d" % i for i in range(3)], commit=False)  # 6-8, marker 9
    transaction(producer, topic, [b"b%d" % i for i in range(2)], commit=True)  # 10-11, marker 12
    token = pipeline.token_root / "backup" / f"{topic}.token"
    token.write_text(token.read_text().replace(f" {topic} 0 6\n", f" {topic} 0 13\n"))
    verify = subprocess.run([str(Path(sys.executable).parent / "kafka-archive"), "verify",
                             "--group", "backup"], env=pipeline.env, capture_output=True,
                            text=True, timeout=300)
    assert verify.returncode == 1, verify.stdout + verify.stderr
    assert "gap: offsets [6, 10) after offsets [0, 6), below the token 13: gap (Kafka holds " \
        "no message there: a transaction's marker or an aborted transaction)" in verify.stdout, \
        verify.stdout
    assert "ERROR: hole: offsets [10, 13) after offsets [0, 6), below the token 13 are in no " \
        "file" in verify.stdout
    assert "1 errors" in verify.stdout
