"""Alert emails from the real DAG (`airflow dags test`) to the real SMTP server: a task
failure, data lost to retention (failed and skipped), freshness past its SLA. Each mail is
parsed and must name group, topics, partitions and figures and link the run; no configured
secret may appear in a mail or in the task logs. Prints the delay from incident to mail."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import quote

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from kafka_archive.tokens import Token
from tests.support.mail import alerting_pipeline, html_of, mails_to, secrets, wait_for_mail
from tests.support.pipeline import GROUP, Pipeline, lose_to_retention, run_dag



@pytest.fixture
def pipeline(request, airflow_env, kafka, s3, smtp_maildir, unique, tmp_path):
    """A pipeline whose alerts go to an address of this test only."""
    return alerting_pipeline(airflow_env, kafka, s3, smtp_maildir, f"t{unique}", tmp_path,
                             **getattr(request, "param", {}))


# --- helpers -----------------------------------------------------------------------------

def assert_no_secret(pipeline: Pipeline, message) -> None:
    logs = Path(pipeline.env["AIRFLOW_HOME"]) / "logs"
    texts = {"mail": message.as_string() + html_of(message),
             "dags test output": pipeline.dag_output,
             **{str(p): p.read_text(errors="replace") for p in logs.rglob("*") if p.is_file()}}
    for secret in secrets(pipeline.env):
        for where, text in texts.items():
            assert secret not in text, f"a configured secret appears in {where}"


def last_run(pipeline: Pipeline) -> tuple[str, dict[str, tuple[datetime, datetime | None]]]:
    """The id of the DAG's latest run and (start, end) of each of its tasks that ran, from
    Airflow's metadata DB (one per test session: the latest run is this test's)."""
    db = sqlite3.connect(Path(pipeline.env["AIRFLOW_HOME"]) / "airflow.db")
    try:
        (run_id,), = db.execute("SELECT run_id FROM dag_run WHERE dag_id = ? ORDER BY id DESC "
                                "LIMIT 1", (f"kafka_archive_{GROUP}",)).fetchall()
        rows = db.execute("SELECT task_id, start_date, end_date FROM task_instance "
                          "WHERE dag_id = ? AND run_id = ?", (f"kafka_archive_{GROUP}", run_id))
        return run_id, {task: (_utc(start), _utc(end)) for task, start, end in rows if start}
    finally:
        db.close()


def _utc(text: str | None) -> datetime | None:
    if text is None:
        return None
    parsed = datetime.fromisoformat(text)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def logged_at(pipeline: Pipeline, text: str) -> datetime:
    """When the task logged `text` first (the `dags test` output carries the task logs)."""
    for line in pipeline.dag_output.splitlines():
        if text in line and line[:4].isdigit():  # a log line, not a traceback's
            return datetime.fromisoformat(line.split()[0])
    raise AssertionError(f"{text!r} is not in the task logs")


def report_delay(what: str, incident: datetime, arrived: float) -> float:
    delay = arrived - incident.timestamp()
    print(f"\nALERT DELAY {what}: {delay:.1f} s from incident to mail")
    assert delay < 120, f"{what}: mail arrived {delay:.0f}s after the incident"
    return delay


def expect_run_link(html: str, run_id: str) -> None:
    assert f"http://localhost:8080/dags/kafka_archive_{GROUP}/runs/{quote(run_id, safe='')}" in html


def offsets(kafka: str, topic: str) -> tuple[int, int]:
    """Earliest and latest offset of partition 0."""
    consumer = KafkaConsumer(bootstrap_servers=kafka)
    tp = TopicPartition(topic, 0)
    try:
        return consumer.beginning_offsets([tp])[tp], consumer.end_offsets([tp])[tp]
    finally:
        consumer.close()


# --- tests -------------------------------------------------------------------------------

def test_task_failure_mails_task_error_and_run_link(pipeline):
    # a token of another cluster fails the whole group (a malformed one only holds its topic)
    topic = pipeline.create_topic("othercluster", 1)
    pipeline.produce([(topic, 0, None, b"m", None)] * 3)
    token_file = pipeline.token_root / GROUP / f"{topic}.token"
    token_file.parent.mkdir(parents=True)
    token_file.write_text(f"# group: {GROUP}\n# topic: {topic}\n"
                          f"other-cluster:9092 {topic} 0 7\n")

    assert run_dag(pipeline).returncode != 0
    arrived, message = wait_for_mail(pipeline, "task plan failed")

    run_id, _ = last_run(pipeline)
    assert message["Subject"] == f"[kafka-archive] {GROUP}: task plan failed in run {run_id}"
    html = html_of(message)
    for expected in ("TerminalError", f"token {GROUP}/{topic} was written for Kafka at "
                     "other-cluster:9092", GROUP,
                     "terminal: retrying will not help", "No plan was made",
                     f"/runs/{quote(run_id, safe='')}/tasks/plan"):
        assert expected in html, expected
    expect_run_link(html, run_id)
    assert len(mails_to(pipeline)) == 1  # one incident, one mail
    assert_no_secret(pipeline, message)
    report_delay("task failure", logged_at(pipeline, "Task failed with exception"), arrived)


@pytest.mark.parametrize("pipeline", [{}, {"group_extra": "on_retention_gap: skip\n"}],
                         ids=["fail", "skip"], indirect=True)
def test_data_lost_to_retention_mails_the_lost_range(pipeline, kafka):
    skip = "on_retention_gap: skip" in pipeline.config_path.read_text()
    topic = pipeline.create_topic("shortlived", 1)
    pipeline.produce([(topic, 0, None, f"m{i}".encode(), None) for i in range(5)])
    pipeline.tokens.write(Token(group=GROUP, topic=topic, bootstrap=pipeline.kafka,
                                offsets={0: 5}), expected_version=None)  # 0-4 archived
    lose_to_retention(kafka, topic, restore=True)

    outcome = run_dag(pipeline)
    arrived, message = wait_for_mail(pipeline, "lost to retention")
    earliest, latest = offsets(kafka, topic)  # retention is off: as the plan saw them

    lost = earliest - 5
    assert message["Subject"] == (f"[kafka-archive] {GROUP}: {lost} messages lost to retention "
                                  f"in {topic}")
    html = html_of(message)
    assert f"<td>{topic}</td><td>0</td><td>[5, {earliest})</td><td>{lost}</td>" in html
    if skip:  # committed, but the run is not green: its freshness task fails on the loss
        assert outcome.returncode != 0, outcome.stdout[-3000:]
        assert "data lost: " in pipeline.dag_output and "task freshness" not in " ".join(
            m["Subject"] for _, m in mails_to(pipeline))  # mailed once, as data lost
        assert "went on from the earliest retained offset" in html
        assert pipeline.token_offsets()[topic] == {0: latest}
    else:
        assert outcome.returncode != 0
        assert "left out of the archive, run after run, until the loss is accepted" in html
        assert f"kafka-archive accept-loss --group {GROUP} --topic {topic}" in html
        assert pipeline.token_offsets()[topic] == {0: 5}
    assert len([m for _, m in mails_to(pipeline) if "lost to retention" in m["Subject"]]) == 1
    assert not [m for _, m in mails_to(pipeline) if "task plan failed" in m["Subject"]]
    assert_no_secret(pipeline, message)
    expect_run_link(html, last_run(pipeline)[0])
    report_delay(f"data lost, {'skipped' if skip else 'failed'}",
                 logged_at(pipeline, "were deleted by retention before they were archived" if skip
                           else "Task failed with exception"), arrived)


@pytest.mark.parametrize("pipeline", [{
    "policy": "max_records: 5, freshness: 10m",
    "group_extra": 'topic_policies: {".*-relaxed": {freshness: 1h}}\n'}], indirect=True)
def test_freshness_past_sla_mails_each_lagging_topic_with_figures(pipeline):
    lagging, relaxed, current = (pipeline.create_topic(n, 1)
                                 for n in ("lagging", "relaxed", "current"))
    base_ms = int(time.time() * 1000) - 30 * 60_000  # one message a minute, 30 minutes ago
    producer = KafkaProducer(bootstrap_servers=pipeline.kafka, acks="all")
    for topic, count in ((lagging, 20), (relaxed, 20), (current, 3)):
        for i in range(count):
            producer.send(topic, value=f"m{i}".encode(), partition=0,
                          timestamp_ms=base_ms + i * 60_000)
    producer.flush()
    producer.close()

    outcome = run_dag(pipeline)
    assert outcome.returncode != 0, outcome.stdout[-3000:]  # committed, freshness task failed
    assert "archive freshness past its SLA for " in pipeline.dag_output
    arrived, message = wait_for_mail(pipeline, "freshness past SLA")

    assert message["Subject"] == (f"[kafka-archive] {GROUP}: archive freshness past SLA for "
                                  f"{lagging}")
    html = html_of(message)
    assert f"{lagging}: lag 15m 0s (900 s), SLA 10m 0s (600 s), 15 messages waiting" in html
    newest_kafka = datetime.fromtimestamp((base_ms + 19 * 60_000) // 1000, timezone.utc)
    newest_archived = datetime.fromtimestamp((base_ms + 4 * 60_000) // 1000, timezone.utc)
    assert (f"<td>0</td><td>5</td><td>20</td><td>15</td>"
            f"<td>{newest_kafka.isoformat(timespec='seconds')}</td>"
            f"<td>{newest_archived.isoformat(timespec='seconds')}</td>"
            f"<td>15m 0s (900 s)</td>") in html
    assert relaxed not in html and current not in html  # 15 min < its 1h SLA; all archived
    assert pipeline.token_offsets() == {lagging: {0: 5}, relaxed: {0: 5}, current: {0: 3}}
    assert len(mails_to(pipeline)) == 1
    assert_no_secret(pipeline, message)
    run_id, times = last_run(pipeline)
    assert f"after run {run_id} committed" in html
    expect_run_link(html, run_id)
    report_delay("freshness past SLA (commit task end)", times["commit"][1], arrived)


def test_deadline_callback_run_as_the_triggerer_runs_it_mails_the_run_in_flight(pipeline,
                                                                               monkeypatch):
    """The Deadline Alert's callback, through Airflow's own CallbackTrigger with the context
    the scheduler gives it; the real scheduler and triggerer are in test_deadline_alert_*."""
    from airflow.triggers.callback import CallbackTrigger

    from kafka_archive import config
    from kafka_archive.airflow import alerting

    topic = pipeline.create_topic("slow", 2)
    pipeline.produce([(topic, i % 2, None, f"m{i}".encode(), None) for i in range(10)])
    pipeline.in_env(monkeypatch)
    run_id = "scheduled__2026-01-01T00:15:00+00:00"
    pipeline.plan(run_id)  # planned, in flight: the archive is what takes too long
    cfg = config.load()
    alert = alerting.deadline_alert(cfg, cfg.group(GROUP))
    context = {"dag_run": {"dag_id": f"kafka_archive_{GROUP}", "dag_run_id": run_id,
                           "queued_at": "2026-01-01T00:15:01Z", "state": "running"},
               "deadline": {"id": "0", "deadline_time": "2026-01-01T00:45:01Z"}}

    async def events():
        trigger = CallbackTrigger(alert.callback.path, {**alert.callback.kwargs,
                                                        "context": context})
        return [e.payload async for e in trigger.run()]

    called = time.time()
    outcome = asyncio.run(events())
    assert outcome[-1]["state"] == "success", outcome[-1]
    arrived, message = wait_for_mail(pipeline, "not finished within")

    assert message["Subject"] == (f"[kafka-archive] {GROUP}: run {run_id} not finished within "
                                  "30m 0s (1800 s) of being queued")
    html = html_of(message)
    for expected in ("2026-01-01T00:15:01Z", "2026-01-01T00:45:01Z", "running",
                     f"The plan in flight is run {run_id}",
                     f"<td>{topic}</td><td>0</td><td>[0, 5)</td><td>5</td>",
                     f"<td>{topic}</td><td>1</td><td>[0, 5)</td><td>5</td>",
                     "2 slices, 10 offsets"):
        assert expected in html, expected
    expect_run_link(html, run_id)
    pipeline.dag_output = ""
    assert_no_secret(pipeline, message)
    report_delay("deadline callback (called in process -> mail)",
                 datetime.fromtimestamp(called, timezone.utc), arrived)


def try_numbers(pipeline: Pipeline, run_id: str) -> dict[str, int]:
    db = sqlite3.connect(Path(pipeline.env["AIRFLOW_HOME"]) / "airflow.db")
    try:
        return dict(db.execute("SELECT task_id, try_number FROM task_instance WHERE dag_id = ? "
                               "AND run_id = ?", (f"kafka_archive_{GROUP}", run_id)).fetchall())
    finally:
        db.close()


def test_a_terminal_failure_fails_at_once_and_is_mailed_once_across_runs(pipeline, kafka,
                                                                        monkeypatch):
    """Issue 31 §6: a file the manifest lists went missing before the commit (terminal).
    The commit fails on its first try (no retries a minute apart), the mail says what to
    do, and the next run, failing the same way, sends no second mail; once a person has
    done it, a run commits and nothing is lost."""
    topic = pipeline.create_topic("terminal", 1)
    pipeline.produce([(topic, 0, None, f"m{i}".encode(), None) for i in range(20)])
    pipeline.in_env(monkeypatch)
    plan_url = pipeline.plan("gone-file")
    pipeline.archive_to_end(plan_url)
    [(path, _)] = pipeline.data_files().items()
    pipeline.s3.client.delete_object(Bucket=pipeline.s3.bucket, Key=f"{pipeline.root_key}/{path}")

    assert run_dag(pipeline).returncode != 0
    _, message = wait_for_mail(pipeline, "task commit failed")
    run_id, _ = last_run(pipeline)
    assert try_numbers(pipeline, run_id)["commit"] == 1  # failed at once
    html = html_of(message)
    for expected in ("ManifestMismatchError", "terminal: retrying will not help",
                     "What to do", "delete the run&#x27;s manifest.json",
                     "not mailed again (a reminder follows daily)"):
        assert expected in html, expected

    assert run_dag(pipeline).returncode != 0  # the same failure, the next run
    again, _ = last_run(pipeline)
    assert again != run_id and try_numbers(pipeline, again)["commit"] == 1
    assert "not mailed again: the same failure was mailed" in pipeline.dag_output
    assert [m["Subject"] for _, m in mails_to(pipeline)] == [message["Subject"]]

    pipeline.s3.client.delete_object(   # the remedy the mail gives
        Bucket=pipeline.s3.bucket,
        Key=plan_url.removeprefix(f"s3://{pipeline.s3.bucket}/").replace("plan.json",
                                                                          "manifest.json"))
    assert run_dag(pipeline).returncode == 0
    assert sorted(r[2] for r in pipeline.archived_records()) == list(range(20))
