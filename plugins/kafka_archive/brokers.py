"""Kafka clients from config: kafka-python for the Airflow tasks' metadata and offset
look-ups, librdkafka (confluent-kafka) where bytes move: the archive job's range reads and
the replay's producer. All get the same bootstrap servers and extra client properties
(security settings), written once in the config with Java's names (`kafka.properties`)
and translated here; a property one client cannot honour is refused by name.

Isolation: the archive reads committed messages only (`isolation.level` read_committed
unless the config says read_uncommitted): an aborted transaction's messages were never
sent, as far as a consumer of the topic knows, so the archive leaves them out, and their
offsets are gaps like a transaction's markers. The planner asks for the same level's end
offset, the last stable offset, so a run never waits on an open transaction.

Settings may come from an Airflow connection instead (kafka_archive.kafka_connection)."""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Iterator

from kafka_archive import retries
from kafka_archive.config import Config
from kafka_archive.errors import ConfigError, TerminalError, TransientError

if TYPE_CHECKING:  # kafka-python where a task asks Kafka, not in the job's Spark tasks
    from kafka import KafkaConsumer, TopicPartition
    from kafka.consumer.fetcher import ConsumerRecord

# username="..." and password="..." in a JAAS line (Java string escapes allowed)
_JAAS_CREDENTIAL = re.compile(r'\b(username|password)\s*=\s*"((?:[^"\\]|\\.)*)"')
JAAS_MODULES = ("org.apache.kafka.common.security.plain.PlainLoginModule",
                 "org.apache.kafka.common.security.scram.ScramLoginModule")


def _bootstrap(config: Config, bootstrap: str | None) -> str:
    if bootstrap or config.bootstrap_servers:
        return bootstrap or config.bootstrap_servers
    raise ConfigError(f"{config.path}: kafka.conn_id {config.kafka_conn_id}: the connection "
                      "was not looked up (kafka_connection.connected) before a Kafka client was made")


def python_client_settings(config: Config, bootstrap: str | None = None) -> dict:
    """Java property names (security.protocol) as kafka-python arguments
    (security_protocol), numbers as numbers (the config keeps every property as text, as
    Spark wants them); a PLAIN or SCRAM `sasl.jaas.config` as kafka-python's
    sasl_plain_username and sasl_plain_password. bootstrap: another cluster than the
    config's (a replay's target), reached with the same properties."""
    settings = {"bootstrap_servers": _bootstrap(config, bootstrap)}
    for name, value in config.kafka_properties.items():
        if name == "isolation.level":  # a consumer's alone: consumer() sets it
            continue
        if name == "sasl.jaas.config":
            settings.update(_jaas_credentials(config, value))
        else:
            settings[name.replace(".", "_")] = int(value) if value.isdigit() else value
    return settings


def _jaas_credentials(config: Config, jaas: str) -> dict[str, str]:
    found = dict(_JAAS_CREDENTIAL.findall(jaas))
    module = jaas.split(None, 1)[0] if jaas.strip() else ""
    if module not in JAAS_MODULES or set(found) != {"username", "password"}:
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
            + (f"check the password of the Airflow connection {config.kafka_conn_id!r}"
               if config.kafka_conn_id else
               "check the password in kafka.properties.sasl.jaas.config (or its ${...} "
               "variable)") + "; retrying will not help")


def consumer(config: Config, bootstrap: str | None = None,
             isolation: str | None = None) -> KafkaConsumer:
    """A consumer for metadata and offset look-ups; it joins no consumer group and commits
    nothing: progress lives in token files only. Reaching the broker is retried a few
    times (a broker restarting); then the run fails as transient. Refused credentials
    fail at once (check_authentication). isolation: instead of the config's level (the
    finalizer's look past the last stable offset, at what an open transaction holds back)."""
    from kafka import KafkaConsumer

    check_authentication(config, bootstrap)
    where = f"Kafka at {bootstrap or config.bootstrap_servers}"
    return LookupRetrying(retries.call(
        lambda: KafkaConsumer(group_id=None, enable_auto_commit=False, request_timeout_ms=30000,
                              isolation_level=isolation or isolation_level(config),
                              **python_client_settings(config, bootstrap)),
        f"{where} is unreachable"), where)


