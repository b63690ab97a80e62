"""Rewinds, data lost to retention and malformed tokens: clear outcomes, nothing lost
or duplicated."""

from __future__ import annotations

import re
import subprocess
import time

import pytest
from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError, UnknownTopicOrPartitionError
from test_backup_archive import consumed, varied_messages
from test_rewind_cli import CLI

from kafka_archive import layout
from kafka_archive.airflow import connections, tasks
from kafka_archive.plan.planning import HeldTopicsError
from tests.support.mail import alerting_pipeline, html_of, wait_for_mail
from tests.support.pipeline import Pipeline, compact_log, lose_to_retention


@pytest.fixture
def pipeline(airflow_env, kafka, s3, unique, tmp_path, monkeypatch):
    made = Pipeline(airflow_env, kafka, s3, f"t{unique}", tmp_path)
    made.in_env(monkeypatch)
    return made


def superseded_keys(pipeline: Pipeline) -> list[str]:
    listing = pipeline.s3.client.list_objects_v2(Bucket=pipeline.s3.bucket,
                                                 Prefix=f"{pipeline.root_key}/_superseded/")
    return [o["Key"] for o in listing.get("Contents", [])]


def test_rewind_by_deleting_a_token_file_keeps_each_message_once(pipeline, kafka):
    topic = pipeline.create_topic("rewound", 2)
    pipeline.produce(varied_messages(topic, 2, 40, seed=7))
    pipeline.run()
    before = pipeline.data_files()

    (pipeline.token_root / "backup" / f"{topic}.token").unlink()
    pipeline.produce(varied_messages(topic, 2, 10, seed=8))
    pipeline.run()

    archived = pipeline.archived_records()
    assert len(archived) == len(set(archived)) == 50
    assert set(archived) == consumed(kafka, [topic])
    moved = superseded_keys(pipeline)
    assert len(moved) == len(before)  # the first run's files, moved aside, not deleted
    assert pipeline.token_offsets()[topic] == {0: 25, 1: 25}


def test_rewind_of_one_partition_by_deleting_its_line(pipeline, kafka):
    topic = pipeline.create_topic("oneline", 2)
    pipeline.produce(varied_messages(topic, 2, 40, seed=9))
    pipeline.run()
    token_file = pipeline.token_root / "backup" / f"{topic}.token"
    token_file.write_text("".join(line for line in token_file.read_text().splitlines(True)
                                  if f" {topic} 1 " not in line))  # partition 1's line
    pipeline.run()

    archived = pipeline.archived_records()
    assert len(archived) == len(set(archived)) == 40
    assert [k.rsplit("/", 2)[-2] for k in superseded_keys(pipeline)] == ["partition=1"]


def test_a_rewind_over_a_compacted_log_keeps_what_the_archive_held(pipeline, kafka):
    """The log cleaner removes a key's older messages after they were archived; a rewind
    archives the partition again from Kafka and keeps them from the file it replaces."""
    topic = pipeline.create_topic("cleaned", 1)
    pipeline.produce((topic, 0, f"key-{i % 4}".encode(), f"value {i}".encode(),
                      [("n", str(i).encode())]) for i in range(24))
    pipeline.run()
    first = set(pipeline.archived_records())
    assert len(first) == 24
    assert compact_log(kafka, topic, below=24) < 24  # Kafka no longer holds them all

    (pipeline.token_root / "backup" / f"{topic}.token").unlink()
    pipeline.run()

    archived = pipeline.archived_records()
    assert len(archived) == len(set(archived))
    assert first <= set(archived)  # every message archived before, key, value and headers
    assert consumed(kafka, [topic]) <= set(archived)  # and the ones that rolled segments
    assert len(superseded_keys(pipeline)) == 1  # the first run's file, moved aside


def recreate_topic(kafka: str, topic: str) -> None:
    """Delete the one-partition topic and create it again (its offsets start over)."""
    admin = KafkaAdminClient(bootstrap_servers=kafka)
    admin.delete_topics([topic])
    deadline = time.monotonic() + 120
    while True:  # the broker deletes a topic asynchronously: create it once it is gone
        try:
            admin.create_topics([NewTopic(topic, 1, 1)])
            break
        except (TopicAlreadyExistsError, UnknownTopicOrPartitionError):
            assert time.monotonic() < deadline, f"{topic} was not deleted in 120 s"
            time.sleep(0.5)  # polling the broker, not waiting for readiness blindly
    admin.close()


