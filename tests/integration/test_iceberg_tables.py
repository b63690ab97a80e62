"""A table group on the real services (issue 32): the Spark job's Parquet files enter
each topic's Iceberg table (pyiceberg's SQL catalog on SQLite, embedded, or on the local
PostgreSQL, as a deployment has it; files on MinIO) at commit,
each message once; a rewind by deleting the token file is one overwrite snapshot, the old
snapshot still readable; Spark finds and reads the table through Iceberg's JdbcCatalog."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest

from test_backup_archive import consumed, varied_messages
from test_replay import in_order, new_topic
from test_rewind_cli import cli, run

from kafka_archive import spark
from kafka_archive.airflow import connections
from kafka_archive.commit import iceberg
from tests.support import localservices
from tests.support.pipeline import GROUP, Pipeline

PARTITIONS = 3
ICEBERG_JARS = Path(__file__).resolve().parents[2] / ".cache" / "jars" / "spark-iceberg"


def read_in_table(table) -> set[tuple]:
    return {(r["kafka"]["topic"], r["kafka"]["partition"], r["kafka"]["offset"], r["key"],
             r["value"], round(r["kafka"]["timestamp"].timestamp() * 1000),
             tuple((h["name"], h["value"]) for h in r["headers"]))
            for r in table.scan().to_arrow().to_pylist()}


def spark_reads(pipeline: Pipeline, jdbc_url: str, topic: str, tmp_path: Path,
                jdbc_env: dict[str, str]) -> dict:
    out = tmp_path / "spark-read.json"
    result = subprocess.run(
        [str(spark.spark_home() / "bin" / "spark-submit"), "--master", "local[2]",
         "--conf", "spark.ui.enabled=false",
         "--jars", ",".join(str(j) for j in sorted(ICEBERG_JARS.glob("*.jar"))),
         str(Path(__file__).parent / "jobs" / "read_iceberg_table.py"), jdbc_url,
         pipeline.root, localservices.s3_endpoint(localservices.local_env()), "archive", topic,
         str(out)],
        env={**os.environ, **spark.submit_env(), **connections.s3_environment("kafka_archive_s3"),
             **jdbc_env},
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, "\n".join(  # Spark's INFO lines bury the error
        line for line in (result.stdout + result.stderr).splitlines() if " INFO " not in line)[-5000:]
    return json.loads(out.read_text())


@pytest.fixture(params=["sqlite", "postgres"])
def catalog(request, service_env, tmp_path) -> tuple[str, str, dict[str, str]]:
    """The catalog's SQLAlchemy URL (in the config), JDBC URL and JDBC credentials (Spark)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/catalog.db", f"jdbc:sqlite:{tmp_path}/catalog.db", {}
    url = request.getfixturevalue("postgres")
    database = f"iceberg{uuid.uuid4().hex[:8]}"  # a catalog of its own: tables of one test
    localservices.create_database(service_env, database)
    return (url.rsplit("/", 1)[0] + f"/{database}",
            f"jdbc:postgresql://127.0.0.1:{service_env['KAFKA_ARCHIVE_POSTGRES_PORT']}/{database}",
            {"JDBC_USER": localservices.POSTGRES_USER,
             "JDBC_PASSWORD": service_env["KAFKA_ARCHIVE_POSTGRES_PASSWORD"]})


def test_a_table_group_holds_each_message_once_and_a_rewind_is_one_snapshot(
        airflow_env, kafka, s3, unique, tmp_path, monkeypatch, catalog):
    uri, jdbc_url, jdbc_env = catalog
    pipeline = Pipeline(airflow_env, kafka, s3, f"ice{unique}", tmp_path,
                        group_extra="format: {kind: parquet}\ntable: {namespace: archive}\n",
                        extra=f"iceberg_catalogs: {{local: {{type: sql, uri: '{uri}'}}}}\n")
    topic = pipeline.create_topic("events", PARTITIONS)
    pipeline.produce(varied_messages(topic, PARTITIONS, 300, seed=32))
    run(pipeline, monkeypatch, "first")  # plan, the Spark job, commit: as the DAG's tasks
    table = connections.iceberg_tables(pipeline_config(pipeline)).table(GROUP, topic)
    assert read_in_table(table) == consumed(kafka, [topic])  # keys, values, times, headers
    assert len(table.scan().to_arrow()) == 300  # each message once
    [first] = table.metadata.snapshots
    assert first.summary[iceberg.RUN_ID] == "first"

    pipeline.tokens.delete(GROUP, topic)  # the README's rewind: delete the token file
    pipeline.produce(varied_messages(topic, PARTITIONS, 30, seed=33))
    run(pipeline, monkeypatch, "second")
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
    if uri.startswith("sqlite"):  # replay reads a table group's files, whatever the catalog
        copy = new_topic(kafka, f"copy{unique}")
        replayed = cli(pipeline, "replay", "--group", GROUP, "--topic", topic, "--to-topic", copy)
        assert replayed.returncode == 0, replayed.stdout[-2000:] + replayed.stderr[-2000:]
        assert in_order(kafka, copy) == in_order(kafka, topic)

    read = spark_reads(pipeline, jdbc_url, topic, tmp_path, jdbc_env)  # an independent engine
    assert sorted(map(tuple, read["rows"])) == sorted(
        (p, o, None if v is None else v.hex()) for _, p, o, _, v, *_ in read_in_table(table))
    assert read["snapshots"] == [["append", "first"], ["overwrite", "second"]]
    assert read["records_at_first_snapshot"] == 300


def pipeline_config(pipeline: Pipeline):
    from kafka_archive import config

    return config.load(pipeline.config_path)
