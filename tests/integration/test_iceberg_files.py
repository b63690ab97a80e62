"""The real Spark job's Parquet files (format kind parquet) registered in an Iceberg table
on MinIO through pyiceberg's SQL catalog (SQLite), read back whole (issue 32, first part:
the pipeline does not commit to tables yet; this proves its files are what a table takes)."""

from __future__ import annotations

from test_backup_archive import consumed, varied_messages
from test_rewind_cli import cli, run

from kafka_archive.commit import iceberg
from tests.support import localservices
from tests.support.pipeline import Pipeline

PARTITIONS = 3


def table_on_minio(pipeline: Pipeline, tmp_path):
    env = localservices.local_env()
    key, secret = localservices._s3_credentials(env)
    return iceberg.open_table("archive", {
        "type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db",
        "warehouse": f"{pipeline.root}/_warehouse", "s3.endpoint": localservices.s3_endpoint(env),
        "s3.access-key-id": key, "s3.secret-access-key": secret, "s3.region": "us-east-1"},
        "archive.events", iceberg.key_value_schema(), iceberg.key_value_spec())


def test_the_jobs_parquet_files_make_an_iceberg_table_holding_each_message_once(
        airflow_env, kafka, s3, unique, tmp_path, monkeypatch):
    pipeline = Pipeline(airflow_env, kafka, s3, f"ice{unique}", tmp_path,
                        group_extra="format: {kind: parquet}\n")
    topic = pipeline.create_topic("events", PARTITIONS)
    pipeline.produce(varied_messages(topic, PARTITIONS, 300, seed=32))
    run(pipeline, monkeypatch, "first")  # plan, the Spark job, commit
    files = [f"{pipeline.root}/{path}" for path in pipeline.data_files()]
    assert files and all(f.endswith(".parquet") for f in files)
    checked = cli(pipeline, "verify", "--group", "backup", "--full")  # reads every file
    assert checked.returncode == 0 and " 0 errors" in checked.stdout, checked.stdout[-2000:]

    table = table_on_minio(pipeline, tmp_path)
    snapshot = iceberg.commit_run(table, "first", files)
    assert iceberg.commit_run(table, "first", files).snapshot_id == snapshot.snapshot_id
    rows = table.scan().to_arrow().to_pylist()
    read = {(r["kafka"]["topic"], r["kafka"]["partition"], r["kafka"]["offset"], r["key"],
             r["value"], round(r["kafka"]["timestamp"].timestamp() * 1000),
             tuple((h["name"], h["value"]) for h in r["headers"])) for r in rows}
    assert len(rows) == len(read) == 300  # each message once
    assert read == consumed(kafka, [topic])  # keys, values, tombstones, times, headers
    by_partition = {t.file.partition[0] for t in table.scan(
        row_filter="kafka.partition == 2").plan_files()}
    assert by_partition == {2}  # pruned by the partition value from the footer
