"""Compaction of a table group on the real services (Kafka, MinIO, the SQL catalog on
PostgreSQL), issue 44: compaction, then each rewind kind, read by Spark SQL through
Iceberg's runtime and by pyiceberg; a compaction SIGKILLed at each of its steps, then
clean runs; a compaction and a run racing. After each: every message of Kafka once in
the table, the catalog's files the table's, `verify --full` 0 errors."""

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
from test_iceberg_tables import read_in_table, spark_reads
from test_rewind_cli import cli

from kafka_archive import catalog, config
from kafka_archive.airflow import connections, tasks
from kafka_archive.commit import iceberg
from kafka_archive.plan import inflight
from kafka_archive.plan.runs import CompactionUnderWay
from kafka_archive.storage import Storage
from tests.support import localservices
from tests.support.pipeline import GROUP, Pipeline

PARTITIONS = 2


def table_pipeline(service_env, airflow_env, kafka, s3, unique, tmp_path, name):
    """A key_value table group whose runs are compacted as soon as they are committed,
    its catalog on PostgreSQL through an Airflow connection, as deployed; with the JDBC
    URL and credentials a Spark reader needs."""
    database = f"{name}{unique}".lower()
    localservices.create_database(service_env, database)
    port = int(service_env["KAFKA_ARCHIVE_POSTGRES_PORT"])
    catalog_db = {"conn_type": "postgres", "host": "127.0.0.1", "schema": database, "port": port,
                  "login": localservices.POSTGRES_USER,
                  "password": service_env["KAFKA_ARCHIVE_POSTGRES_PASSWORD"]}
    conn = f"AIRFLOW_CONN_ICEBERG_{name.upper()}"
    pipeline = Pipeline({**airflow_env, conn: json.dumps(catalog_db)}, kafka, s3,
                        f"{name}{unique}", tmp_path, group_extra=(
                            "format: {kind: parquet}\n"
                            "table: {namespace: archive, compact_after: 0}\n"),
                        extra=f"iceberg_catalogs: {{local: {{type: sql, conn_id: iceberg_{name}}}}}\n")
    jdbc = (f"jdbc:postgresql://127.0.0.1:{port}/{database}",
            {"JDBC_USER": localservices.POSTGRES_USER,
             "JDBC_PASSWORD": service_env["KAFKA_ARCHIVE_POSTGRES_PASSWORD"]})
    return pipeline, jdbc


def storage_of(pipeline: Pipeline) -> Storage:
    return connections.storage(config.load(pipeline.config_path).s3_conn_id)


def archived_twice(pipeline: Pipeline, monkeypatch, seed: int) -> str:
    """A topic of the pipeline and two runs of it: two small files per partition, to
    compact; the topic."""
    topic = pipeline.create_topic("events", PARTITIONS)
    pipeline.in_env(monkeypatch)  # (the test reads the archive in this process)
    for i in range(2):
        pipeline.produce(varied_messages(topic, PARTITIONS, 30, seed=seed + i))
        pipeline.run(f"first-{i}")
    return topic


def the_table(pipeline: Pipeline, topic: str):
    return connections.iceberg_tables(config.load(pipeline.config_path)).find(GROUP, topic)


def consistent(pipeline: Pipeline, topic: str):
    """The table as pyiceberg reads it holds no message twice, and its current files are
    those of the catalog's rows. The table."""
    table = the_table(pipeline, topic)
    read = Counter((r["kafka"]["partition"], r["kafka"]["offset"])
                   for r in table.scan().to_arrow().to_pylist())
    assert max(read.values()) == 1, [k for k, n in read.items() if n > 1][:5]
    rows = catalog.open_catalog(storage_of(pipeline), config.load(pipeline.config_path),
                                GROUP).rows(topic)
    assert {f["url"] for r in rows for f in r["files"]} == {
        t.file.file_path for t in table.scan().plan_files()}
    return table


def holds_each_message_once(pipeline: Pipeline, kafka: str, topic: str):
    """consistent, and each message of Kafka is in the table, bytes and all."""
    table = consistent(pipeline, topic)
    assert read_in_table(table) == consumed(kafka, [topic])
    return table


def verified(pipeline: Pipeline) -> str:
    checked = cli(pipeline, "verify", "--group", GROUP, "--full")
    assert checked.returncode == 0 and " 0 errors" in checked.stdout, checked.stdout[-3000:]
    return checked.stdout


