"""Replay on the real services: the backup tests' awkward messages archived, produced
back into new topics (through the DAG and through the CLI), then consumed and compared
with the originals, partition by partition, in order; a replay killed mid-way and run
again; a time range."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import NewTopic
from test_backup_archive import varied_messages

from tests.support.pipeline import airflow
from tests.support.pipeline import Pipeline

PARTITIONS = 3
MESSAGES = 300
# the messages' CreateTime: BASE_MS + i seconds, recent enough for retention to keep them
BASE_MS = (int(time.time()) - 3600) * 1000


@pytest.fixture(scope="module")
def archived(airflow_env, kafka, s3, tmp_path_factory):
    """A topic of the awkward data set with known timestamps, archived by the backup DAG;
    and what Kafka holds of it, per partition in offset order."""
    prefix = f"replay{os.getpid()}{int(time.time())}"
    pipeline = Pipeline(airflow_env, kafka, s3, prefix, tmp_path_factory.mktemp("replay"))
    topic = pipeline.create_topic("src", PARTITIONS)
    pipeline.produce((*m, BASE_MS + i * 1000)
                     for i, m in enumerate(varied_messages(topic, PARTITIONS, MESSAGES, seed=16)))
    pipeline.run()
    return pipeline, topic, in_order(kafka, topic)


def in_order(kafka: str, topic: str) -> dict[int, list[tuple]]:
    """partition -> (key, value, timestamp, headers) of each message, in offset order."""
    consumer = KafkaConsumer(bootstrap_servers=kafka, enable_auto_commit=False,
                             consumer_timeout_ms=5000)
    tps = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
    ends = consumer.end_offsets(tps)
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    found: dict[int, list[tuple]] = {tp.partition: [] for tp in tps}
    for r in consumer:
        assert r.timestamp_type == 0  # CreateTime: the timestamps are the producer's
        found[r.partition].append((r.key, r.value, r.timestamp, tuple(r.headers)))
        if all(consumer.position(tp) >= ends[tp] for tp in tps):
            break
    consumer.close()
    return found


def new_topic(kafka: str, name: str, partitions: int = PARTITIONS) -> str:
    admin = KafkaAdminClient(bootstrap_servers=kafka)
    admin.create_topics([NewTopic(name, partitions, 1)])
    admin.close()
    return name


def end_offsets(kafka: str, topic: str) -> int:
    consumer = KafkaConsumer(bootstrap_servers=kafka)
    tps = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
    total = sum(consumer.end_offsets(tps).values())
    consumer.close()
    return total


def cli(pipeline: Pipeline, *args: str, **popen) -> subprocess.Popen:
    """`kafka-archive replay ...` as an operator runs it, in a session of its own."""
    return subprocess.Popen([str(Path(sys.executable).parent / "kafka-archive"), "replay", *args],
                            env=pipeline.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True, **popen)


def finished(job: subprocess.Popen) -> str:
    out, _ = job.communicate(timeout=600)
    assert job.returncode == 0, out[-4000:]
    return out


def test_the_dag_replays_every_message_into_its_partition_in_order_once(archived, kafka, unique):
    pipeline, topic, original = archived
    target = new_topic(kafka, f"copy{unique}")
    conf = {"topic": topic, "to_topic": target}
    airflow(pipeline.env, "dags", "test", "kafka_archive_replay", "--conf", json.dumps(conf))

    assert in_order(kafka, target) == original
    values = [m[1] for messages in original.values() for m in messages]
    assert None in values and b"" in values  # tombstones and empty values, kept apart
    assert any(len({name for name, _ in m[3]}) < len(m[3])  # a header name repeated
               for messages in original.values() for m in messages)


def test_a_replay_killed_mid_way_and_run_again_lands_each_message_once(archived, kafka, unique):
    pipeline, topic, original = archived
    target = new_topic(kafka, f"crash{unique}")
    # 100 messages a partition at 20 a second: the job is surely still producing when the
    # first message lands
    job = cli(pipeline, "--topic", topic, "--to-topic", target, "--max-rate", "20")
    deadline = time.monotonic() + 300
    while end_offsets(kafka, target) == 0:
        assert job.poll() is None, job.stdout.read()[-4000:]
        assert time.monotonic() < deadline, "nothing landed in the target within 300 s"
        time.sleep(0.05)
    os.killpg(job.pid, signal.SIGKILL)
    job.wait()
    landed = end_offsets(kafka, target)
    assert 0 < landed < MESSAGES  # really the middle

    out = finished(cli(pipeline, "--topic", topic, "--to-topic", target))
    assert f"already in the target" in out
    assert in_order(kafka, target) == original
    # and once more: everything is in the target, nothing is sent again
    finished(cli(pipeline, "--topic", topic, "--to-topic", target))
    assert end_offsets(kafka, target) == MESSAGES


def test_a_time_range_replays_exactly_the_messages_of_that_time(archived, kafka, unique):
    pipeline, topic, original = archived
    target = new_topic(kafka, f"time{unique}")
    since, until = BASE_MS + 100_000, BASE_MS + 200_000
    iso = datetime.fromtimestamp(until / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    finished(cli(pipeline, "--topic", topic, "--to-topic", target, "--since", str(since),
                 "--until", iso))
    expected = {p: [m for m in messages if since <= m[2] < until]
                for p, messages in original.items()}
    assert sum(map(len, expected.values())) == 100
    assert in_order(kafka, target) == expected


def test_refusals_name_the_problem_and_produce_nothing(archived, kafka, unique):
    pipeline, topic, _ = archived
    target = new_topic(kafka, f"refused{unique}")
    hole = cli(pipeline, "--topic", topic, "--to-topic", target, "--partition", "0",
               "--to-offset", "1000")
    out, _ = hole.communicate(timeout=120)
    assert hole.returncode == 1
    assert f"{topic} partition 0: offsets [100, 1000) are in no current file" in out
    assert "the first missing offset is 100" in out
    looping = cli(pipeline, "--topic", topic, "--to-topic", pipeline.create_topic("other", 1))
    out, _ = looping.communicate(timeout=120)
    assert looping.returncode == 1 and "archived by group backup" in out
    small = new_topic(kafka, f"small{unique}", 2)
    fewer = cli(pipeline, "--topic", topic, "--to-topic", small, "--dry-run")
    out, _ = fewer.communicate(timeout=120)
    assert fewer.returncode == 1 and "has 2 partitions, the replay needs partition 2" in out
    assert end_offsets(kafka, target) == end_offsets(kafka, small) == 0


def test_a_replay_runs_on_the_standalone_cluster(archived, kafka, s3, spark_cluster, unique,
                                                 airflow_env, tmp_path):
    """Executors with a Python of their own (no project) and no AWS_* variable read the
    archive and produce, as the archive job's do."""
    pipeline, topic, original = archived
    conf = "".join(f"    {k}: {json.dumps(v)}\n" for k, v in spark_cluster.conf.items())
    on_cluster = Pipeline(airflow_env, kafka, s3, pipeline.prefix, tmp_path,  # the same archive
                          extra=f"spark:\n  master: {spark_cluster.master}\n  conf:\n{conf}")
    assert on_cluster.root == pipeline.root
    target = new_topic(kafka, f"cluster{unique}")
    out = finished(cli(on_cluster, "--topic", topic, "--to-topic", target))
    assert f"replayed {MESSAGES} messages" in out
    assert in_order(kafka, target) == original


