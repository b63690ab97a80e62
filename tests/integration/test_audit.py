"""The audit on real Kafka, S3 and SMTP: producers' counts (AuditedProducer) against what
the backup group archived, through the real Spark job and Airflow DAGs."""

from __future__ import annotations

import email
import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from kafka_archive.airflow import tasks
from kafka_archive.audit import reconcile
from kafka_archive.audit.producer import AuditedProducer, MonitoringTopicMissing
from kafka_archive.formats import audit_counts
from kafka_archive.tokens import Token
from tests.support.pipeline import Pipeline

MIN = 60_000
HEADER = "kafka-archive-source"


def audited_pipeline(env, kafka, s3, prefix: str, tmp_path: Path, policy: str = "") -> Pipeline:
    """A pipeline whose config audits its group against a monitoring topic of its own."""
    monitoring = f"_mon-{prefix}"
    admin = KafkaAdminClient(bootstrap_servers=kafka)
    admin.create_topics([NewTopic(monitoring, 1, 1)])
    admin.close()
    made = Pipeline(env, kafka, s3, prefix, tmp_path, policy=policy, extra=(
        f"audit: {{topic: {monitoring}, window: 1m, grace: 0, groups: [backup]}}\n"
        f"alerts: {{email_to: [audit-{prefix}@example.com]}}\n"))
    made.monitoring = monitoring
    made.mail_to = f"audit-{prefix}@example.com"
    return made


@pytest.fixture
def pipeline(airflow_env, kafka, s3, unique, tmp_path, monkeypatch):
    made = audited_pipeline(airflow_env, kafka, s3, f"t{unique}", tmp_path)
    made.in_env(monkeypatch)
    return made


@pytest.fixture
def base() -> int:
    """The start of a window two hours ago: every window the tests use is long closed."""
    return audit_counts.window_start(int(time.time() * 1000) - 2 * 3600_000, MIN)


def send_audited(pipeline: Pipeline, source: str, topic: str, messages) -> None:
    """messages: (partition, timestamp_ms) pairs, sent in order through AuditedProducer."""
    with AuditedProducer(source=source, monitoring_topic=pipeline.monitoring,
                         bootstrap_servers=pipeline.kafka, acks="all") as producer:
        for i, (partition, ts) in enumerate(messages):
            producer.send(topic, value=f"{source}-{i}".encode(), partition=partition,
                          timestamp_ms=ts)


def archive_once(pipeline: Pipeline, run_id: str) -> None:
    """One backup run, its three steps in turn as the DAG runs them."""
    plan_url = pipeline.plan(run_id)
    pipeline.archive_to_end(plan_url)
    pipeline.commit(plan_url)


def audit_now(run_id: str, rescan: bool = False) -> dict:
    tasks.audit_ingest(run_id)
    return tasks.audit_reconcile("backup", run_id, rescan=rescan)


def report(pipeline: Pipeline, run_id: str) -> list[dict]:
    key = f"{pipeline.root_key}/_audit/backup/{run_id}/report.json"
    doc = json.loads(pipeline.s3.client.get_object(Bucket=pipeline.s3.bucket, Key=key)["Body"].read())
    return [dict(zip(doc["columns"], row)) for row in doc["verdicts"]]


def verdicts(pipeline: Pipeline, run_id: str) -> dict:
    return {(v["topic"], v["source"], v["window_start_ms"]): (v["status"], v["expected"], v["archived"])
            for v in report(pipeline, run_id)}


