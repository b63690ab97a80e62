"""Kafka clients from config: kafka-python for Airflow tasks, options for Spark's source.
Both get the same bootstrap servers and extra client properties (security settings)."""

from __future__ import annotations

from kafka import KafkaConsumer
from kafka.errors import KafkaError

from kafka_archive.config import Config
from kafka_archive.errors import TransientError


def python_client_settings(config: Config) -> dict:
    """Java property names (security.protocol) as kafka-python arguments (security_protocol)."""
    return {"bootstrap_servers": config.bootstrap_servers,
            **{k.replace(".", "_"): v for k, v in config.kafka_properties.items()}}


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