def test_hash_by_key_fits_fewer_partitions_and_keeps_each_sources_order(archived, kafka, unique):
    pipeline, topic, original = archived
    target = new_topic(kafka, f"hashed{unique}", 1)
    finished(cli(pipeline, "--topic", topic, "--to-topic", target, "--hash-by-key"))
    landed = in_order(kafka, target)[0]
    assert sorted(landed, key=lambda m: m[2]) == sorted(
        (m for messages in original.values() for m in messages), key=lambda m: m[2])
    for messages in original.values():  # the timestamps tell the messages apart
        times = {m[2] for m in messages}
        assert [m for m in landed if m[2] in times] == messages


def test_a_refusal_that_repeats_names_offset_timestamp_and_setting(archived, kafka, unique):
    """A target whose message.timestamp.before.max.ms refuses the archived (old) record
    timestamps: the command names the first refused offset, its timestamp and the setting,
    says what to change instead of "run it again", prints no stack trace, and nothing
    lands."""
    pipeline, topic, original = archived
    admin = KafkaAdminClient(bootstrap_servers=kafka)
    strict = f"strict{unique}"
    admin.create_topics([NewTopic(strict, PARTITIONS, 1, topic_configs={
        "message.timestamp.before.max.ms": "60000"})])
    admin.close()
    job = cli(pipeline, "--topic", topic, "--to-topic", strict, "--partition", "0")
    out, _ = job.communicate(timeout=600)
    assert job.returncode == 1, out[-3000:]
    first = min(m[2] for m in original[0])
    when = datetime.fromtimestamp(first / 1000, timezone.utc).isoformat(
        timespec="milliseconds").replace("+00:00", "Z")
    assert f"stopped before archived offset 0: its record timestamp {when} is" in out
    assert "message.timestamp.before.max.ms 60000" in out
    assert "nothing of this replay is in the target" in out
    assert "This refusal repeats on every retry" in out and "LogAppendTime" in out
    assert "run the same command again to resume it" not in out
    assert "Traceback" not in out and "at org.apache" not in out  # no stack trace without -v
    assert end_offsets(kafka, strict) == 0