def test_clean_pipeline_every_closed_window_is_ok_and_a_retried_event_counts_once(pipeline, base):
    a, b = pipeline.create_topic("a", 2), pipeline.create_topic("b", 1)
    send_audited(pipeline, "web-1", a, [(0, base + 1)] * 5 + [(0, base + MIN + 1)] * 3)
    send_audited(pipeline, "web-2", a, [(1, base + 2)] * 4 + [(1, base + 2 * MIN + 2)] * 6)
    send_audited(pipeline, "web-1", b, [(0, base + MIN + 5)] * 7)
    pipeline.produce([(b, 0, None, b"no header", None)] * 2)  # a producer without audit
    # a producer retry: one monitoring event delivered twice
    consumer = KafkaConsumer(bootstrap_servers=pipeline.kafka, auto_offset_reset="earliest",
                             consumer_timeout_ms=5000)
    consumer.assign([TopicPartition(pipeline.monitoring, 0)])
    first = next(iter(consumer))
    consumer.close()
    pipeline.produce([(pipeline.monitoring, 0, first.key, first.value, None)])

    archive_once(pipeline, "run-1")
    outcome = audit_now("clean")

    assert outcome["mismatches"] == 0, outcome["summary"]
    assert outcome["totals"] == {"OK": 5, "MISSING": 0, "EXCESS": 0, "PENDING": 0, "UNAUDITED": 1}
    found = verdicts(pipeline, "clean")
    assert {k: v for k, v in found.items() if v[0] == "OK"} == {
        (a, "web-1", base): ("OK", 5, 5), (a, "web-1", base + MIN): ("OK", 3, 3),
        (a, "web-2", base): ("OK", 4, 4), (a, "web-2", base + 2 * MIN): ("OK", 6, 6),
        (b, "web-1", base + MIN): ("OK", 7, 7)}
    assert [v[0] for k, v in found.items() if k[1] == "unknown"] == ["UNAUDITED"]
    listing = pipeline.s3.client.list_objects_v2(Bucket=pipeline.s3.bucket,
                                                 Prefix=f"{pipeline.root_key}/_audit/backup/")
    names = {o["Key"].rsplit("/", 1)[-1] for o in listing["Contents"]}
    assert {"report.json", "report.csv", "report.html", "index.html"} <= names


def test_loss_is_missing_per_window_emailed_and_rescan_agrees(pipeline, base, smtp_maildir):
    topic = pipeline.create_topic("lossy", 2)
    send_audited(pipeline, "billing-1", topic, [(0, base + 10)] * 6 + [(0, base + MIN + 10)] * 6
                 + [(1, base + 20)] * 5)
    # the token skips partition 0 forward by 8: six messages of the first window and two
    # of the second are never archived
    pipeline.tokens.write(Token("backup", topic, pipeline.kafka, {0: 8}), expected_version=None)
    archive_once(pipeline, "run-1")

    result = subprocess.run([str(Path(sys.executable).parent / "airflow"), "dags", "test",
                             "kafka_archive_audit"], env=pipeline.env, capture_output=True,
                            text=True, timeout=600)
    output = result.stdout + result.stderr
    assert "MISSING 6: topic " + topic in output, output[-3000:]
    mail = wait_for_mail(smtp_maildir, pipeline.mail_to)
    body = mail.get_payload(decode=True).decode() if not mail.is_multipart() else \
        "".join(p.get_payload(decode=True).decode() for p in mail.walk() if p.get_content_maintype() == "text")
    assert "1 window(s) MISSING" not in mail["Subject"] and "2 window(s) MISSING" in mail["Subject"]
    assert f"MISSING 6: topic {topic}, source billing-1" in body
    assert f"MISSING 2: topic {topic}, source billing-1" in body
    assert "/dags/kafka_archive_audit/runs/" in body  # the run's page in Airflow

    [run_dir] = {k.split("/")[-2] for k in keys(pipeline, "_audit/backup/") if k.endswith("report.json")}
    found = verdicts(pipeline, run_dir)
    assert found == {(topic, "billing-1", base): ("MISSING", 11, 5),
                     (topic, "billing-1", base + MIN): ("MISSING", 6, 4)}
    # re-scanning the files themselves gives the same verdicts as the manifests; the two
    # mismatches are open (mailed above), not new
    rescanned = audit_now("rescan", rescan=True)
    assert (rescanned["mismatches"], rescanned["open"]) == (0, 2)
    assert verdicts(pipeline, "rescan") == found


def test_a_message_two_generations_archived_counts_once(pipeline, base):
    """The remedy a held topic's mail names, a new generation with the token deleted,
    archives again what Kafka still holds: both generations' rows stay current, and the
    audit, like a rescan of the files, counts each message once (the job tells which of
    its messages the older generation holds: the rows' audit_elsewhere)."""
    topic = pipeline.create_topic("twice", 2)
    send_audited(pipeline, "web-1", topic, [(0, base + 1)] * 5 + [(1, base + MIN + 1)] * 3)
    archive_once(pipeline, "run-1")
    with open(pipeline.config_path, "a") as config:
        config.write("generation: 2\n")
    (pipeline.token_root / "backup" / f"{topic}.token").unlink()
    send_audited(pipeline, "web-1", topic, [(0, base + 2 * MIN + 1)] * 2)
    archive_once(pipeline, "run-2")
    names = [k.rsplit("/", 1)[-1] for k in pipeline.data_files()]
    assert sum(n.startswith("2_") for n in names) == 2 and sum(n.startswith("1_") for n in names) == 2

    outcome = audit_now("after")

    expected = {(topic, "web-1", base): ("OK", 5, 5), (topic, "web-1", base + MIN): ("OK", 3, 3),
                (topic, "web-1", base + 2 * MIN): ("OK", 2, 2)}
    assert (outcome["mismatches"], verdicts(pipeline, "after")) == (0, expected), outcome["summary"]
    rescanned = audit_now("rescan", rescan=True)
    assert (rescanned["mismatches"], verdicts(pipeline, "rescan")) == (0, expected)


