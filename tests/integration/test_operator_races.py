"""What operators do while a run is in flight, and crashes around it: deleting a token to
rewind, a rewind racing a plan, retention after a commit cut short, a rewind's plan
re-executed. Each ends with clean runs and the archive holding every message once,
`verify --full` clean and no plan left in flight (issue 31, sections 1 and 2)."""

from __future__ import annotations

import re

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from test_backup_archive import consumed, varied_messages
from test_rewind_cli import cli

from kafka_archive import brokers, config, layout
from kafka_archive.airflow import connections
from kafka_archive.commit import protocol as committing
from kafka_archive.plan import inflight, rewinds, runs
from kafka_archive.plan.planning import Plan
from kafka_archive.tools import verify
from tests.support.mail import alerting_pipeline, html_of, wait_for_mail
from tests.support.pipeline import Pipeline, objects


@pytest.fixture
def pipeline(airflow_env, kafka, s3, smtp_maildir, unique, tmp_path, monkeypatch):
    made = alerting_pipeline(airflow_env, kafka, s3, smtp_maildir, f"ops{unique}", tmp_path)
    made.in_env(monkeypatch)
    return made


def storage():
    return connections.storage("kafka_archive_s3")


class CrashAfterTokenWrites:
    """The real token store, except that the process 'dies' right after `survive` token
    writes (a SIGKILL between the token and the catalog, or between two topics)."""

    def __init__(self, store, survive: int):
        self.store, self.survive = store, survive

    def __getattr__(self, name):
        return getattr(self.store, name)

    def write(self, token, expected_version):
        if self.survive == 0:
            raise SystemExit("simulated crash before this token write")
        self.survive -= 1
        version = self.store.write(token, expected_version)
        if self.survive == 0:
            raise SystemExit("simulated crash right after a token write")
        return version


def crash_commit(pipeline: Pipeline, plan_url: str, survive: int) -> Plan:
    plan = Plan.from_json(storage().get_bytes(plan_url))
    with pytest.raises(SystemExit):
        committing.commit(config.load(), plan, storage(),
                          CrashAfterTokenWrites(pipeline.tokens, survive), runs.now_utc())
    return plan


def end_offsets(kafka: str, topics: list[str]) -> dict[str, dict[int, int]]:
    reader = KafkaConsumer(bootstrap_servers=kafka)
    tps = [TopicPartition(t, p) for t in topics for p in reader.partitions_for_topic(t)]
    ends = reader.end_offsets(tps)
    reader.close()
    return {t: {tp.partition: o for tp, o in ends.items() if tp.topic == t} for t in topics}


def assert_whole(pipeline: Pipeline, expected: set[tuple], topics: list[str]) -> None:
    """Every message once, verify --full clean, tokens at Kafka's end, nothing in flight."""
    archived = pipeline.archived_records()
    assert len(archived) == len(set(archived)), "a message is archived twice"
    assert set(archived) == expected
    report = verify.verify_group(config.load(), "backup", storage(), pipeline.tokens, full=True)
    assert report.errors() == [], report.render()
    assert not [f for p in report.partitions for f in p.findings
                if "not in the catalog" in f.message]
    assert pipeline.token_offsets() == end_offsets(pipeline.kafka, topics)
    assert inflight.holding(storage(), pipeline.root, "backup") is None


def test_tokens_deleted_while_a_half_committed_run_waits_are_left_as_found(pipeline, kafka):
    """Issue 31 §1, reproduced: a run's commit advanced topic a and died; then both tokens
    were deleted to re-archive (a: committed by that run, b: not). The next run used to
    fail on every try (TokenConflictError, group stuck); now it commits, leaves both tokens
    as found, mails it, and the run after re-archives both topics from the start."""
    topics = [pipeline.create_topic("a", 2), pipeline.create_topic("b", 2)]
    for n, topic in enumerate(topics):
        pipeline.produce(varied_messages(topic, 2, 120, seed=n))
    pipeline.run("first")
    for n, topic in enumerate(topics):
        pipeline.produce(varied_messages(topic, 2, 60, seed=10 + n))
    plan_url = pipeline.plan("stuck-run")
    pipeline.archive_to_end(plan_url)
    crash_commit(pipeline, plan_url, survive=1)  # topics in order: a advanced, b not
    assert pipeline.tokens.read("backup", topics[0]).token.run_id == "stuck-run"
    for topic in topics:
        pipeline.tokens.delete("backup", topic)

    finishing = pipeline.run_dag()  # re-executes stuck-run's plan, from its manifest

    assert "left it as found" in finishing.stdout + finishing.stderr
    assert pipeline.tokens.topics("backup") == []  # the deleted tokens stay deleted
    assert inflight.holding(storage(), pipeline.root, "backup") is None
    pipeline.dag_output = finishing.stdout + finishing.stderr
    _, mail = wait_for_mail(pipeline, "changed by hand during run stuck-run")
    assert topics[0] in html_of(mail) and topics[1] in html_of(mail)
    pipeline.run("again")  # archives both topics from the earliest offset
    assert_whole(pipeline, consumed(kafka, topics), topics)
    assert [k for k in objects(pipeline.s3, pipeline.root_key, "_superseded/")]  # moved aside


