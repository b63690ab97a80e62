"""Kafka clients from config: kafka-python for Airflow tasks, options for Spark's source.
Both get the same bootstrap servers and extra client properties (security settings),
written once in the config with Java's names (`kafka.properties`)."""

from __future__ import annotations

import re
import time
from typing import Iterator

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.consumer.fetcher import ConsumerRecord

from kafka_archive import retries
from kafka_archive.config import Config
from kafka_archive.errors import ConfigError, TerminalError, TransientError

# username="..." and password="..." in a JAAS line (Java string escapes allowed)
_JAAS_CREDENTIAL = re.compile(r'\b(username|password)\s*=\s*"((?:[^"\\]|\\.)*)"')
_JAAS_MODULES = ("org.apache.kafka.common.security.plain.PlainLoginModule",
                 "org.apache.kafka.common.security.scram.ScramLoginModule")


def python_client_settings(config: Config, bootstrap: str | None = None) -> dict:
    """Java property names (security.protocol) as kafka-python arguments
    (security_protocol), numbers as numbers (the config keeps every property as text, as
    Spark wants them); a PLAIN or SCRAM `sasl.jaas.config` as kafka-python's
    sasl_plain_username and sasl_plain_password. bootstrap: another cluster than the
    config's (a replay's target), reached with the same properties."""
    settings = {"bootstrap_servers": bootstrap or config.bootstrap_servers}
    for name, value in config.kafka_properties.items():
        if name == "sasl.jaas.config":
            settings.update(_jaas_credentials(config, value))
        else:
            settings[name.replace(".", "_")] = int(value) if value.isdigit() else value
    return settings


def _jaas_credentials(config: Config, jaas: str) -> dict[str, str]:
    found = dict(_JAAS_CREDENTIAL.findall(jaas))
    module = jaas.split(None, 1)[0] if jaas.strip() else ""
    if module not in _JAAS_MODULES or set(found) != {"username", "password"}:
        # the value holds a password: name the key and the expected form, never the value
        raise ConfigError(f"{config.path}: 'kafka.properties.sasl.jaas.config' must be "
                          f"'<PlainLoginModule or ScramLoginModule class> required "
                          f'username="..." password="...";\' (kafka-python supports only these)')
    return {"sasl_plain_username": _unescape(found["username"]),
            "sasl_plain_password": _unescape(found["password"])}


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", r"\1", value)


class AuthenticationFailed(TerminalError):
    """The broker refused the configured SASL credentials: retrying cannot help."""


def check_authentication(config: Config, bootstrap: str | None = None,
                         timeout_s: float = 10.0) -> None:
    """With SASL configured, fail at once when the broker refuses the credentials.
    kafka-python sees the refusal only as a lost connection and retries until its
    bootstrap times out (30 s a client, ~90 s with our retries, then "unreachable");
    librdkafka reports it in a third of a second, so it asks first."""
    settings = python_client_settings(config, bootstrap)
    protocol = str(settings.get("security_protocol", "PLAINTEXT")).upper()
    if protocol != "SASL_PLAINTEXT" or "sasl_plain_username" not in settings:
        return  # no SASL, or over TLS (its certificates are kafka-python's settings alone)
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient

    refused: list = []
    admin = AdminClient({
        "bootstrap.servers": settings["bootstrap_servers"], "security.protocol": protocol,
        "sasl.mechanism": str(settings.get("sasl_mechanism", "PLAIN")),
        "sasl.username": settings["sasl_plain_username"],
        "sasl.password": settings["sasl_plain_password"],
        "error_cb": lambda e: refused.append(e) if e.code() == KafkaError._AUTHENTICATION else None,
        "log_level": 0})
    deadline = time.monotonic() + timeout_s
    while not refused and time.monotonic() < deadline:
        try:
            admin.list_topics(timeout=0.5)
            return  # authenticated: the metadata came
        except Exception:  # not yet (or unreachable: kafka-python's retries say so)
            admin.poll(0)
    if refused:
        raise AuthenticationFailed(
            f"Kafka at {settings['bootstrap_servers']}: authentication failed for SASL user "
            f"{settings['sasl_plain_username']!r} ({settings.get('sasl_mechanism', 'PLAIN')}): "
            "check the password in kafka.properties.sasl.jaas.config (or its ${...} "
            "variable); retrying will not help")


def consumer(config: Config, bootstrap: str | None = None) -> KafkaConsumer:
    """A consumer for metadata and offset look-ups; it joins no consumer group and commits
    nothing: progress lives in token files only. Reaching the broker is retried a few
    times (a broker restarting); then the run fails as transient. Refused credentials
    fail at once (check_authentication)."""
    check_authentication(config, bootstrap)
    return retries.call(
        lambda: KafkaConsumer(group_id=None, enable_auto_commit=False, request_timeout_ms=30000,
                              **python_client_settings(config, bootstrap)),
        f"Kafka at {bootstrap or config.bootstrap_servers} is unreachable")


def producer(config: Config, bootstrap: str | None = None, **settings) -> KafkaProducer:
    """A producer (a replay's), reaching the broker like `consumer`."""
    check_authentication(config, bootstrap)
    return retries.call(
        lambda: KafkaProducer(**python_client_settings(config, bootstrap), **settings),
        f"Kafka at {bootstrap or config.bootstrap_servers} is unreachable")


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
