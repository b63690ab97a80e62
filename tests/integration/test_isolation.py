"""One broken topic never stops the others: a retention gap on topic A, healthy topic B in
the same group, through the real DAG (`airflow dags test`), Kafka, S3, Spark and SMTP. B is
archived and committed in that run, A is held and mailed once; `accept-loss` lets A go on
and `verify` lists the accepted range as known loss. (The second test's retention comes
between plan and job: its runs' steps in this process.)"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, TopicPartition

from kafka_archive.plan.planning import HeldTopicsError
from kafka_archive.tokens import Token
from tests.support.mail import alerting_pipeline, html_of, mails_to, wait_for_mail
from tests.support.pipeline import GROUP, run_dag


@pytest.fixture
def pipeline(airflow_env, kafka, s3, smtp_maildir, unique, tmp_path):
    """A pipeline whose alerts go to an address of this test only."""
    return alerting_pipeline(airflow_env, kafka, s3, smtp_maildir, f"t{unique}", tmp_path)


def task_states(pipeline) -> dict[str, str]:
    """The states of the tasks of the DAG's latest run, from Airflow's metadata DB."""
    db = sqlite3.connect(Path(pipeline.env["AIRFLOW_HOME"]) / "airflow.db")
    try:
        rows = db.execute(
            "SELECT task_id, state FROM task_instance WHERE dag_id = ? AND run_id = (SELECT "
            "run_id FROM dag_run WHERE dag_id = ? ORDER BY id DESC LIMIT 1)",
            (f"kafka_archive_{GROUP}",) * 2).fetchall()
        return dict(rows)
    finally:
        db.close()


def cli(pipeline, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(Path(sys.executable).parent / "kafka-archive"), *args],
                          env=pipeline.env, capture_output=True, text=True, timeout=300)


def lost_mails(pipeline) -> list:
    return [m for _, m in mails_to(pipeline) if "lost to retention" in m["Subject"]]


def test_retention_gap_holds_one_topic_and_accept_loss_lets_it_go_on(pipeline, kafka):
    a, b = pipeline.create_topic("gappy", 1), pipeline.create_topic("healthy", 1)
    pipeline.produce([(t, 0, None, f"{t}-{i}".encode(), None) for t in (a, b) for i in range(15)])
    # A's token was set at 0 (nothing archived yet); then retention (the admin API,
    # deterministically) deleted offsets 0-11 before any run archived them
    pipeline.tokens.write(Token(group=GROUP, topic=a, bootstrap=pipeline.kafka, offsets={0: 0}),
                          expected_version=None)
    admin = KafkaAdminClient(bootstrap_servers=kafka)
    admin.delete_records({TopicPartition(a, 0): 12})
    admin.close()

    outcome = run_dag(pipeline)
    assert outcome.returncode != 0  # the run shows failed ...
    states = task_states(pipeline)
    assert states["commit"] == "success" and states["held_topics"] == "failed", states
    assert f"left out topic(s) {a}; the other topics were archived" in pipeline.dag_output
    assert pipeline.token_offsets() == {a: {0: 0}, b: {0: 15}}  # ... B committed, A held
    assert sorted(r[2] for r in pipeline.archived_records() if r[0] == b) == list(range(15))
    _, message = wait_for_mail(pipeline, "lost to retention")
    assert message["Subject"] == f"[kafka-archive] {GROUP}: 12 messages lost to retention in {a}"
    assert (f"kafka-archive accept-loss --group {GROUP} --topic {a} --partition 0 --reason "
            "&quot;...&quot;") in html_of(message)

    assert run_dag(pipeline).returncode != 0  # the next run: A still held, not mailed again
    assert task_states(pipeline)["plan"] == "failed"  # nothing else to archive
    assert len(lost_mails(pipeline)) == 1
    assert not [m for _, m in mails_to(pipeline) if "failed in run" in m["Subject"]]

    accepted = cli(pipeline, "accept-loss", "--group", GROUP, "--topic", a, "--partition", "0",
                   "--reason", "broker outage; owners agreed", "--by", "oncall")
    assert accepted.returncode == 0, accepted.stderr
    assert accepted.stdout.startswith(f"accepted: {a} partition 0: offsets [0, 12) (12 messages)")
    assert pipeline.token_offsets()[a] == {0: 12}

    assert run_dag(pipeline).returncode == 0, pipeline.dag_output[-3000:]
    assert pipeline.token_offsets() == {a: {0: 15}, b: {0: 15}}
    assert sorted(r[2] for r in pipeline.archived_records() if r[0] == a) == [12, 13, 14]
    verified = cli(pipeline, "verify", "--group", GROUP)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert (f"known loss: {a} partition 0: offsets [0, 12) (12 messages) lost to retention, "
            f"accepted by oncall at ") in verified.stdout
    assert ": broker outage; owners agreed" in verified.stdout
    assert f"group {GROUP}: 2 partitions, " in verified.stdout and " 0 errors" in verified.stdout
    assert len(lost_mails(pipeline)) == 1


def test_retention_after_planning_commits_the_rest_and_holds_the_topic(pipeline, kafka,
                                                                        monkeypatch):
    """Retention deletes A's head between the plan and the archive job: the run commits B,
    leaves A's token at the planned start and mails the loss once; the next plan holds A
    like any retention gap, and accept-loss lets it go on (no plan stays stuck in flight)."""
    a, b = pipeline.create_topic("late", 1), pipeline.create_topic("fine", 1)
    pipeline.produce([(t, 0, None, f"{t}-{i}".encode(), None) for t in (a, b) for i in range(15)])
    pipeline.in_env(monkeypatch)
    plan_url = pipeline.plan("planned")
    admin = KafkaAdminClient(bootstrap_servers=kafka)
    admin.delete_records({TopicPartition(a, 0): 12})
    admin.close()

    pipeline.archive_to_end(plan_url)
    summary = pipeline.commit(plan_url)
    assert summary["records"] == 15 and summary["tokens"] == {a: {"0": 0}, b: {"0": 15}}
    assert summary["skipped"] == [
        f"{a} partition 0: offsets [0, 12) (12 messages) were deleted by retention before they "
        f"were archived (after this run was planned; the topic waits for the loss to be "
        f"accepted: kafka-archive accept-loss --group {GROUP} --topic {a} --partition 0 "
        f"--reason \"...\")"]
    assert pipeline.token_offsets() == {a: {0: 0}, b: {0: 15}}
    assert {r[0] for r in pipeline.archived_records()} == {b}  # A's partial file is gone
    _, message = wait_for_mail(pipeline, "lost to retention")
    assert message["Subject"] == f"[kafka-archive] {GROUP}: 12 messages lost to retention in {a}"

    with pytest.raises(HeldTopicsError) as held:  # the next plan holds A; none in flight
        pipeline.plan("next")
    assert f"{a} partition 0: offsets [0, 12)" in str(held.value)
    assert len(lost_mails(pipeline)) == 1  # the same range: not mailed again

    accepted = cli(pipeline, "accept-loss", "--group", GROUP, "--topic", a, "--reason", "late")
    assert accepted.returncode == 0, accepted.stderr
    pipeline.run()
    assert pipeline.token_offsets() == {a: {0: 15}, b: {0: 15}}
    assert sorted(r[2] for r in pipeline.archived_records() if r[0] == a) == [12, 13, 14]