def test_compaction_then_each_rewind_kind_keeps_each_message_once(
        airflow_env, kafka, s3, postgres, service_env, unique, tmp_path, monkeypatch):
    pipeline, (jdbc_url, jdbc_env) = table_pipeline(service_env, airflow_env, kafka, s3, unique,
                                                    tmp_path, "compact")
    topic = pipeline.create_topic("events", PARTITIONS)
    pipeline.in_env(monkeypatch)  # (the test reads the archive in this process)
    for i in range(3):
        pipeline.produce(varied_messages(topic, PARTITIONS, 40, seed=70 + i))
        pipeline.run(f"run-{i}")
    assert len(list(the_table(pipeline, topic).scan().plan_files())) == 3 * PARTITIONS

    done = tasks.compact(GROUP, "c-0")
    assert (done["rows"], done["files_before"], done["files_after"]) == (6, 6, PARTITIONS)
    table = holds_each_message_once(pipeline, kafka, topic)
    assert len(list(table.scan().plan_files())) == PARTITIONS
    replace = table.current_snapshot()
    assert replace.summary.operation.value == "replace"
    assert replace.summary[iceberg.RUN_ID] == "compaction.c-0"
    assert replace.summary[iceberg.OFFSETS] == ", ".join(
        f"{p}: [0, {n})" for p, n in sorted(Counter(p for _, p, *_ in consumed(kafka, [topic]))
                                            .items()))
    assert tasks.compact(GROUP, "c-0") == {"compaction": "compaction.c-0", "repeated": True}

    # --to-offset inside the compacted file of partition 0: what is before it stays, the
    # rest is archived again, in one snapshot
    offset = min(r["end"] for r in catalog.open_catalog(
        storage_of(pipeline), config.load(pipeline.config_path), GROUP).rows(topic, 0)[0]
        ["pieces"]) + 3
    rewound = cli(pipeline, "rewind", "--group", GROUP, "--topic", topic, "--partition", "0",
                  "--to-offset", str(offset))
    assert rewound.returncode == 0, rewound.stderr[-2000:]
    assert "compacted into" in rewound.stdout + rewound.stderr
    before_rewind = the_table(pipeline, topic).current_snapshot().snapshot_id
    pipeline.produce(varied_messages(topic, PARTITIONS, 10, seed=80))
    pipeline.run("rewind-offset")
    table = holds_each_message_once(pipeline, kafka, topic)
    assert table.current_snapshot().summary.operation.value == "overwrite"
    assert len(table.scan(snapshot_id=before_rewind).to_arrow()) == 120  # time travel
    kept = catalog.open_catalog(storage_of(pipeline), config.load(pipeline.config_path),
                                GROUP).rows(topic, 0)[0]
    assert kept["start"] == 0 and kept["end"] < offset and kept["pieces"]

    # --to-time: from a message in the middle of the compacted history (every partition)
    compacted = [tasks.compact(GROUP, "c-1")]
    middle = sorted(ts for *_, ts, _ in consumed(kafka, [topic]))[70]  # ms
    rewound = cli(pipeline, "rewind", "--group", GROUP, "--topic", topic, "--to-time",
                  str(middle))
    assert rewound.returncode == 0, rewound.stderr[-2000:]
    pipeline.run("rewind-time")
    holds_each_message_once(pipeline, kafka, topic)

    # a line deleted: partition 1 again from Kafka's earliest offset
    compacted.append(tasks.compact(GROUP, "c-2"))
    token = pipeline.tokens.read(GROUP, topic).token
    lines = (pipeline.token_root / GROUP / f"{topic}.token").read_text().splitlines()
    (pipeline.token_root / GROUP / f"{topic}.token").write_text("\n".join(
        line for line in lines if not line.endswith(f" {topic} 1 {token.offsets[1]}")) + "\n")
    pipeline.run("rewind-line")
    holds_each_message_once(pipeline, kafka, topic)

    # the token deleted
    compacted.append(tasks.compact(GROUP, "c-3"))  # partition 1 alone is new: none to merge
    pipeline.tokens.delete(GROUP, topic)
    pipeline.run("rewind-token")
    table = holds_each_message_once(pipeline, kafka, topic)
    verified(pipeline)

    read = spark_reads(pipeline, jdbc_url, {topic: None}, tmp_path, jdbc_env)[topic]
    assert sorted(map(tuple, read["rows"])) == sorted(
        (p, o, None if v is None else v.hex()) for _, p, o, _, v, *_ in read_in_table(table))
    operations = [op for op, _ in read["snapshots"]]
    assert operations.count("replace") == 1 + sum(1 for c in compacted if c["rows"]) >= 3
    assert operations[-1] == "overwrite", operations


