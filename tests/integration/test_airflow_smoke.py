"""`airflow dags test` runs a DAG from dags/ that imports the library from plugins/ and
talks to the real Kafka and S3 servers."""

import json
import re
import subprocess
import sys
from pathlib import Path

from tests.support.pipeline import airflow
from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from kafka_archive.audit.producer import check_monitoring_topic
from kafka_archive.config import Audit


def test_dags_test_runs_preflight_dag_against_real_services(airflow_env, kafka, s3, smtp_maildir,
                                                            spark_connect, unique):
    topic = f"preflight-{unique}"
    admin = KafkaAdminClient(bootstrap_servers=kafka)
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    admin.close()
    # the example config's monitoring topic, as the README says to create it
    check_monitoring_topic(Audit().topic, True, {"bootstrap_servers": kafka})
    prefix = f"smoke-{unique}"
    env = {**airflow_env, "KAFKA_ARCHIVE_ROOT": f"s3://{s3.bucket}/{prefix}"}

    airflow(env, "dags", "test", "kafka_archive_preflight")

    report = json.loads(s3.client.get_object(
        Bucket=s3.bucket, Key=f"{prefix}/_preflight/report.json")["Body"].read())
    assert topic in report["topics"]
    assert report["bootstrap_servers"] == kafka
    assert report["run_id"].startswith("manual__")  # written by the DAG run, not the CLI
    checks = report["checks"]
    assert checks["monitoring_topic"] == f"ok: {Audit().topic}", checks
    assert checks["smtp"].startswith("ok: 127.0.0.1:"), checks
    assert checks["token_root"].startswith("ok: ") and checks["kafka_client"].startswith("ok: ")
    # the example config's groups run over Connect: its server took a job (issue 57)
    connect = checks["spark_connect kafka_archive_spark_connect"]
    assert re.fullmatch(r"ok: 127\.0\.0\.1:\d+ \(connection kafka_archive_spark_connect\): "
                        r"2 cores", connect), connect


def test_preflight_names_a_connect_server_that_does_not_answer(airflow_env, kafka, s3, unique,
                                                               tmp_path):
    """A group's `spark_connect` naming a server nobody runs: preflight says so, by name."""
    config = tmp_path / "kafka-archive.yaml"
    config.write_text(f"kafka: {{bootstrap_servers: '{kafka}'}}\n"
                      f"archive_root: s3://{s3.bucket}/pre-{unique}\ntoken_root: {tmp_path}/tokens\n"
                      "groups: {billing: {spark_connect: nowhere_connect}}\n")
    env = {**airflow_env, "KAFKA_ARCHIVE_CONFIG": str(config),
           "AIRFLOW_CONN_NOWHERE_CONNECT": json.dumps({"conn_type": "spark_connect",
                                                       "host": "127.0.0.1", "port": 1})}
    result = subprocess.run([str(Path(sys.executable).parent / "kafka-archive"), "preflight"],
                            env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 1, result.stdout
    assert "spark_connect nowhere_connect: the Spark Connect server at 127.0.0.1:1 cannot be " \
           "reached" in result.stderr, result.stderr[-2000:]


def test_preflight_names_every_check_that_fails(airflow_env, kafka, s3, unique, tmp_path):
    """A monitoring topic nobody created and an SMTP server nobody listens on."""
    config = tmp_path / "kafka-archive.yaml"
    config.write_text(f"kafka: {{bootstrap_servers: '{kafka}'}}\n"
                      f"archive_root: s3://{s3.bucket}/pre-{unique}\ntoken_root: {tmp_path}/tokens\n"
                      f"audit: {{topic: _mon-missing-{unique}}}\n"
                      "alerts: {smtp_conn_id: kafka_archive_smtp_nowhere}\n")
    env = {**airflow_env, "KAFKA_ARCHIVE_CONFIG": str(config),
           "AIRFLOW_CONN_KAFKA_ARCHIVE_SMTP_NOWHERE": "smtp://127.0.0.1:1"}
    result = subprocess.run([str(Path(sys.executable).parent / "kafka-archive"), "preflight"],
                            env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stdout
    assert f"monitoring_topic: the audit's monitoring topic '_mon-missing-{unique}' does not " \
           "exist" in result.stderr
    assert "smtp: " in result.stderr and "token_root" not in result.stderr, result.stderr