class LookupRetrying:
    """A kafka-python consumer whose metadata and offset look-ups are retried like reaching
    the broker is (a leader moving, a broker restarting), and fail classified: a
    TransientError once the retries are spent, a TerminalError for a refusal. The look-ups
    are reads, so a retry cannot do twice what one did. Everything else (assign, seek,
    poll, close) is the consumer's own."""

    LOOKUPS = frozenset({"topics", "partitions_for_topic", "beginning_offsets", "end_offsets",
                         "offsets_for_times"})

    def __init__(self, consumer: KafkaConsumer, where: str):
        self.consumer, self.where = consumer, where

    def __getattr__(self, name: str):
        attribute = getattr(self.consumer, name)
        if name not in self.LOOKUPS:
            return attribute

        def retried(*args, **kwargs):
            return retries.call(lambda: attribute(*args, **kwargs), f"{self.where}: {name}")
        return retried


def admin_client(settings: dict, timeout_ms: int = 10000):
    """A kafka-python admin client from a kafka-python client's settings (the connection
    and security ones are used: python_client_settings(config), or a producer's own)."""
    from kafka import KafkaAdminClient

    known = {k: v for k, v in settings.items() if k in KafkaAdminClient.DEFAULT_CONFIG}
    return KafkaAdminClient(**{**known, "request_timeout_ms": timeout_ms,
                               "bootstrap_timeout_ms": timeout_ms})


def group_committer(config: Config, group_id: str) -> KafkaConsumer:
    """A consumer that only commits offsets for consumer group `group_id` (commit.mirror's:
    the archive's own progress lives in token files)."""
    from kafka import KafkaConsumer

    return KafkaConsumer(group_id=group_id, enable_auto_commit=False, request_timeout_ms=30000,
                         **python_client_settings(config))


def producer(config: Config, bootstrap: str | None = None, **settings):
    """A librdkafka producer (a replay's), reaching `bootstrap` (or the config's cluster)
    with the config's properties; `settings` are librdkafka's. Refused credentials fail at
    once (check_authentication)."""
    from confluent_kafka import Producer

    check_authentication(config, bootstrap)
    client = librdkafka_settings(config, bootstrap)
    client.pop("isolation.level")  # a consumer's: a producer would warn about it
    return Producer({**client, "log_level": 0, **settings})


def isolation_level(config: Config) -> str:
    level = config.kafka_properties.get("isolation.level", "read_committed")
    if level not in ("read_committed", "read_uncommitted"):
        raise ConfigError(f"{config.path}: kafka.properties.isolation.level must be "
                          f"read_committed or read_uncommitted, got {level!r}")
    return level


# Java client properties librdkafka knows by the same name, and those it calls otherwise
SAME_IN_LIBRDKAFKA = {
    "security.protocol", "sasl.mechanism", "client.id", "isolation.level", "fetch.max.bytes",
    "max.partition.fetch.bytes", "fetch.min.bytes", "reconnect.backoff.ms",
    "reconnect.backoff.max.ms", "retry.backoff.ms", "metadata.max.age.ms",
    "connections.max.idle.ms", "ssl.key.password", "ssl.keystore.location",
    "ssl.keystore.password", "ssl.endpoint.identification.algorithm", "socket.connection.setup.timeout.ms"}
RENAMED_IN_LIBRDKAFKA = {
    "fetch.max.wait.ms": "fetch.wait.max.ms", "request.timeout.ms": "socket.timeout.ms",
    "receive.buffer.bytes": "socket.receive.buffer.bytes",
    "send.buffer.bytes": "socket.send.buffer.bytes",
    "ssl.truststore.certificates": "ssl.ca.pem",
    "ssl.keystore.certificate.chain": "ssl.certificate.pem", "ssl.keystore.key": "ssl.key.pem"}


