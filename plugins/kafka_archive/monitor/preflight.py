"""Preflight: is this deployment ready to archive, audit and alert?

Checks Kafka (reachable; the audit's monitoring topic exists), the archive root (a write
reads back; its server honours conditional writes), the token root (a probe token created
and deleted by compare-and-swap),
the Kafka client settings (librdkafka takes every kafka.properties entry), and, when
given, the SMTP connection alerts go through, each Spark Connect server a group's
`spark_connect` names (a job runs there: the library reaches it, its cores answer) and
the Schema Registry the avro, protobuf and json_schema parsers read (it answers with
the configured credentials).

Run by the `kafka_archive_preflight` DAG and by `kafka-archive preflight`. It writes what
it saw to <archive_root>/_preflight/report.json, so a person (or a test) can check the
check ran where they think it did, then fails naming every check that did not pass.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Callable

from kafka.errors import KafkaError

from kafka_archive import brokers, retries
from kafka_archive.config import Config
from kafka_archive.errors import TerminalError, TransientError
from kafka_archive.formats import parsers, registry
from kafka_archive.storage import Storage, join
from kafka_archive.tokens import S3TokenStore, Token, TokenStore

PROBE_GROUP, PROBE_TOPIC = "_preflight", "probe"


def kafka_topics(config: Config) -> list[str]:
    brokers.check_authentication(config)  # refused credentials: said at once
    try:
        admin = brokers.admin_client(brokers.python_client_settings(config))
    except KafkaError as exc:
        raise retries.classify(exc, f"Kafka at {config.bootstrap_servers} is unreachable") from exc
    try:
        return sorted(admin.list_topics())
    finally:
        admin.close()


def run(config: Config, store: Storage, run_id: str = "manual", tokens: TokenStore | None = None,
        smtp: Callable[[], str] | None = None,
        spark_connect: Callable[[str], str] | None = None) -> dict:
    """`smtp`: opens and closes the alert mail connection, returning what it reached;
    `spark_connect(conn_id)`: runs a small job on that connection's Connect server,
    returning what answered."""
    topics = kafka_topics(config)
    checks = {"monitoring_topic": lambda: _monitoring_topic(config, topics),
              # the tasks read Kafka with librdkafka: refuse a property it cannot honour
              "kafka_client": lambda: _kafka_client(config)}
    checks["conditional_writes"] = lambda: conditional_writes(config, store, tokens)
    if tokens is not None:
        checks["token_root"] = lambda: _token_root(config, tokens)
    if smtp is not None:
        checks["smtp"] = smtp
    if config.schema_registry or any(  # a registry parser's topics cannot be read without it
            parsers.needs_registry(spec)
            for g in config.groups.values() for spec in (g.parser, *dict(g.topic_parsers).values())):
        checks["schema_registry"] = lambda: registry.reachable(config.schema_registry)
    if spark_connect is not None:
        for conn_id in sorted({g.spark_connect for g in config.groups.values() if g.spark_connect}):
            checks[f"spark_connect {conn_id}"] = lambda conn_id=conn_id: spark_connect(conn_id)
    results, failed = {}, []
    for name, check in checks.items():
        try:
            results[name] = f"ok: {check()}"
        except Exception as exc:  # each check reports; the run fails below, naming them all
            results[name] = f"FAILED: {exc}"
            failed.append(f"{name}: {exc}")
    report = {
        "run_id": run_id,
        "checked_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "bootstrap_servers": config.bootstrap_servers,
        "topics": topics,
        "archive_root": config.archive_root,
        "token_root": config.token_root,
        "checks": results,
    }
    url = join(config.archive_root, "_preflight", "report.json")
    store.put_bytes(url, json.dumps(report, indent=2).encode())
    # read back what was written: a root that accepts writes but loses them is not usable
    if json.loads(store.get_bytes(url)) != report:
        raise TransientError(f"{url}: read back differs from what was written")
    if failed:
        raise TerminalError("preflight failed:\n  " + "\n  ".join(failed))
    return report


def conditional_writes(config: Config, store: Storage, tokens: TokenStore | None) -> str:
    """The archive root's server (and the token root's, on S3) honours compare-and-swap:
    TerminalError naming the server otherwise. The plan checks it before every run."""
    done = [store.check_conditional_writes(join(config.archive_root, "_preflight"))]
    if isinstance(tokens, S3TokenStore):
        done.append(tokens.storage.check_conditional_writes(join(tokens.url, PROBE_GROUP)))
    return "; ".join(dict.fromkeys(done))


def _kafka_client(config: Config) -> str:
    settings = brokers.librdkafka_settings(config)
    return f"librdkafka, {settings['isolation.level']}"


def _monitoring_topic(config: Config, topics: list[str]) -> str:
    topic = config.audit.topic
    if topic not in topics:
        raise TerminalError(f"the audit's monitoring topic {topic!r} does not exist on "
                            f"{config.bootstrap_servers}; create it (README, 'Audit'): "
                            f"kafka-topics.sh --bootstrap-server {config.bootstrap_servers} "
                            f"--create --topic {topic}")
    return topic


def _token_root(config: Config, tokens: TokenStore) -> str:
    """Create, read back and delete a probe token: the root is there and writable."""
    read = tokens.read(PROBE_GROUP, PROBE_TOPIC)  # a probe left by a crashed check is replaced
    probe = Token(PROBE_GROUP, PROBE_TOPIC, "preflight", {0: 0},
                  committed_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    tokens.write(probe, read.version)
    if tokens.read(PROBE_GROUP, PROBE_TOPIC).token != probe:
        raise TerminalError(f"{config.token_root}: a probe token read back differs")
    tokens.delete(PROBE_GROUP, PROBE_TOPIC)
    return config.token_root
