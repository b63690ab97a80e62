"""The bodies of the archive DAG's Airflow tasks: each builds its clients from config and
calls one library function. No Airflow imports here, so the CLI can call them too."""

from __future__ import annotations

import json
import logging

from kafka_archive import brokers, commit as committing, config as config_module, layout, runs
from kafka_archive.planning import Plan
from kafka_archive.storage import Storage, s3_client
from kafka_archive.tokens import open_store

log = logging.getLogger(__name__)


def plan(group: str, run_id: str, dry_run: bool = False) -> str | None:
    """Make (or resume) the run's plan; the plan's URL, or None when there is nothing to do."""
    cfg = config_module.load()
    storage = Storage.for_airflow(cfg.s3_conn_id)
    tokens = open_store(cfg.token_root, lambda: s3_client(cfg.s3_conn_id))
    consumer = brokers.consumer(cfg)
    try:
        made = runs.start(cfg, group, run_id, storage, tokens, consumer, runs.now_utc(), dry_run)
    finally:
        consumer.close()
    for anomaly in made.anomalies:
        log.warning("%s (%s)", anomaly.describe(), anomaly.action)
    for where, why in made.waiting.items():
        log.info("waiting: %s: %s", where, why)
    log.info("plan %s: %d slices, %d offsets, %d files superseded", made.run_id,
             len(made.slices), made.records(), len(made.superseded))
    if dry_run:
        print(made.to_json().decode())
        return None
    if not made.slices:
        return None
    return layout.run_file(cfg.archive_root, group, made.run_id, "plan.json")


def commit(plan_url: str) -> dict:
    cfg = config_module.load()
    storage = Storage.for_airflow(cfg.s3_conn_id)
    made = Plan.from_json(storage.get_bytes(plan_url))
    tokens = open_store(cfg.token_root, lambda: s3_client(cfg.s3_conn_id))
    summary = committing.commit(cfg, made, storage, tokens, runs.now_utc())
    log.info("committed %s", json.dumps(summary))
    return summary
