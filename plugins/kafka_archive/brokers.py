"""Kafka clients from config: kafka-python for Airflow tasks, options for Spark's source.
Both get the same bootstrap servers and extra client properties (security settings)."""

from __future__ import annotations

import time
from typing import Iterator

from kafka import KafkaConsumer, TopicPartition
from kafka.consumer.fetcher import ConsumerRecord
from kafka.errors import KafkaError

from kafka_archive.config import Config
from kafka_archive.errors import TransientError


def python_client_settings(config: Config) -> dict:
    """Java property names (security.protocol) as kafka-python arguments (security_protocol);
    numbers as numbers (the config keeps every property as text, as Spark wants them)."""
    return {"bootstrap_servers": config.bootstrap_servers,
            **{k.replace(".", "_"): int(v) if v.isdigit() else v
               for k, v in config.kafka_properties.items()}}


def consumer(config: Config) -> KafkaConsumer:
    """A consumer for metadata and offset look-ups; it joins no consumer group and commits
    nothing: progress lives in token files only."""
    try:
        return KafkaConsumer(group_id=None, enable_auto_commit=False,
                             request_timeout_ms=30000, **python_client_settings(config))
    except KafkaError as exc:
        raise TransientError(f"Kafka at {config.bootstrap_servers} is unreachable: {exc!r}") from exc


def spark_options(config: Config) -> dict[str, str]:
    return {"kafka.bootstrap.servers": config.bootstrap_servers,
            **{f"kafka.{k}": v for k, v in config.kafka_properties.items()}}


def read_range(consumer: KafkaConsumer, tp: TopicPartition, start: int, end: int,
               timeout_s: float = 60) -> Iterator[ConsumerRecord]:
    """Every message of tp in [start, end); offsets Kafka holds no message at are skipped."""
    consumer.assign([tp])
    consumer.seek(tp, start)
    deadline = time.monotonic() + timeout_s
    while consumer.position(tp) < end:
        if time.monotonic() > deadline:
            raise TransientError(f"{tp.topic} partition {tp.partition}: reading offsets "
                                 f"[{start}, {end}) stalled at {consumer.position(tp)} "
                                 f"for {timeout_s:.0f} s")
        for message in consumer.poll(timeout_ms=1000).get(tp, ()):
            if message.offset < end:
                yield message


def timestamps_at(consumer: KafkaConsumer, offsets: dict[TopicPartition, int],
                  timeout_s: float = 60) -> dict[TopicPartition, int]:
    """Timestamp of the first message at or after each offset; partitions holding no
    message from there to their end are left out."""
    if not offsets:
        return {}
    ends = consumer.end_offsets(list(offsets))
    wanted = {tp: o for tp, o in offsets.items() if o < ends[tp]}
    consumer.assign(list(wanted))
    for tp, offset in wanted.items():
        consumer.seek(tp, offset)
    found: dict[TopicPartition, int] = {}
    deadline = time.monotonic() + timeout_s
    while wanted.keys() - found.keys():
        if time.monotonic() > deadline:
            missing = ", ".join(f"{tp.topic}/{tp.partition}@{wanted[tp]}" for tp in wanted.keys() - found.keys())
            raise TransientError(f"reading one message at {missing} took over {timeout_s:.0f} s")
        for tp, messages in consumer.poll(timeout_ms=1000).items():
            if messages and tp not in found:
                found[tp] = messages[0].timestamp
                consumer.pause(tp)
        for tp in wanted.keys() - found.keys():
            if consumer.position(tp) >= ends[tp]:  # only markers or compacted offsets left
                found[tp] = None
    consumer.resume(*wanted)
    return {tp: ts for tp, ts in found.items() if ts is not None}