def test_duplicates_produced_on_purpose_are_excess(pipeline, base):
    topic = pipeline.create_topic("dup", 1)
    send_audited(pipeline, "web-1", topic, [(0, base + 1)] * 5)
    # three messages sent again, outside the audited producer (as a blind retry would)
    producer = KafkaProducer(bootstrap_servers=pipeline.kafka, acks="all")
    for _ in range(3):
        producer.send(topic, value=b"again", partition=0, timestamp_ms=base + 30,
                      headers=[(HEADER, b"web-1")])
    producer.close()
    archive_once(pipeline, "run-1")

    outcome = audit_now("dup")
    assert outcome["mismatches"] == 1
    assert verdicts(pipeline, "dup") == {(topic, "web-1", base): ("EXCESS", 5, 8)}
    assert f"EXCESS 3: topic {topic}, source web-1" in outcome["summary"]
    # the same from the command line: exit 1 and the finding on stderr
    cli = subprocess.run([str(Path(sys.executable).parent / "kafka-archive"), "audit",
                          "--group", "backup", "--rescan"], env=pipeline.env,
                         capture_output=True, text=True, timeout=300)
    assert cli.returncode == 1, cli.stderr
    assert f"EXCESS 3: topic {topic}, source web-1" in cli.stderr
    assert json.loads(cli.stdout)["totals"]["EXCESS"] == 1


KILLED_MID_WINDOW = """
import os, signal, sys
from kafka_archive.audit.producer import AuditedProducer
kafka, monitoring, topic, ts = sys.argv[1:5]
# linger: nothing is delivered while sending, so no count is published on a send; then
# every message is acknowledged (counted, not yet published) and the process is killed
producer = AuditedProducer(source="web-9", monitoring_topic=monitoring, bootstrap_servers=kafka,
                           acks="all", linger_ms=2000)
for i in range(6):
    producer.send(topic, value=b"m%d" % i, partition=0, timestamp_ms=int(ts) + i)
producer._producer.flush()
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_producer_killed_mid_window_is_unaudited_not_excess(pipeline, base, smtp_maildir):
    """Issue 56, defect 8: a producer SIGKILLed after its messages were acknowledged and
    before it published their count. Its opening event tells the audit the window's count
    is incomplete: UNAUDITED, no alarm, no mail (it was a false EXCESS 6)."""
    topic = pipeline.create_topic("killed", 1)
    send_audited(pipeline, "web-9", topic, [(0, base - MIN + 1)] * 2)  # a window before, OK
    killed = subprocess.run([sys.executable, "-c", KILLED_MID_WINDOW, pipeline.kafka,
                             pipeline.monitoring, topic, str(base + 1)],
                            env=pipeline.env, capture_output=True, text=True, timeout=120)
    assert killed.returncode == -9, killed.stderr
    archive_once(pipeline, "run-1")

    outcome = audit_now("killed")
    assert outcome["mismatches"] == 0, outcome["summary"]
    assert verdicts(pipeline, "killed") == {(topic, "web-9", base - MIN): ("OK", 2, 2),
                                            (topic, "web-9", base): ("UNAUDITED", 0, 6)}
    assert not mails_to(smtp_maildir, pipeline.mail_to)


def test_partly_archived_window_is_pending_then_ok(airflow_env, kafka, s3, unique, tmp_path,
                                                   monkeypatch, base):
    pipeline = audited_pipeline(airflow_env, kafka, s3, f"p{unique}", tmp_path,
                                policy="max_records: 15")
    pipeline.in_env(monkeypatch)
    topic = pipeline.create_topic("slow", 1)
    send_audited(pipeline, "web-1", topic, [(0, base + 1)] * 10 + [(0, base + MIN + 1)] * 10)

    archive_once(pipeline, "run-1")  # offsets 0..14: the second window only in part
    first = audit_now("first")
    assert first["mismatches"] == 0
    assert verdicts(pipeline, "first") == {(topic, "web-1", base): ("OK", 10, 10),
                                           (topic, "web-1", base + MIN): ("PENDING", 10, 5)}
    archive_once(pipeline, "run-2")
    assert audit_now("second")["totals"]["OK"] == 2
    assert verdicts(pipeline, "second")[(topic, "web-1", base + MIN)] == ("OK", 10, 10)


def keys(pipeline: Pipeline, below: str) -> list[str]:
    pages = pipeline.s3.client.get_paginator("list_objects_v2").paginate(
        Bucket=pipeline.s3.bucket, Prefix=f"{pipeline.root_key}/{below}")
    return [o["Key"] for page in pages for o in page.get("Contents", [])]


def wait_for_mail(maildir: Path, to: str, timeout: float = 60):
    """The first captured mail to `to`; polls the SMTP server's capture folder."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for path in sorted(maildir.glob("*.eml")):
            message = email.message_from_bytes(path.read_bytes())
            if to in (message["To"] or ""):
                return message
        time.sleep(0.2)
    pytest.fail(f"no mail to {to} within {timeout:.0f} s")


