"""A table group on the real services (issue 32): the Spark job's Parquet files enter
each topic's Iceberg table (pyiceberg's SQL catalog on SQLite, embedded, or on the local
PostgreSQL, or a REST catalog whose token is in an Airflow connection, as a deployment
has them; files on MinIO) at commit,
each message once; a rewind by deleting the token file is one overwrite snapshot, the old
snapshot still readable; Spark finds and reads the table through Iceberg's JdbcCatalog."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

import pytest

from test_backup_archive import consumed, varied_messages
from test_replay import in_order, new_topic
from test_rewind_cli import cli

from kafka_archive import spark
from kafka_archive.airflow import connections
from kafka_archive.commit import iceberg
from tests.support import localservices
from tests.support.pipeline import GROUP, Pipeline, compact_log

PARTITIONS = 3
ICEBERG_JARS = Path(__file__).resolve().parents[2] / ".cache" / "jars" / "spark-iceberg"


def read_in_table(table) -> set[tuple]:
    return {(r["kafka"]["topic"], r["kafka"]["partition"], r["kafka"]["offset"], r["key"],
             r["value"], round(r["kafka"]["timestamp"].timestamp() * 1000),
             tuple((h["name"], h["value"]) for h in r["headers"]))
            for r in table.scan().to_arrow().to_pylist()}


def spark_reads(pipeline: Pipeline, jdbc_url: str, tables: dict[str, str | None],
                tmp_path: Path, jdbc_env: dict[str, str]) -> dict[str, dict]:
    """What Spark SQL reads of each table (name -> the SQL expression read beside each
    row's Kafka partition and offset; None: the value as hex), in one Spark job: per
    table its rows, its snapshots and the count at the first."""
    out = tmp_path / f"spark-read-{len(list(tmp_path.glob('spark-read-*')))}.json"
    result = subprocess.run(
        [str(spark.spark_home() / "bin" / "spark-submit"), "--master", "local[2]",
         "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.session.timeZone=UTC",
         "--driver-java-options", " ".join(localservices.jvm_trust_options()),
         "--jars", ",".join(str(j) for j in sorted(ICEBERG_JARS.glob("*.jar"))),
         str(Path(__file__).parent / "jobs" / "read_iceberg_table.py"), jdbc_url,
         pipeline.root, localservices.s3_endpoint(localservices.local_env()), "archive",
         str(out), *(f"{name}={expression}" if expression else name
                     for name, expression in tables.items())],
        env={**os.environ, **spark.submit_env(), **connections.s3_environment("kafka_archive_s3"),
             **jdbc_env},
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, "\n".join(  # Spark's INFO lines bury the error
        line for line in (result.stdout + result.stderr).splitlines() if " INFO " not in line)[-5000:]
    return json.loads(out.read_text())


@pytest.fixture(params=["sqlite", "postgres", "rest"])
def catalog(request, service_env, tmp_path) -> tuple[str, str, dict[str, str], dict[str, str]]:
    """The catalog's properties (in the config), its JDBC (or REST) URL and credentials
    for Spark, and the Airflow connections it needs (the REST catalog's token is in one,
    not in the config)."""
    if request.param == "sqlite":
        return (f"{{type: sql, uri: 'sqlite:///{tmp_path}/catalog.db'}}",
                f"jdbc:sqlite:{tmp_path}/catalog.db", {}, {})
    if request.param == "rest":
        url = request.getfixturevalue("iceberg_rest")
        token = localservices.iceberg_rest_token(service_env)
        return (f"{{type: rest, uri: '{url}', conn_id: iceberg_rest}}", url, {"REST_TOKEN": token},
                {"AIRFLOW_CONN_ICEBERG_REST": json.dumps(
                    {"conn_type": "generic", "extra": {"token": token}})})
    url = request.getfixturevalue("postgres")
    database = f"iceberg{uuid.uuid4().hex[:8]}"  # a catalog of its own: tables of one test
    localservices.create_database(service_env, database)
    return (f"{{type: sql, uri: '{url.rsplit('/', 1)[0]}/{database}'}}",
            f"jdbc:postgresql://127.0.0.1:{service_env['KAFKA_ARCHIVE_POSTGRES_PORT']}/{database}",
            {"JDBC_USER": localservices.POSTGRES_USER,
             "JDBC_PASSWORD": service_env["KAFKA_ARCHIVE_POSTGRES_PASSWORD"]}, {})


def test_a_table_group_holds_each_message_once_and_a_rewind_is_one_snapshot(
        airflow_env, kafka, s3, unique, tmp_path, monkeypatch, catalog):
    properties, jdbc_url, jdbc_env, connections_env = catalog
    pipeline = Pipeline({**airflow_env, **connections_env}, kafka, s3, f"ice{unique}", tmp_path,
                        group_extra="format: {kind: parquet}\ntable: {namespace: archive}\n",
                        extra=f"iceberg_catalogs: {{local: {properties}}}\n")
    topic = pipeline.create_topic("events", PARTITIONS)
    pipeline.produce(varied_messages(topic, PARTITIONS, 300, seed=32))
    pipeline.in_env(monkeypatch)  # (the test reads the archive in this process)
    pipeline.run("first")  # plan, the Spark job, commit: as the DAG's tasks
    table = connections.iceberg_tables(pipeline_config(pipeline)).table(GROUP, topic)
    assert read_in_table(table) == consumed(kafka, [topic])  # keys, values, times, headers
    assert len(table.scan().to_arrow()) == 300  # each message once
    [first] = table.metadata.snapshots
    assert first.summary[iceberg.RUN_ID] == "first"

    pipeline.tokens.delete(GROUP, topic)  # the README's rewind: delete the token file
    pipeline.produce(varied_messages(topic, PARTITIONS, 30, seed=33))
    pipeline.run("second")
    table.refresh()
    assert read_in_table(table) == consumed(kafka, [topic])
    assert len(table.scan().to_arrow()) == 330
    assert [(s.summary.operation.value, s.summary[iceberg.RUN_ID])
            for s in table.metadata.snapshots] == [("append", "first"), ("overwrite", "second")]
    assert len(table.scan(snapshot_id=first.snapshot_id).to_arrow()) == 300  # time travel
    checked = cli(pipeline, "verify", "--group", GROUP, "--full")  # reads every file
    assert checked.returncode == 0 and " 0 errors" in checked.stdout, checked.stdout[-3000:]
    assert f"table archive.{topic}: 330 records in {PARTITIONS} files" in checked.stdout

    listed = cli(pipeline, "tables", "--group", GROUP, "--per-hour")
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert f"archive.{topic}: 330 records in {PARTITIONS} files" in listed.stdout
    assert "overwrite second" in listed.stdout
    if "sqlite" in properties:  # replay reads a table group's files, whatever the catalog
        copy = new_topic(kafka, f"copy{unique}")
        replayed = cli(pipeline, "replay", "--group", GROUP, "--topic", topic, "--to-topic", copy)
        assert replayed.returncode == 0, replayed.stdout[-2000:] + replayed.stderr[-2000:]
        assert in_order(kafka, copy) == in_order(kafka, topic)

    read = spark_reads(pipeline, jdbc_url, {topic: None}, tmp_path, jdbc_env)[topic]
    assert sorted(map(tuple, read["rows"])) == sorted(
        (p, o, None if v is None else v.hex()) for _, p, o, _, v, *_ in read_in_table(table))
    assert read["snapshots"] == [["append", "first"], ["overwrite", "second"]]
    assert read["records_at_first_snapshot"] == 300


def pipeline_config(pipeline: Pipeline):
    from kafka_archive import config

    return config.load(pipeline.config_path)


HOUR_MS = 3_600_000


def json_events(topic: str, count: int, start_ms: int, seed: int):
    """JSON events over five hours of event time, one of them hours late, in 3 Kafka
    partitions whose `qty` is an integer in one, a fraction in another, and once text;
    and messages no table row can hold: bytes that are no JSON, an event without time."""
    for i in range(seed, seed + count):
        partition = i % 3
        at = start_ms + (i % 5) * HOUR_MS - (6 * HOUR_MS if i % 13 == 0 else 0)
        qty = {0: i, 1: i + 0.5, 2: "many" if i % 9 == 2 else i}[partition]
        event = {"ts": at, "user": f"u{i % 4}", "qty": qty, "meta": {"i": i}}
        value = (b"\xff\x00binary" if i % 7 == 0 else json.dumps({"no_ts": i}).encode()
                 if i % 11 == 0 else json.dumps(event).encode())
        yield topic, partition, f"k{i}".encode(), value, [("h", bytes([i % 256]))]


def parsed_group(table: str) -> str:
    """An event-time table group's settings (JSON events, hours) with these table ones."""
    return ("layout: {kind: event_time, granularity: hour}\n"
            "parser: {kind: json, field: ts, unit: ms}\nformat: {kind: parquet}\n"
            f"table: {{{table}}}\n")


def by_offset(table) -> dict[tuple[int, int], dict]:
    return {(r["kafka"]["partition"], r["kafka"]["offset"]): r
            for r in table.scan().to_arrow().to_pylist()}


def test_an_event_time_table_group_holds_fields_as_columns_and_dead_letters_beside(
        airflow_env, kafka, s3, unique, tmp_path, monkeypatch):
    catalog_db = tmp_path / "catalog.db"
    pipeline = Pipeline(
        airflow_env, kafka, s3, f"parsed{unique}", tmp_path,
        group_extra=parsed_group("namespace: archive, columns: {user: string}"),
        extra=f"iceberg_catalogs: {{local: {{type: sql, uri: 'sqlite:///{catalog_db}'}}}}\n")
    topic = pipeline.create_topic("events", 3)
    start_ms = (int(time.time() * 1000) // HOUR_MS - 8) * HOUR_MS
    pipeline.produce(json_events(topic, 120, start_ms, seed=0))
    pipeline.in_env(monkeypatch)  # (the test reads the archive in this process)
    pipeline.run("first")
    tables = connections.iceberg_tables(pipeline_config(pipeline))
    table, dead = tables.find(GROUP, topic), tables.find(GROUP, topic, dead_letters=True)

    def check(expected_total: int) -> tuple[dict, dict]:
        kafka_held = {(p, o): (k, v, ts, h) for _, p, o, k, v, ts, h in consumed(kafka, [topic])}
        rows, letters = by_offset(table), by_offset(dead)
        assert not set(rows) & set(letters)  # each message in one table, never both
        assert set(rows) | set(letters) == set(kafka_held) and len(kafka_held) == expected_total
        for at, row in rows.items():
            key, value, ts, headers = kafka_held[at]
            event = json.loads(value)
            assert (row["user"], row["qty"], json.loads(row["meta"])) == (
                event["user"], float(event["qty"]), event["meta"])
            assert row["event_time"].timestamp() * 1000 == event["ts"]
            assert round(row["kafka"]["timestamp"].timestamp() * 1000) == ts
        for at, letter in letters.items():  # complete: the message as Kafka holds it
            key, value, ts, headers = kafka_held[at]
            assert (letter["key"], letter["value"], round(letter["kafka"]["timestamp"]
                                                          .timestamp() * 1000)) == (key, value, ts)
            assert tuple((h["name"], h["value"]) for h in letter["headers"]) == headers
            assert letter["reason"]
        return rows, letters

    rows, letters = check(120)
    reasons = [letter["reason"] for letter in letters.values()]
    assert any("not a JSON object" in r for r in reasons)
    assert any("no field 'ts'" in r for r in reasons)
    # qty was an integer in one partition, a fraction in another: double for all; text
    # fits neither
    assert any("'qty' = \"many\" does not fit column type double" in r for r in reasons)
    assert {f.name: str(f.field_type) for f in table.schema().fields if f.name != "kafka"} == {
        "event_time": "timestamptz", "user": "string", "ts": "long", "qty": "double",
        "meta": "string"}
    hours = {f.partition[0] for f in iceberg.current_files(table, []).values()}
    assert hours == {r["event_time"].timestamp() // 3600 for r in rows.values()}  # late too

    pipeline.tokens.delete(GROUP, topic)  # the README's rewind, with news since
    second_at = time.time()
    pipeline.produce(json_events(topic, 30, start_ms, seed=120))
    pipeline.run("second")
    table.refresh()
    dead.refresh()
    archived = check(150)

    # every other kind of rewind: each leaves the tables as a fresh archive of the same
    # offsets, in one snapshot per run
    done = cli(pipeline, "rewind", "--group", GROUP, "--topic", topic, "--partition", "1",
               "--to-offset", "20")
    assert done.returncode == 0, done.stderr
    pipeline.run("to-offset")
    when = datetime.fromtimestamp(second_at, timezone.utc).isoformat()
    done = cli(pipeline, "rewind", "--group", GROUP, "--topic", topic, "--to-time", when)
    assert done.returncode == 0, done.stderr
    pipeline.run("to-time")
    token = pipeline.token_root / GROUP / f"{topic}.token"
    token.write_text("".join(line for line in token.read_text().splitlines(keepends=True)
                             if not line.endswith(f" {topic} 2 {50}\n")))  # a line deleted
    pipeline.run("line-deleted")
    table.refresh()
    dead.refresh()
    assert check(150) == archived
    assert [(s.summary.operation.value, s.summary[iceberg.RUN_ID])
            for s in table.metadata.snapshots] == [
        ("append", "first"), *(("overwrite", run_id) for run_id in (
            "second", "to-offset", "to-time", "line-deleted"))]
    checked = cli(pipeline, "verify", "--group", GROUP, "--full")
    assert checked.returncode == 0 and " 0 errors" in checked.stdout, checked.stdout[-3000:]
    listed = cli(pipeline, "tables", "--group", GROUP)
    assert f"archive.{topic}: {len(by_offset(table))} records" in listed.stdout, listed.stdout
    assert f"archive.{topic}_dlq: {len(by_offset(dead))} records" in listed.stdout

    read = spark_reads(pipeline, f"jdbc:sqlite:{catalog_db}", {  # an independent engine
        topic: "to_json(named_struct('user', user, 'qty', qty, 'hour', "
               "date_format(event_time, 'yyyy-MM-dd HH')))",
        topic + "_dlq": "reason"}, tmp_path, {})
    rows = by_offset(table)
    assert {(p, o): json.loads(v) for p, o, v in read[topic]["rows"]} == {
        at: {"user": r["user"], "qty": r["qty"],
             "hour": r["event_time"].strftime("%Y-%m-%d %H")} for at, r in rows.items()}
    assert read[topic]["snapshots"][:2] == [["append", "first"], ["overwrite", "second"]]
    assert sorted(map(tuple, read[topic + "_dlq"]["rows"])) == sorted(
        (p, o, r["reason"]) for (p, o), r in by_offset(dead).items())


@pytest.mark.parametrize("shape", ["key_value", "parsed"])
def test_a_rewind_over_a_compacted_log_keeps_every_row_the_table_held(
        shape, airflow_env, kafka, s3, unique, tmp_path, monkeypatch):
    """Kafka's log cleaner removes a key's older messages after they were archived; a
    rewind then archives the partition again from Kafka. A key_value table's rewind takes
    the removed messages from the files it replaces; a parsed table's (no message bytes to
    parse again) copies their rows; the dead letters likewise."""
    catalog_db = tmp_path / "catalog.db"
    table_spec = "namespace: archive"
    pipeline = Pipeline(
        airflow_env, kafka, s3, f"cleaned{unique}", tmp_path,
        group_extra=(parsed_group(table_spec) if shape == "parsed"
                     else f"format: {{kind: parquet}}\ntable: {{{table_spec}}}\n"),
        extra=f"iceberg_catalogs: {{local: {{type: sql, uri: 'sqlite:///{catalog_db}'}}}}\n")
    topic = pipeline.create_topic("cleaned", 1)
    start_ms = (int(time.time() * 1000) // HOUR_MS - 3) * HOUR_MS
    pipeline.produce((topic, 0, f"k{i % 4}".encode(), b"\xffnot json" if i % 7 == 3 else
                      json.dumps({"ts": start_ms + (i % 3) * HOUR_MS, "i": i}).encode(),
                      [("n", str(i).encode())]) for i in range(24))
    pipeline.in_env(monkeypatch)  # (the test reads the archive in this process)
    pipeline.run("first")
    tables = connections.iceberg_tables(pipeline_config(pipeline))
    held = {kind: tables.find(GROUP, topic, dead_letters=kind == "dlq")
            for kind in (("rows", "dlq") if shape == "parsed" else ("rows",))}

    def contents() -> dict[str, dict]:
        for table in held.values():
            table.refresh()
        return {kind: by_offset(table) for kind, table in held.items()}

    first = contents()
    assert sum(map(len, first.values())) == 24
    assert compact_log(kafka, topic, below=24) < 24  # Kafka no longer holds them all

    pipeline.tokens.delete(GROUP, topic)
    pipeline.run("second")
    after = contents()
    for kind, rows in first.items():  # each row as the first run wrote it
        assert {at: after[kind].get(at) for at in rows} == rows
    archived = {o for rows in after.values() for _, o in rows}
    in_kafka = {o for _, _, o, *_ in consumed(kafka, [topic])}  # with what rolled segments
    assert archived == in_kafka | {o for rows in first.values() for _, o in rows}
    assert sum(map(len, after.values())) == len(archived)  # each message once
    checked = cli(pipeline, "verify", "--group", GROUP, "--full")
    assert checked.returncode == 0 and " 0 errors" in checked.stdout, checked.stdout[-3000:]