def librdkafka_settings(config: Config, bootstrap: str | None = None) -> dict:
    """The config's Kafka properties (Java names) as librdkafka's. PEM trust and key
    stores map to ssl.ca.location and ssl.certificate.location/ssl.key.location, a PKCS12
    keystore passes as it is; a JKS store, or any property librdkafka has no equivalent
    for, is a ConfigError naming it (its value may be a secret: never shown)."""
    props = dict(config.kafka_properties)
    settings = {"bootstrap.servers": _bootstrap(config, bootstrap),
                "isolation.level": isolation_level(config)}
    stores = {kind: props.pop(f"ssl.{kind}store.type", "JKS").upper()
              for kind in ("trust", "key")}
    for name, value in props.items():
        if name == "sasl.jaas.config":
            found = _jaas_credentials(config, value)
            settings["sasl.username"] = found["sasl_plain_username"]
            settings["sasl.password"] = found["sasl_plain_password"]
        elif name == "ssl.truststore.location" and stores["trust"] == "PEM":
            settings["ssl.ca.location"] = value
        elif name == "ssl.keystore.location" and stores["key"] == "PEM":
            # Java's PEM keystore holds the key and its certificate chain in one file
            settings["ssl.certificate.location"] = settings["ssl.key.location"] = value
        elif name == "ssl.keystore.location" and stores["key"] == "PKCS12":
            settings[name] = value
        elif name in ("ssl.truststore.location", "ssl.keystore.location"):
            kind = name.split(".")[1]
            raise ConfigError(
                f"{config.path}: kafka.properties.{name}: a {stores[kind[:-5]]} {kind} has no "
                f"librdkafka equivalent (the archive job reads with librdkafka): convert it "
                f"to PEM and set ssl.{kind}.type: PEM")
        elif name == "ssl.endpoint.identification.algorithm":
            settings[name] = value or "none"  # Java's empty value turns the check off
        elif name in SAME_IN_LIBRDKAFKA:
            settings[name] = value
        elif name in RENAMED_IN_LIBRDKAFKA:
            settings[RENAMED_IN_LIBRDKAFKA[name]] = value
        else:
            raise ConfigError(
                f"{config.path}: kafka.properties.{name} has no librdkafka equivalent known "
                f"to kafka-archive (the archive job and the replay use librdkafka); remove it")
    return settings


def range_consumer(config: Config):
    """A librdkafka consumer for reading assigned offset ranges (the archive job's tasks):
    it joins no group and commits nothing (progress lives in token files), reports the
    end of a partition (so a range ending in markers does not wait out a timeout), and
    starts a range whose head retention deleted at the earliest offset left (the job
    records the loss)."""
    from confluent_kafka import Consumer

    return Consumer({**librdkafka_settings(config), "group.id": "kafka-archive",
                     "enable.auto.commit": False, "enable.auto.offset.store": False,
                     "enable.partition.eof": True, "auto.offset.reset": "earliest",
                     # a range ending at the partition's end learns it within 0.1 s (the
                     # broker holds a fetch with nothing to return this long)
                     "fetch.wait.max.ms": 100,
                     # each fetch brings up to 16 MiB of a partition (1 MiB by default)
                     "max.partition.fetch.bytes": 16 << 20,
                     # once its queue holds queued.min.messages, librdkafka fetches again
                     # only after this pause (1 s by default): a task that drains the queue
                     # sooner waited out the rest, and one range read went at ~105 MiB/s
                     # with its core a third busy; at 10 ms, 430-490 MiB/s for the same CPU
                     "fetch.queue.backoff.ms": 10, "log_level": 0})


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
    if not wanted:
        return {}
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