# --- rewinds, a dropped message, mail once, acknowledge, backfill (issue 12) ---------------

CLI = str(Path(sys.executable).parent / "kafka-archive")


def mails_to(maildir: Path, to: str) -> list:
    found = [email.message_from_bytes(p.read_bytes()) for p in sorted(maildir.glob("*.eml"))]
    return [m for m in found if to in (m["To"] or "")]


def body_of(mail) -> str:
    return "".join(p.get_payload(decode=True).decode() for p in mail.walk()
                   if p.get_content_maintype() == "text")


def dag_audit(pipeline: Pipeline) -> subprocess.CompletedProcess:
    """One scheduled audit, as the scheduler runs it (`airflow dags test`)."""
    return subprocess.run([str(Path(sys.executable).parent / "airflow"), "dags", "test",
                           "kafka_archive_audit"], env=pipeline.env, capture_output=True,
                          text=True, timeout=600)


def latest_report(pipeline: Pipeline, group: str = "backup") -> dict:
    """The report.json of the newest audit run (run folders sort by their time stamps)."""
    found = sorted((o["LastModified"], o["Key"]) for o in pipeline.s3.client.list_objects_v2(
        Bucket=pipeline.s3.bucket, Prefix=f"{pipeline.root_key}/_audit/{group}/")["Contents"]
        if o["Key"].endswith("report.json"))
    return json.loads(pipeline.s3.client.get_object(Bucket=pipeline.s3.bucket,
                                                    Key=found[-1][1])["Body"].read())


