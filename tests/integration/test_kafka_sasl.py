"""Archiving from a broker that wants a login: the local broker's SASL_PLAINTEXT listener
with SCRAM-SHA-512 (tests/support/localservices.py), the user and password from the environment
through ${...} references in `kafka.properties`, or from an Airflow connection of the
Kafka provider's type (`kafka.conn_id`), used by the plan (kafka-python) and the Spark
job (librdkafka). The password must appear in no task log, Spark log or
mail; a login with a wrong password is refused by the broker."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import KafkaError

from tests.support import localservices
from tests.support.mail import alerting_pipeline, html_of, mails_to, wait_for_mail
from tests.support.pipeline import Pipeline, airflow, run_dag

SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
# as an operator writes it: no secret in the file, ${ENV} references only
SASL_PROPERTIES = {
    "security.protocol": "SASL_PLAINTEXT",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.jaas.config": f'{SCRAM} required username="${{KAFKA_ARCHIVE_KAFKA_USER}}" '
                        f'password="${{KAFKA_ARCHIVE_KAFKA_PASSWORD}}";',
}


@pytest.fixture
def sasl_pipeline(airflow_env, kafka, s3, smtp_maildir, service_env, unique, tmp_path):
    """A pipeline whose archive logs in on the SASL listener; the freshness SLA is short
    and a run takes 5 messages per partition, so the run also sends a mail."""
    made = alerting_pipeline(airflow_env, kafka, s3, smtp_maildir, f"sasl{unique}", tmp_path,
                             policy="max_records: 5, freshness: 1m",
                             bootstrap=localservices.kafka_sasl_bootstrap(service_env),
                             kafka_properties=SASL_PROPERTIES)
    made.password = service_env["KAFKA_ARCHIVE_KAFKA_PASSWORD"]
    return made


def test_archives_through_the_scram_listener_and_never_shows_the_password(sasl_pipeline, kafka):
    pipeline = sasl_pipeline
    assert "${KAFKA_ARCHIVE_KAFKA_PASSWORD}" in pipeline.config_path.read_text()
    assert pipeline.password not in pipeline.config_path.read_text()
    topic = pipeline.create_topic("secured", 2)
    old_ms = int(time.time() * 1000) - 30 * 60_000  # a message a minute from 30 min ago
    producer = KafkaProducer(bootstrap_servers=kafka, acks="all")
    for i in range(16):  # 5 of 8 per partition archived: the rest lag past the 1m SLA
        producer.send(topic, value=f"m{i}".encode(), partition=i % 2,
                      timestamp_ms=old_ms + i * 60_000)
    producer.flush()
    producer.close()

    outcome = run_dag(pipeline)  # fails in its last task only: the freshness SLA is missed
    assert outcome.returncode == 0 or "AirflowFailException: archive freshness past its SLA" \
        in pipeline.dag_output, pipeline.dag_output[-3000:]
    assert pipeline.token_offsets() == {topic: {0: 5, 1: 5}}
    archived = pipeline.archived_records()
    assert sorted((p, o, v) for _, p, o, _, v, _, _ in archived) == sorted(
        (i % 2, i // 2, f"m{i}".encode()) for i in range(16) if i // 2 < 5)
    _, mail = wait_for_mail(pipeline, "freshness past SLA")  # its figures came over SASL too
    assert f"{topic}: lag" in html_of(mail)

    # the places a password could leak to; the Spark job's log is part of the task log
    logs = Path(pipeline.env["AIRFLOW_HOME"]) / "logs"
    texts = {"dags test output (task logs, spark-submit output)": pipeline.dag_output,
             **{f"mail {m['Subject']}": m.as_string() + html_of(m) for _, m in mails_to(pipeline)},
             **{str(p): p.read_text(errors="replace") for p in logs.rglob("*") if p.is_file()}}
    assert "SparkContext" in pipeline.dag_output and "spark-submit" in pipeline.dag_output
    for where, text in texts.items():
        assert pipeline.password not in text, f"the Kafka password appears in {where}"


@pytest.mark.parametrize("kept_in", ["AIRFLOW_CONN_ variable", "metadata database"])
def test_archives_with_the_credentials_of_an_airflow_connection(
        kept_in, airflow_env, kafka, s3, service_env, unique, tmp_path):
    """The config names a connection and holds no Kafka setting; the connection is Airflow's
    own variable, or one made in Airflow's database as the UI's form makes it."""
    user, password = localservices.kafka_sasl_credentials(service_env)
    conn_id = f"kafka_scram_{unique}"
    extra = {"bootstrap.servers": localservices.kafka_sasl_bootstrap(service_env),
             "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
             "sasl.username": user, "sasl.password": password, "group.id": "other-operators"}
    env = {k: v for k, v in airflow_env.items() if k != "KAFKA_ARCHIVE_KAFKA_PASSWORD"}
    if kept_in == "metadata database":  # the password in its field, masked and encrypted
        fields = {k: v for k, v in extra.items() if k not in ("sasl.username", "sasl.password")}
        airflow(env, "connections", "add", conn_id, "--conn-type", "kafka", "--conn-login", user,
                "--conn-password", password, "--conn-extra", json.dumps(fields))
    else:
        env[f"AIRFLOW_CONN_{conn_id.upper()}"] = json.dumps({"conn_type": "kafka", "extra": extra})
    pipeline = Pipeline(env, kafka, s3, f"conn{unique}", tmp_path, policy="max_records: 4",
                        kafka_conn_id=conn_id)
    assert password not in pipeline.config_path.read_text()
    topic = pipeline.create_topic("secured", 2)
    pipeline.produce([(topic, i % 2, None, f"m{i}".encode(), []) for i in range(10)])

    outcome = run_dag(pipeline)
    assert outcome.returncode == 0, pipeline.dag_output[-3000:]
    assert pipeline.token_offsets() == {topic: {0: 4, 1: 4}}
    assert sorted((p, o, v) for _, p, o, _, v, _, _ in pipeline.archived_records()) == sorted(
        (i % 2, i // 2, f"m{i}".encode()) for i in range(10) if i // 2 < 4)
    # the CLI finds the connection where Airflow keeps it, the database too (issue 41)
    status = subprocess.run([str(Path(sys.executable).parent / "kafka-archive"), "status",
                             "--group", "backup"], env=pipeline.env, capture_output=True,
                            text=True, timeout=300)
    assert status.returncode == 0, status.stderr[-2000:]
    assert topic in status.stdout and password not in status.stdout + status.stderr
    logs = Path(env["AIRFLOW_HOME"]) / "logs"
    for where, text in {"dags test output": pipeline.dag_output,
                        **{str(p): p.read_text(errors="replace")
                           for p in logs.rglob("*") if p.is_file()}}.items():
        assert password not in text, f"the Kafka password appears in {where}"


def test_the_listener_refuses_a_wrong_password(service_env):
    """The listener really authenticates: the archive above did not get in by accident."""
    user, _ = localservices.kafka_sasl_credentials(service_env)
    with pytest.raises(KafkaError):
        KafkaConsumer(bootstrap_servers=localservices.kafka_sasl_bootstrap(service_env),
                      security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-512",
                      sasl_plain_username=user, sasl_plain_password="not-the-password",
                      request_timeout_ms=3000, bootstrap_timeout_ms=3000).close()


def test_a_wrong_password_says_authentication_failed_at_once(sasl_pipeline, monkeypatch):
    """The CLI (status), preflight and the plan name the refusal within seconds instead of
    retrying for a minute and a half as an unreachable broker."""
    import subprocess
    import sys

    from kafka_archive.airflow import tasks
    from kafka_archive.brokers import AuthenticationFailed

    env = {**sasl_pipeline.env, "KAFKA_ARCHIVE_KAFKA_PASSWORD": "not-the-password"}
    cli = str(Path(sys.executable).parent / "kafka-archive")
    for command in (["status", "--group", "backup"], ["preflight"]):
        started = time.monotonic()
        done = subprocess.run([cli, *command], env=env, capture_output=True, text=True,
                              timeout=120)
        assert time.monotonic() - started < 30, command  # not 90 s of retries
        assert done.returncode == 1, done.stdout
        assert "authentication failed for SASL user" in done.stderr + done.stdout, command
        assert "not-the-password" not in done.stderr + done.stdout
        assert "Traceback" not in done.stderr
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    started = time.monotonic()
    with pytest.raises(AuthenticationFailed, match="authentication failed"):
        tasks.plan("backup", f"wrong-password-{time.time_ns()}")
    assert time.monotonic() - started < 15
