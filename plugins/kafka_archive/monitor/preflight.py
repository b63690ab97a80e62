"""Preflight: can this deployment reach Kafka and write to its archive root?

Run by the `kafka_archive_preflight` DAG and by `kafka-archive preflight`. It writes what
it saw to <archive_root>/_preflight/report.json, so a person (or a test) can check the
check ran where they think it did.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

from kafka import KafkaAdminClient
from kafka.errors import KafkaError

from kafka_archive.config import Config
from kafka_archive.errors import TransientError
from kafka_archive.storage import Storage, join


def kafka_topics(bootstrap_servers: str) -> list[str]:
    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers, request_timeout_ms=10000)
    except KafkaError as exc:
        raise TransientError(f"Kafka at {bootstrap_servers} is unreachable: {exc!r}") from exc
    try:
        return sorted(admin.list_topics())
    finally:
        admin.close()


def run(config: Config, store: Storage, run_id: str = "manual") -> dict:
    report = {
        "run_id": run_id,
        "checked_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "bootstrap_servers": config.bootstrap_servers,
        "topics": kafka_topics(config.bootstrap_servers),
        "archive_root": config.archive_root,
    }
    url = join(config.archive_root, "_preflight", "report.json")
    store.put_bytes(url, json.dumps(report, indent=2).encode())
    # read back what was written: a root that accepts writes but loses them is not usable
    if json.loads(store.get_bytes(url)) != report:
        raise TransientError(f"{url}: read back differs from what was written")
    return report