def archived_then_re_created(pipeline: Pipeline, kafka: str, name: str, new: int
                             ) -> tuple[str, set]:
    """A topic of 10 messages archived, then deleted and created again with `new`
    others; the topic and the archived records."""
    topic = pipeline.create_topic(name, 1)
    pipeline.produce((topic, 0, b"k", f"old {i}".encode(), []) for i in range(10))
    pipeline.run()
    old = set(pipeline.archived_records())
    recreate_topic(kafka, topic)
    pipeline.produce((topic, 0, b"k", f"new {i}".encode(), []) for i in range(new))
    return topic, old


def archived_under_generation_2(pipeline: Pipeline, old: set, new: int) -> list:
    """The remedy: a new generation, a run; both topics' messages each once."""
    with open(pipeline.config_path, "a") as config:
        config.write("generation: 2\n")
    pipeline.run()
    archived = pipeline.archived_records()
    assert old <= set(archived) and len(archived) == len(old) + new
    return archived


def test_a_rewind_over_a_re_created_topic_written_past_the_archive_is_held(pipeline, kafka,
                                                                           smtp_maildir):
    """Kafka's latest offset is past the archive's end again: only the messages tell the
    new topic from the old. The plan compares the file a rewind would replace with
    Kafka's messages at its offsets and holds the topic, nothing moved aside."""
    topic, old = archived_then_re_created(pipeline, kafka, "rewritten", 14)
    (pipeline.token_root / "backup" / f"{topic}.token").unlink()  # a rewind
    with pytest.raises(HeldTopicsError) as held:
        pipeline.plan("held")
    assert f"{topic} partition 0: Kafka holds another message at offset 0 than the " \
        "archive does" in str(held.value)
    assert "set a new `generation`" in str(held.value)
    assert superseded_keys(pipeline) == [] and set(pipeline.archived_records()) == old

    archived_under_generation_2(pipeline, old, 14)
    assert pipeline.token_offsets()[topic] == {0: 14}


def test_a_rewind_over_a_re_created_topic_the_archive_went_on_past_is_held(pipeline, kafka,
                                                                          smtp_maildir):
    """The archive went on past a re-created topic's end (as after an unclean election
    that Kafka then wrote past): the last file a rewind would replace holds the new
    topic's messages and agrees with Kafka, the first one holds the old topic's. The plan
    compares every replaced row's last message with Kafka's and holds the topic at the
    first row's, before anything moves."""
    topic, old = archived_then_re_created(pipeline, kafka, "wenton", 14)
    pipeline.run()  # token 10, Kafka's latest 14: the new topic's 10-13 archived
    went_on = set(pipeline.archived_records())
    assert old < went_on and len(went_on) == 14
    (pipeline.token_root / "backup" / f"{topic}.token").unlink()  # a rewind
    with pytest.raises(HeldTopicsError) as held:
        pipeline.plan("held")
    assert f"{topic} partition 0: Kafka holds another message at offset 9 than the " \
        "archive does" in str(held.value)
    assert superseded_keys(pipeline) == [] and set(pipeline.archived_records()) == went_on


def test_a_topic_re_created_after_a_rewind_was_planned_keeps_the_archive(
        airflow_env, kafka, s3, unique, tmp_path, monkeypatch, smtp_maildir):
    """The rewind's plan saw Kafka agree with the archive; the topic is re-created before
    its job reads it (as an unclean election between plan and job would). The job's look
    finds Kafka's other messages: the slice archives nothing, the files the plan moved
    aside come back, the token goes to the archive's end, the commit mails the topic held
    and the run's last task fails on it (the remedy: the test below)."""
    pipeline = alerting_pipeline(airflow_env, kafka, s3, smtp_maildir, f"t{unique}", tmp_path)
    pipeline.in_env(monkeypatch)
    topic = pipeline.create_topic("replanned", 1)
    pipeline.produce((topic, 0, b"k", f"old {i}".encode(), []) for i in range(10))
    pipeline.run()
    old = set(pipeline.archived_records())
    (pipeline.token_root / "backup" / f"{topic}.token").unlink()  # a rewind
    plan_url = pipeline.plan("rewind")
    assert superseded_keys(pipeline)  # the archived file moved aside
    recreate_topic(kafka, topic)
    pipeline.produce((topic, 0, b"k", f"new {i}".encode(), []) for i in range(14))
    pipeline.archive_to_end(plan_url)
    summary = pipeline.commit(plan_url)
    assert [(a["topic"], a["lost_from"]) for a in summary["offsets_reused"]] == [(topic, 9)]
    assert set(pipeline.archived_records()) == old and superseded_keys(pipeline) == []
    assert pipeline.token_offsets()[topic] == {0: 10}
    _, mail = wait_for_mail(pipeline, f"{topic} left out of the archive (offsets reused)")
    assert "Kafka holds another message at offset 9 than the archive does" in html_of(mail)
    with pytest.raises(HeldTopicsError, match=f"left out topic\\(s\\) {topic}"):
        tasks.check_held(plan_url, summary)