def test_a_rewind_racing_a_plan_is_applied_by_the_next_run(pipeline, kafka, monkeypatch):
    """Issue 31 §2.5: a rewind checked that no run was in flight, then a plan was made
    from the old token, then the rewind wrote the token. The plan's commit leaves the
    rewound token as found and the next run archives from it."""
    topic = pipeline.create_topic("r", 1)
    pipeline.produce(varied_messages(topic, 1, 100, seed=3))
    pipeline.run("first")
    pipeline.produce(varied_messages(topic, 1, 50, seed=4))
    plan_url = pipeline.plan("raced-run")  # planned from token 100 after the rewind's check
    monkeypatch.setattr(rewinds.inflight, "holding", lambda *a, **k: None)  # checked before
    consumer = brokers.consumer(config.load())
    try:
        changes = rewinds.rewind(config.load(), pipeline.tokens, consumer, "backup", topic,
                                 to_offset=40, storage=storage())
    finally:
        consumer.close()
    monkeypatch.undo()
    pipeline.in_env(monkeypatch)
    assert "token 100 -> 0" in changes[0]  # inside the first file: archived again whole
    pipeline.archive_to_end(plan_url)
    summary = pipeline.commit(plan_url)  # used to fail here, and on every run after
    assert list(summary["tokens_left_as_found"]) == [topic]
    assert pipeline.token_offsets() == {topic: {0: 0}}
    pipeline.run("after-rewind")
    assert_whole(pipeline, consumed(kafka, [topic]), [topic])


def test_a_commit_killed_after_its_token_then_retention_loses_nothing(pipeline, kafka):
    """Issue 31 §2.2, reproduced: the commit was killed right after the token write; then
    retention deleted offsets 0-49. The re-executed plan used to run the job again, which
    deleted the archived file (its head no longer in Kafka), and its commit failed for
    good: 50 messages in no file, `verify` clean. Now the plan finishes from its manifest."""
    topic = pipeline.create_topic("k", 1)
    pipeline.produce(varied_messages(topic, 1, 100, seed=5))
    expected = consumed(kafka, [topic])
    plan_url = pipeline.plan("killed-run")
    pipeline.archive_to_end(plan_url)
    crash_commit(pipeline, plan_url, survive=1)
    assert pipeline.token_offsets() == {topic: {0: 100}}
    report = verify.verify_group(config.load(), "backup", storage(), pipeline.tokens)
    assert any("still in flight" in f.message for p in report.partitions for f in p.findings)
    shown = cli(pipeline, "status", "--group", "backup").stdout  # and how long ago
    assert re.search(r"^IN FLIGHT backup: run killed-run, planned [0-9dhms]+ ago, has not "
                     r"committed", shown, re.M), shown
    admin = KafkaAdminClient(bootstrap_servers=kafka)
    admin.delete_records({TopicPartition(topic, 0): 50})
    admin.close()

    pipeline.run()

    archived = pipeline.archived_records()
    assert len(archived) == len(set(archived)) == 100
    assert set(archived) == expected  # offsets 0-49 exist only here now, and they do
    report = verify.verify_group(config.load(), "backup", storage(), pipeline.tokens, full=True)
    assert report.errors() == [], report.render()
    assert pipeline.token_offsets() == {topic: {0: 100}}


def test_verify_fails_a_token_whose_run_never_reached_the_catalog(pipeline, kafka):
    """A token advanced by a run that is neither committed nor in flight any more (its
    mark removed by hand): offsets below it may be in no file, which verify must say."""
    topic = pipeline.create_topic("v", 1)
    pipeline.produce(varied_messages(topic, 1, 30, seed=6))
    plan_url = pipeline.plan("lost-run")
    pipeline.archive_to_end(plan_url)
    crash_commit(pipeline, plan_url, survive=1)
    storage().delete(layout.inflight_marker(pipeline.root, "backup"))
    report = verify.verify_group(config.load(), "backup", storage(), pipeline.tokens)
    assert [e.message for e in report.errors()] == [
        f"token backup/{topic} was advanced by run lost-run, whose commit never reached the "
        "catalog: offsets below the token may be in no file"]


def test_a_re_executed_rewind_plan_keeps_the_copy_it_saved(airflow_env, kafka, s3, unique,
                                                           tmp_path, monkeypatch):
    """Issue 31 §2.3: a rewind's plan moves the old file aside, the job writes the new one
    under the same name, the run dies before commit; re-executing the plan used to move
    the new file onto the saved copy. The format changes in between, so the two differ."""
    prefix = f"sup{unique}"
    first = Pipeline(airflow_env, kafka, s3, prefix, tmp_path, name="s", group_extra=(
        "format: {kind: sequencefile, key: msgpack, compression: none}\n"))
    topic = first.create_topic("s", 1)
    first.produce(varied_messages(topic, 1, 80, seed=7))
    first.run("first")
    original = dict(first.data_files())
    assert len(original) == 1
    second = Pipeline(airflow_env, kafka, s3, prefix, tmp_path, name="s", group_extra=(
        "format: {kind: sequencefile, key: msgpack, compression: default}\n"))
    second.in_env(monkeypatch)
    second.tokens.delete("backup", topic)  # rewind the whole topic
    plan_url = second.plan("rewind-run")
    second.archive_to_end(plan_url)
    [(path, rewritten)] = second.data_files().items()
    assert rewritten != original[path]  # same name, other bytes
    second.run("next")  # re-executes rewind-run's plan, then commits it

    saved = objects(second.s3, second.root_key, "_superseded/rewind-run/")
    assert saved == {f"_superseded/rewind-run/{path}": original[path]}
    assert second.data_files() == {path: rewritten}
    assert_whole(second, consumed(kafka, [topic]), [topic])

