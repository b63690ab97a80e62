"""Operators' commands killed part way (SIGKILL, at spread-out moments of the command's own
run): `rewind`, `accept-loss`, `catalog --rebuild` and `backfill` (a killed replay is in
test_replay.py). After each kill the operator runs
the command again if it had not taken effect, then a clean run; every file read back by
Hadoop's own reader holds each message Kafka still has exactly once, `verify --full`
finds no error, no plan stays in flight and the audit of the producers' counts is all OK
(issue 31 §5)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter

import msgpack
import pytest
from kafka import KafkaAdminClient, TopicPartition
from test_audit import audited_pipeline
from test_backup_archive import consumed, varied_messages
from test_partitioned import PARTITIONED, Archive, parser_fix
from test_rewind_cli import CLI, cli

from kafka_archive.audit.producer import AuditedProducer
from kafka_archive.formats import audit_counts
from kafka_archive.formats.sequencefile import BYTES_WRITABLE
from tests.support.pipeline import Pipeline

PARTITIONS = 3


@pytest.fixture
def archived(airflow_env, kafka, s3, unique, tmp_path):
    pipeline = audited_pipeline(airflow_env, kafka, s3, f"kill{unique}", tmp_path)
    pipeline.topic = pipeline.create_topic("k", PARTITIONS)
    produce_audited(pipeline, varied_messages(pipeline.topic, PARTITIONS, 300, seed=31))
    pipeline.run("first")
    return pipeline


def produce_audited(pipeline: Pipeline, messages) -> None:
    """Through the audited producer, time-stamped two hours ago: windows long closed."""
    at = audit_counts.window_start(int(time.time() * 1000) - 2 * 3600_000, 60_000)
    with AuditedProducer(source="kill-test", monitoring_topic=pipeline.monitoring,
                         bootstrap_servers=pipeline.kafka, acks="all") as producer:
        for i, (topic, partition, key, value, headers) in enumerate(messages):
            producer.send(topic, value=value, key=key, headers=headers, partition=partition,
                          timestamp_ms=at + i)


def killed(pipeline: Pipeline, args: list[str], after_s: float) -> bool:
    """Run `kafka-archive <args>`, SIGKILL it after_s in; whether it finished first."""
    job = subprocess.Popen([CLI, *args], env=pipeline.env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        job.wait(timeout=after_s)
        return True
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
        return False


def moments(pipeline: Pipeline, count: int = 2) -> list[float]:
    """Kill times spread over a run of a command (timed on a harmless one: `status`,
    which loads the same modules, reads the catalog and Kafka)."""
    started = time.monotonic()
    assert cli(pipeline, "status", "--group", "backup").returncode == 0
    took = time.monotonic() - started
    return [took * (i + 1) / (count + 1) for i in range(count)]


def hadoop_offsets(pipeline: Pipeline, sc, tmp_path) -> Counter:
    """(partition, offset) of every message in the group's data files, by Hadoop's reader."""
    found: Counter = Counter()
    folder = tmp_path / f"read-{time.monotonic_ns()}"
    folder.mkdir()
    for i, (path, data) in enumerate(sorted(pipeline.data_files().items())):
        (folder / f"{i}.seq").write_bytes(data)
        partition = int(path.rsplit("/", 1)[-1].split("_")[1])
        for key, _ in sc.sequenceFile(str(folder / f"{i}.seq"), BYTES_WRITABLE,
                                      BYTES_WRITABLE).collect():
            found[(partition, msgpack.unpackb(bytes(key), strict_map_key=False)[1])] += 1
    return found


def assert_whole(pipeline: Pipeline, sc, tmp_path, expected: set[tuple]) -> None:
    seen = hadoop_offsets(pipeline, sc, tmp_path)
    assert max(seen.values()) == 1, "a message is archived twice"
    assert set(seen) >= {(p, o) for _, p, o, *_ in expected}, "a message Kafka has is lost"
    done = cli(pipeline, "verify", "--group", "backup", "--full")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "not in the catalog" not in done.stdout
    status = cli(pipeline, "status", "--group", "backup")
    assert "IN FLIGHT" not in status.stdout, status.stdout
    audit = cli(pipeline, "audit", "--group", "backup")
    assert audit.returncode == 0, audit.stdout[-2000:] + audit.stderr[-3000:]
    totals = json.loads(audit.stdout)["totals"]
    assert totals["OK"] and not (totals["MISSING"] or totals["EXCESS"] or totals["PENDING"]), \
        totals


def test_rewinds_killed_at_any_moment(archived, kafka, sc, tmp_path):
    expected = consumed(kafka, [archived.topic])
    for n, after_s in enumerate(moments(archived)):
        partition, to_offset = n % PARTITIONS, 10 * n + 5
        args = ["rewind", "--group", "backup", "--topic", archived.topic,
                "--partition", str(partition), "--to-offset", str(to_offset)]
        if not killed(archived, args, after_s) and \
                archived.token_offsets()[archived.topic][partition] == 100:
            assert cli(archived, *args).returncode == 0  # the operator does it again
        assert archived.token_offsets()[archived.topic][partition] == 0  # inside file 1
        archived.run(f"after-rewind-{n}")
        assert_whole(archived, sc, tmp_path, expected)


def test_rebuilds_killed_at_any_moment(archived, kafka, sc, tmp_path):
    expected = consumed(kafka, [archived.topic])
    for n, after_s in enumerate(moments(archived)):
        killed(archived, ["catalog", "--group", "backup", "--rebuild"], after_s)
        produce_audited(archived, varied_messages(archived.topic, PARTITIONS, 30, seed=100 + n))
        expected = consumed(kafka, [archived.topic])
        archived.run(f"after-rebuild-{n}")
        assert_whole(archived, sc, tmp_path, expected)


def test_accepted_losses_killed_at_any_moment(archived, kafka, sc, tmp_path):
    admin = KafkaAdminClient(bootstrap_servers=kafka)
    try:
        for n, after_s in enumerate(moments(archived)):
            partition = n % PARTITIONS
            archived.produce((archived.topic, partition, None, f"gone {n} {i}".encode(), None)
                             for i in range(5))
            end = archived.token_offsets()[archived.topic][partition] + 5
            admin.delete_records({TopicPartition(archived.topic, partition): end - 2})
            args = ["accept-loss", "--group", "backup", "--topic", archived.topic,
                    "--partition", str(partition), "--reason", f"kill test {n}"]
            if not killed(archived, args, after_s) and \
                    archived.token_offsets()[archived.topic][partition] < end - 2:
                assert cli(archived, *args).returncode == 0, "accept-loss again"
            assert archived.token_offsets()[archived.topic][partition] == end - 2
            archived.run(f"after-loss-{n}")
            assert_whole(archived, sc, tmp_path, consumed(kafka, [archived.topic]))
            report = cli(archived, "verify", "--group", "backup").stdout
            assert f"kill test {n}" in report  # the record of the loss, never lost itself
    finally:
        admin.close()


def test_a_backfill_killed_at_any_moment_and_run_again_is_a_clean_backfill(
        airflow_env, kafka, s3, unique, tmp_path, monkeypatch):
    """A parser fixed, its quarantined messages rebuilt from the backup group; the backfill
    killed part way, then run again: the files equal a correct run's, verify --full finds
    no error (no stray file, no file the catalog names missing)."""
    prefix = f"bf{unique}"
    broken, reference, topic = parser_fix(airflow_env, kafka, s3, prefix, tmp_path, monkeypatch)
    broken.write_config(PARTITIONED.format(p=prefix, field="ts"))  # the fix
    args = ["backfill", "--group", "partitioned", "--topic", topic, "--from-offset", "0"]
    for n, after_s in enumerate(moments(broken)):
        killed(broken, args, after_s)
        assert cli(broken, *args).returncode == 0  # the operator runs it again
        assert data_files(broken) == data_files(reference), f"kill {n}"
        done = cli(broken, "verify", "--group", "partitioned", "--full")
        assert done.returncode == 0 and "not in the catalog" not in done.stdout, done.stdout


def data_files(made: Archive) -> dict[str, bytes]:
    """The group's files but its markers (_SUCCESS depends on when the finalizer ran)."""
    return {p: d for p, d in made.files("partitioned").items()
            if not p.split("/")[-1].startswith("_")}