# A compaction's steps, each the last thing a process does before it is SIGKILLed: the
# child patches the step to kill its own process right after it
KILL_POINTS = {
    "lease taken": ("kafka_archive.storage:Storage.put_if", "_compacting.json"),
    "a compacted file uploaded": ("kafka_archive.storage:Storage.upload_file", ""),
    "its record written": ("kafka_archive.storage:Storage.put_bytes", "/compaction.json"),
    "a table's replace snapshot": ("kafka_archive.commit.iceberg:replace_files", ""),
    "its catalog entry": ("kafka_archive.catalog:append", ""),
    "its done record": ("kafka_archive.storage:Storage.put_bytes", "/compacted.json"),
}
KILLED_AFTER = """
import importlib, os, signal, sys
where, name = sys.argv[1].split(":")
owner, _, attribute = name.rpartition(".")
target = importlib.import_module(where)
target = getattr(target, owner) if owner else target
real = getattr(target, attribute)
fired = []  # once: a SIGSTOP's process goes on after SIGCONT (its release writes the lease too)
def killing(*args, **kwargs):
    done = real(*args, **kwargs)
    if not fired and sys.argv[2] in " ".join(map(str, args)):
        fired.append(True)
        os.kill(os.getpid(), signal.SIGKILL)
    return done
setattr(target, attribute, killing)
from kafka_archive.airflow import tasks
tasks.compact(sys.argv[3], sys.argv[4])
"""


def test_a_compaction_killed_at_each_of_its_steps_loses_and_duplicates_nothing(
        airflow_env, kafka, s3, postgres, service_env, unique, tmp_path, monkeypatch):
    pipeline, _ = table_pipeline(service_env, airflow_env, kafka, s3, unique, tmp_path, "ckill")
    topic = archived_twice(pipeline, monkeypatch, seed=90)
    for i, (point, (patched, when)) in enumerate(KILL_POINTS.items()):
        killed = subprocess.run([sys.executable, "-c", KILLED_AFTER, patched, when, GROUP,
                                 f"killed-{i}"], env=pipeline.env, capture_output=True,
                                text=True, timeout=300)
        assert killed.returncode == -signal.SIGKILL, (point, killed.stderr[-3000:])
        assert inflight.compacting(storage_of(pipeline), pipeline.root, GROUP), point
        # the next run's plan gives way to the killed compaction's lease; its compact task
        # (trigger all_done) finishes that compaction's work; the run after goes ahead
        pipeline.produce(varied_messages(topic, PARTITIONS, 10, seed=100 + i))
        with pytest.raises(CompactionUnderWay):
            pipeline.plan(f"gives-way-{i}")
        tasks.compact(GROUP, f"gives-way-{i}")
        assert inflight.compacting(storage_of(pipeline), pipeline.root, GROUP) is None
        consistent(pipeline, topic)
        pipeline.run(f"after-{i}")
        holds_each_message_once(pipeline, kafka, topic)
    table = the_table(pipeline, topic)
    by_id = Counter(s.summary[iceberg.RUN_ID] for s in table.metadata.snapshots)
    assert max(by_id.values()) == 1, by_id  # no compaction (or run) committed twice
    assert {f"compaction.killed-{i}" for i in (3, 4, 5)} <= set(by_id)  # finished, not lost
    verified(pipeline)