def test_a_re_created_topic_archived_under_a_new_generation_keeps_the_old_one(pipeline, kafka,
                                                                            smtp_maildir):
    """The remedy a token ahead of Kafka names: a topic deleted and re-created holds other
    messages at the archived offsets; with a new generation set before its token is
    deleted, the new topic's files get new names and the archived ones stay current."""
    topic, old = archived_then_re_created(pipeline, kafka, "recreated", 4)
    with pytest.raises(HeldTopicsError) as held:  # token 10, Kafka's latest 4
        pipeline.plan("held")
    assert "if the topic was re-created, set a new `generation`" in str(held.value)
    assert pipeline.token_offsets()[topic] == {0: 10}
    # a rewind instead would replace the archived messages with the new topic's: refused
    rewind = subprocess.run([CLI, "rewind",
                             "--group", "backup", "--topic", topic, "--to-offset", "0"],
                            env=pipeline.env, capture_output=True, text=True, timeout=120)
    assert rewind.returncode != 0 and "archive holds offsets up to 9 but Kafka's latest " \
        "offset is 4" in rewind.stderr, rewind.stderr
    assert pipeline.token_offsets()[topic] == {0: 10}
    (pipeline.token_root / "backup" / f"{topic}.token").unlink()  # so does a deleted token
    with pytest.raises(HeldTopicsError) as held:
        pipeline.plan("held-without-token")
    assert f"{topic} partition 0: the archive holds offsets up to 9" in str(held.value)
    assert "set a new `generation`" in str(held.value)
    assert superseded_keys(pipeline) == [] and set(pipeline.archived_records()) == old

    archived = archived_under_generation_2(pipeline, old, 4)
    assert sorted(v for *_, v, _, _ in archived if v.startswith(b"new")) == [
        f"new {i}".encode() for i in range(4)]
    assert superseded_keys(pipeline) == []  # nothing of the old topic moved aside
    assert pipeline.token_offsets()[topic] == {0: 4}


def test_retention_gap_fails_naming_the_lost_range(pipeline, kafka, smtp_maildir):
    """Its only topic held: the plan fails (and mails; smtp_maildir runs the mail server)."""
    topic = pipeline.create_topic("shortlived", 1)
    pipeline.produce(varied_messages(topic, 1, 5, seed=11))
    pipeline.run()
    assert pipeline.token_offsets()[topic] == {0: 5}
    # more messages arrive and retention deletes them before the next run
    earliest = lose_to_retention(kafka, topic)

    with pytest.raises(HeldTopicsError) as failed:
        pipeline.plan("after-retention")
    message = str(failed.value)
    # retention may delete more between lose_to_retention and the plan: the plan's earliest
    seen = int(re.search(rf"{topic} partition 0: offsets \[5, (\d+)\)", message)[1])
    assert seen >= earliest and f"({seen - 5} messages)" in message
    recorded = connections.storage("kafka_archive_s3").get_bytes(
        layout.run_file(pipeline.root, "backup", "after-retention", "anomalies.json"))
    assert b'"lost_from": 5' in recorded
    assert pipeline.token_offsets()[topic] == {0: 5}  # nothing moved


def test_malformed_token_fails_with_file_and_line_and_changes_nothing(pipeline, kafka,
                                                                     smtp_maildir):
    topic = pipeline.create_topic("badtoken", 1)
    pipeline.produce(varied_messages(topic, 1, 10, seed=12))
    pipeline.run()
    files_before = pipeline.data_files()
    token_file = pipeline.token_root / "backup" / f"{topic}.token"
    token_file.write_text(token_file.read_text() + f"{kafka} {topic} zero 7\n")
    pipeline.produce(varied_messages(topic, 1, 10, seed=13))

    with pytest.raises(HeldTopicsError) as failed:
        pipeline.plan("with-bad-token")
    lines = token_file.read_text().count("\n")
    assert str(token_file) in str(failed.value) and f"line {lines}" in str(failed.value)
    assert pipeline.data_files() == files_before
    assert connections.storage("kafka_archive_s3").get_or_none(
        layout.inflight_marker(pipeline.root, "backup")) is None
