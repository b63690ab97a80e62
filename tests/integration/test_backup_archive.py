"""The backup group end to end on the real services: every message archived exactly
once, losslessly, readable by Hadoop's own SequenceFile reader."""

from __future__ import annotations

import io
import random

import pytest
from kafka import KafkaConsumer, TopicPartition

from kafka_archive import config, formats
from kafka_archive.airflow import connections
from kafka_archive.formats.records import decode
from kafka_archive.tools import verify
from tests.support.pipeline import Pipeline


@pytest.fixture
def pipeline(airflow_env, kafka, s3, unique, tmp_path):
    return Pipeline(airflow_env, kafka, s3, f"t{unique}", tmp_path)


def varied_messages(topic: str, partitions: int, count: int, seed: int):
    """Binary bytes, newlines, empty and null values, keyed and unkeyed, with and without
    headers (a name repeated): everything a lossless archive must keep apart."""
    rng = random.Random(seed)
    for i in range(count):
        key = None if i % 3 == 0 else f"key-{i}".encode()
        kind = i % 5
        value = {0: bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64))),
                 1: f"line one {i}\nline two\r\n".encode(),
                 2: b"",
                 3: None if key is not None else b"\x00",  # a tombstone needs a key
                 4: f'{{"i": {i}}}'.encode()}[kind]
        headers = ([("source", b"test"), ("n", str(i).encode()), ("n", b"")]  # a repeated name
                   if i % 4 == 0 else None)
        yield topic, i % partitions, key, value, headers


def consumed(kafka: str, topics: list[str]) -> set[tuple]:
    """What Kafka holds, read back with kafka-python: the ground truth."""
    consumer = KafkaConsumer(bootstrap_servers=kafka, enable_auto_commit=False,
                             consumer_timeout_ms=5000)
    tps = [TopicPartition(t, p) for t in topics for p in consumer.partitions_for_topic(t)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    out = {(r.topic, r.partition, r.offset, r.key, r.value, r.timestamp, tuple(r.headers))
           for r in consumer}
    consumer.close()
    return out


def test_three_topics_round_trip_exactly_once_through_hadoop_reader(pipeline, kafka, sc, tmp_path):
    topics = [pipeline.create_topic(name, 4) for name in ("orders", "clicks", "billing")]
    for n, topic in enumerate(topics):
        pipeline.produce(varied_messages(topic, 4, 150, seed=n))
    expected = consumed(kafka, topics)
    assert len(expected) == 450

    pipeline.run_dag()

    archived = pipeline.archived_records()
    assert len(archived) == len(set(archived)) == 450  # each message exactly once
    assert set(archived) == expected
    assert pipeline.token_offsets() == {
        t: {p: sum(1 for e in expected if e[0] == t and e[1] == p) for p in range(4)}
        for t in topics}

    # Hadoop's own reader sees the same records (files copied locally: no s3a here)
    local = tmp_path / "archive"
    for path, data in pipeline.data_files().items():
        (local / path).parent.mkdir(parents=True, exist_ok=True)
        (local / path).write_bytes(data)
    from_hadoop = set()
    for path in local.rglob("*.seq"):
        topic, partition = path.parts[-3], int(path.parts[-2].split("=")[1])
        for key, value in sc.sequenceFile(str(path), "org.apache.hadoop.io.BytesWritable",
                                          "org.apache.hadoop.io.BytesWritable").collect():
            r = decode(bytes(key), bytes(value))
            from_hadoop.add((topic, partition, r.offset, r.key, r.value, r.timestamp_ms,
                             tuple(r.headers)))
    assert from_hadoop == expected
    tombstones = [e for e in expected if e[4] is None]
    empties = [e for e in expected if e[4] == b""]
    assert tombstones and empties  # the data set really has both, kept apart above


def test_new_topic_and_partition_are_archived_with_no_config_change(pipeline, kafka):
    first = pipeline.create_topic("first", 2)
    pipeline.produce(varied_messages(first, 2, 20, seed=1))
    pipeline.run()
    assert set(pipeline.token_offsets()) == {first}

    pipeline.add_partitions(first, 3)
    second = pipeline.create_topic("second", 1)
    pipeline.produce(varied_messages(first, 3, 30, seed=2))
    pipeline.produce(varied_messages(second, 1, 10, seed=3))
    pipeline.run()

    archived = pipeline.archived_records()
    assert len(archived) == len(set(archived)) == 60
    assert set(archived) == consumed(kafka, [first, second])
    assert sorted(pipeline.token_offsets()[first]) == [0, 1, 2]
    assert pipeline.token_offsets()[second] == {0: 10}


def test_a_topic_can_have_its_own_format(airflow_env, kafka, s3, unique, tmp_path, monkeypatch):
    prefix = f"f{unique}"
    pipeline = Pipeline(airflow_env, kafka, s3, prefix, tmp_path, group_extra=(
        f'topic_formats: {{"{prefix}-logs": {{kind: text, compression: gzip}}}}\n'))
    pipeline.in_env(monkeypatch)
    logs, orders = pipeline.create_topic("logs", 1), pipeline.create_topic("orders", 1)
    lines = [f"line {i}".encode() for i in range(20)]
    pipeline.produce([(logs, 0, None, v, None) for v in lines]
                     + [(orders, 0, None, v, None) for v in lines])
    plan_url = pipeline.plan("formats")
    pipeline.archive_to_end(plan_url)
    pipeline.commit(plan_url)

    files = pipeline.data_files()
    assert sorted(files) == [f"backup/{logs}/partition=0/1_0_{0:020d}.txt.gz",
                             f"backup/{orders}/partition=0/1_0_{0:020d}.seq"]
    for path, data in files.items():
        assert [r.value for r in formats.read(io.BytesIO(data), path)] == lines
    # verify takes the text file's offsets from its manifest row
    report = verify.verify_group(config.load(), "backup", connections.storage("kafka_archive_s3"),
                                 pipeline.tokens, files=True)
    assert report.errors() == [], report.render()
    assert sum(f.records for p in report.partitions for f in p.files) == 40