def test_a_compaction_and_a_run_racing_keep_each_message_once(
        airflow_env, kafka, s3, postgres, service_env, unique, tmp_path, monkeypatch):
    pipeline, _ = table_pipeline(service_env, airflow_env, kafka, s3, unique, tmp_path, "crace")
    topic = archived_twice(pipeline, monkeypatch, seed=110)
    storage = storage_of(pipeline)
    # a plan in flight: the compaction gives way to it
    pipeline.tokens.delete(GROUP, topic)  # a rewind: its plan moves the rows aside
    plan_url = pipeline.plan("in-flight")
    assert "in flight" in tasks.compact(GROUP, "while-planned")["skipped"]
    pipeline.archive_to_end(plan_url)
    # the compaction and the commit at once, in two processes
    compacting = subprocess.Popen([sys.executable, "-c", "import sys\nfrom kafka_archive.airflow "
                                   "import tasks\nprint(tasks.compact(sys.argv[1], sys.argv[2]))",
                                   GROUP, "racing"], env=pipeline.env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
    pipeline.commit(plan_url)
    out, err = compacting.communicate(timeout=300)
    assert compacting.returncode == 0, err[-3000:]
    holds_each_message_once(pipeline, kafka, topic)

    # a compaction under way (stopped right after taking its lease): the plan gives way
    pipeline.produce(varied_messages(topic, PARTITIONS, 10, seed=120))
    stopped = subprocess.Popen([sys.executable, "-c", KILLED_AFTER.replace("SIGKILL", "SIGSTOP"),
                                "kafka_archive.storage:Storage.put_if", "_compacting.json", GROUP,
                                "stopped"], env=pipeline.env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while inflight.compacting(storage, pipeline.root, GROUP) is None:  # its lease, taken
            assert stopped.poll() is None and time.monotonic() < deadline, stopped.stderr.read()
            time.sleep(0.05)
        with pytest.raises(CompactionUnderWay, match="is being compacted"):
            pipeline.plan("while-compacting")
        assert inflight.holding(storage, pipeline.root, GROUP) is None  # it took its mark off
        skipped = tasks.compact(GROUP, "second")
        assert "is being compacted by compaction.stopped" in skipped["skipped"]
    finally:
        os.kill(stopped.pid, signal.SIGCONT)
    assert stopped.wait(timeout=300) == 0, stopped.stderr.read()[-3000:]
    pipeline.run("while-compacting")  # retried: planned now
    holds_each_message_once(pipeline, kafka, topic)
    verified(pipeline)


def test_a_parsed_groups_compaction_keeps_its_hours_columns_and_dead_letters(
        airflow_env, kafka, s3, unique, tmp_path, monkeypatch):
    from test_iceberg_tables import HOUR_MS, by_offset, json_events, parsed_group

    pipeline = Pipeline(
        airflow_env, kafka, s3, f"cparsed{unique}", tmp_path,
        group_extra=parsed_group("namespace: archive, compact_after: 0"),
        extra=f"iceberg_catalogs: {{local: {{type: sql, uri: 'sqlite:///{tmp_path}/c.db'}}}}\n")
    topic = pipeline.create_topic("events", 3)
    start_ms = (int(time.time() * 1000) // HOUR_MS - 8) * HOUR_MS
    pipeline.in_env(monkeypatch)  # (the test reads the archive in this process)
    for i in range(2):
        pipeline.produce(json_events(topic, 60, start_ms, seed=60 * i))
        pipeline.run(f"run-{i}")
    # a field none had before: the table gains a column (schema evolution) in run-2
    pipeline.produce((topic, i % 3, None, json.dumps({"ts": start_ms + i * 60_000,
                                                      "color": f"c{i}"}).encode(), [])
                     for i in range(9))
    pipeline.run("run-2")
    tables = connections.iceberg_tables(config.load(pipeline.config_path))
    table, dead = tables.find(GROUP, topic), tables.find(GROUP, topic, dead_letters=True)
    before = (by_offset(table), by_offset(dead))
    files_before = (len(list(table.scan().plan_files())), len(list(dead.scan().plan_files())))

    done = tasks.compact(GROUP, "c-0")
    table.refresh()
    dead.refresh()
    assert (by_offset(table), by_offset(dead)) == before  # the same rows, values and nulls
    assert "color" in {f.name for f in table.schema().fields}
    assert before[0][next(k for k, r in before[0].items() if r["color"])]["color"]
    files = {t.file.file_path: t.file for t in table.scan().plan_files()}
    for path, data_file in files.items():  # each file one hour and one Kafka partition
        import pyarrow.parquet as pq

        with table.io.new_input(path).open() as stream:
            rows = pq.read_table(stream).to_pylist()
        assert {int(r["event_time"].timestamp() // 3600) for r in rows} == {data_file.partition[0]}
        assert len({r["kafka"]["partition"] for r in rows}) == 1
        assert [r["kafka"]["offset"] for r in rows] == sorted(r["kafka"]["offset"] for r in rows)
    hours_and_partitions = {(r["kafka"]["partition"], int(r["event_time"].timestamp() // 3600))
                            for r in before[0].values()}
    assert len(files) == len(hours_and_partitions) < files_before[0]
    assert len(list(dead.scan().plan_files())) == 3 < files_before[1]  # one per partition
    for t in (table, dead):
        assert t.current_snapshot().summary.operation.value == "replace"
    assert done["files_after"] == len(files) + 3

    rewound = cli(pipeline, "rewind", "--group", GROUP, "--topic", topic, "--partition", "1",
                  "--to-offset", "25")
    assert rewound.returncode == 0, rewound.stderr[-2000:]
    pipeline.run("rewind")
    table.refresh()
    dead.refresh()
    assert (by_offset(table), by_offset(dead)) == before
    verified(pipeline)