def test_rewinds_are_no_alarm_a_dropped_message_is_mailed_once_until_acknowledged(
        airflow_env, kafka, s3, unique, tmp_path, monkeypatch, base, smtp_maildir):
    made = audited_pipeline(airflow_env, kafka, s3, f"w{unique}", tmp_path)
    text = made.config_path.read_text().replace("groups: [backup]", "groups: [backup, partitioned]")
    made.config_path.write_text(text + (
        "  partitioned:\n"
        f"    topics: {{include: [\"w{unique}-.*\"]}}\n"
        "    layout: {kind: event_time, granularity: hour}\n"
        "    parser: timestamp\n"))
    made.in_env(monkeypatch)
    orders, billing = made.create_topic("orders", 2), made.create_topic("billing", 1)
    send_audited(made, "web-1", orders, [(0, base + 1)] * 6 + [(1, base + 2)] * 4
                 + [(1, base + MIN + 2)] * 5)
    send_audited(made, "web-1", billing, [(0, base + 3)] * 7)
    archive_once(made, "run-1")
    assert audit_now("a1")["totals"]["OK"] == 3

    # rewind one partition (CLI) and a whole topic (token deleted), then archive again
    back = subprocess.run([CLI, "rewind", "--group", "backup", "--topic", orders, "--partition",
                           "1", "--to-offset", "0"], env=made.env, capture_output=True,
                          text=True, timeout=120)
    assert back.returncode == 0, back.stderr
    made.tokens.delete("backup", billing)
    plan_url = made.plan("run-2")
    assert len(json.loads(made.s3.client.get_object(
        Bucket=made.s3.bucket, Key=plan_url.split("/", 3)[3])["Body"].read())["superseded"]) == 2
    made.archive_to_end(plan_url)
    made.commit(plan_url)
    result = dag_audit(made)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    after_rewind = latest_report(made)
    assert after_rewind["totals"] == {"OK": 3, "MISSING": 0, "EXCESS": 0, "PENDING": 0,
                                      "UNAUDITED": 0}
    assert after_rewind["recounted_after_rewind_or_backfill"] and after_rewind["alarms"] == []
    assert mails_to(smtp_maildir, made.mail_to) == []

    # one message dropped: the token of orders partition 0 skipped forward by 1
    send_audited(made, "web-1", orders, [(0, base + 3 * MIN + 1)] * 4)
    read = made.tokens.read("backup", orders)
    offsets = dict(read.token.offsets)
    offsets[0] += 1
    made.tokens.write(Token("backup", orders, made.kafka, offsets), read.version)
    archive_once(made, "run-3")
    # three scheduled audits in a row: the first fails and mails, the others stay green
    first = dag_audit(made)
    assert first.returncode != 0 and f"MISSING 1: topic {orders}" in first.stdout + first.stderr
    second = dag_audit(made)
    assert second.returncode == 0, (second.stdout + second.stderr)[-3000:]
    [mail] = mails_to(smtp_maildir, made.mail_to)
    body = body_of(mail)
    assert mail["Subject"] == (f"[kafka-archive] audit of group backup: 1 window(s) MISSING, "
                               f"0 EXCESS in {orders}")
    assert f"MISSING 1: topic {orders}, source web-1" in body and "1 message(s) missing" in body
    assert "<td>0 [7, 10): 3</td>" in body  # partition 0: offset 6 skipped, 7..9 archived
    assert "<td>hole: partition 0 [6, 7)</td>" in body  # named as verify names it
    window = reconcile.format_window(base + 3 * MIN, MIN).split(" ")[0]
    assert "/dags/kafka_archive_audit/runs/" in body
    assert "valid 168h 0m (604800 s)" in body  # a presigned link to the report, opened here
    [link] = [part.split('"')[0] for part in body.split('href="')[1:] if "Signature=" in part]
    assert b"Audit of group backup" in httpx.get(link.replace("&amp;", "&"), timeout=30).content
    assert latest_report(made)["alarms"][0]["state"] == "open"

    ack = subprocess.run([CLI, "audit", "ack", "--group", "backup", "--topic", orders,
                          "--source", "web-1", "--window", window, "--reason",
                          "token edited by hand in the test", "--by", "tester"],
                         env=made.env, capture_output=True, text=True, timeout=120)
    assert ack.returncode == 0, ack.stderr
    third = dag_audit(made)
    assert third.returncode == 0, (third.stdout + third.stderr)[-3000:]
    [alarm] = latest_report(made)["alarms"]
    assert (alarm["state"], alarm["ack"]["by"], alarm["ack"]["reason"]) == (
        "acknowledged", "tester", "token edited by hand in the test")
    assert len(mails_to(smtp_maildir, made.mail_to)) == 1
    listed = subprocess.run([CLI, "audit", "list", "--group", "backup", "--json"], env=made.env,
                            capture_output=True, text=True, timeout=120)
    assert json.loads(listed.stdout)[0]["state"] == "acknowledged", listed.stderr

    # the partitioned group, archived then rebuilt by a backfill, audits OK
    plan_url = tasks.plan("partitioned", "p-run-1")
    made.archive_to_end(plan_url)
    made.commit(plan_url)
    assert audit_now_of("partitioned", "p1")["totals"]["OK"] == 4
    tasks.backfill("partitioned", billing, "backfill-1", from_offset=0)
    done = audit_now_of("partitioned", "p2")
    assert done["totals"]["OK"] == 4 and done["new"] == [] and done["open"] == 0
    assert latest_report(made, "partitioned")["recounted_after_rewind_or_backfill"]


def audit_now_of(group: str, run_id: str) -> dict:
    tasks.audit_ingest(run_id)
    return tasks.audit_reconcile(group, run_id)


def test_audited_producer_fails_at_once_naming_a_missing_monitoring_topic(kafka, unique):
    topic = f"_mon-absent-{unique}"
    started = time.monotonic()
    with pytest.raises(MonitoringTopicMissing, match=f"monitoring topic '{topic}' does not exist"):
        AuditedProducer(source="web-1", monitoring_topic=topic, bootstrap_servers=kafka)
    assert time.monotonic() - started < 5
    admin = KafkaAdminClient(bootstrap_servers=kafka)
    assert topic not in admin.list_topics()  # nothing sent, nothing created
    admin.close()
    # told to, it creates the topic; a producer that sent nothing reported nothing
    with AuditedProducer(source="web-1", monitoring_topic=topic, bootstrap_servers=kafka,
                         create_monitoring_topic=True):
        pass
    consumer = KafkaConsumer(bootstrap_servers=kafka)
    assert consumer.end_offsets([TopicPartition(topic, 0)])[TopicPartition(topic, 0)] == 0
    consumer.close()