def test_a_refused_message_stops_its_partition_with_a_prefix_landed_and_the_command_resumes(
        airflow_env, kafka, s3, unique, tmp_path):
    """A message of 2040 in the middle of the source, a target with Kafka 4's default
    message.timestamp.after.max.ms (1 h): the replay stops before it, the target holds
    exactly the messages before it, the error says so and names the setting; once the
    setting is raised, the same command resumes and the target holds the whole source, in
    order, each message once."""
    from kafka.admin import ConfigResource, ConfigResourceType

    pipeline = Pipeline(airflow_env, kafka, s3, f"rf{unique}", tmp_path)
    source = pipeline.create_topic("src", 1, **{"message.timestamp.after.max.ms": 2**62})
    future_ms = int(datetime(2040, 1, 1, tzinfo=timezone.utc).timestamp() * 1000)
    pipeline.produce((source, 0, f"k{i}".encode(), f"v{i}".encode(), [("h", b"x")],
                      future_ms if i == 33 else BASE_MS + i * 1000) for i in range(60))
    pipeline.run()
    original = in_order(kafka, source)[0]
    target = new_topic(kafka, f"rf-target{unique}", 1)

    job = cli(pipeline, "--topic", source, "--to-topic", target)
    out, _ = job.communicate(timeout=600)
    assert job.returncode == 1, out[-3000:]
    assert "stopped before archived offset 33" in out, out[-3000:]
    assert "message.timestamp.after.max.ms 3600000" in out, out[-3000:]
    assert "33 messages of this replay are in the target (archived offsets 0 up to" in out
    assert "run the same command again: it resumes at offset 33" in out
    assert in_order(kafka, target)[0] == original[:33]

    admin = KafkaAdminClient(bootstrap_servers=kafka)
    admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, target, configs={
        "message.timestamp.after.max.ms": str(2**62)})])
    admin.close()
    finished(cli(pipeline, "--topic", source, "--to-topic", target))
    assert in_order(kafka, target)[0] == original


LIMIT = 4000  # the targets' max.message.bytes below


def test_a_message_too_large_or_without_a_key_stops_with_a_prefix_and_the_command_resumes(
        airflow_env, kafka, s3, unique, tmp_path):
    """Issue 56, defect 7: archived offset 33 has no key and a 5,000-byte value; offset 20
    is exactly LIMIT bytes as a record batch of its own. A target whose max.message.bytes
    is LIMIT, then a compacted one: each replay stops before offset 33 naming the real
    cause and setting (not a timestamp, not "run it again"), the target holds exactly
    offsets 0..32 (offset 20 landed: the size is reckoned as the broker does), and once
    the setting is changed the same command resumes: the whole source, in order, once."""
    from kafka.admin import ConfigResource, ConfigResourceType

    from kafka_archive.archive.replay_job import record_size
    from kafka_archive.formats.records import Record

    pipeline = Pipeline(airflow_env, kafka, s3, f"rs{unique}", tmp_path)
    source = pipeline.create_topic("src", 1)
    headers = [("h", b"x")]
    exact = next(b"v" * n for n in range(LIMIT) if record_size(
        Record(20, b"k20", b"v" * n, 0, headers)) == LIMIT)
    pipeline.produce((source, 0, None if i == 33 else f"k{i}".encode(),
                      exact if i == 20 else b"w" * 5000 if i == 33 else f"v{i}".encode(),
                      headers, BASE_MS + i * 1000) for i in range(60))
    pipeline.run()
    original = in_order(kafka, source)[0]
    admin = KafkaAdminClient(bootstrap_servers=kafka)
    for setting, value, fixed, says in (
            ("max.message.bytes", str(LIMIT), "10000",
             f"beyond the target topic's max.message.bytes {LIMIT} (raise max.message.bytes "
             "above"),
            ("cleanup.policy", "compact", "delete",
             "it has no key, and the target topic is compacted (cleanup.policy compact)")):
        target = f"rs-target-{setting.replace('.', '-')}{unique}"  # a name no group archives
        admin.create_topics([NewTopic(target, 1, 1, topic_configs={setting: value})])
        job = cli(pipeline, "--topic", source, "--to-topic", target)
        out, _ = job.communicate(timeout=600)
        assert job.returncode == 1, out[-3000:]
        assert "stopped before archived offset 33" in out and says in out, out[-3000:]
        assert "timestamp" not in out.split("stopped before archived offset 33")[1][:300], out
        assert "run the same command again: it resumes at offset 33" in out
        assert in_order(kafka, target)[0] == original[:33]

        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, target,
                                            configs={setting: fixed})])
        finished(cli(pipeline, "--topic", source, "--to-topic", target))
        assert in_order(kafka, target)[0] == original, setting
    admin.close()
