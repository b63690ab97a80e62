"""Starting a run: resume the plan still in flight, or make, store and mark a new one.

A plan is written before any data moves. While `_inflight.json` names it, every run
re-executes that same plan, so files are rewritten byte for byte and no offset is
planned twice. Only commit clears the mark.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from datetime import datetime, timezone

from kafka_archive import layout, planning, records
from kafka_archive.config import Config
from kafka_archive.errors import TerminalError
from kafka_archive.planning import Plan, RetentionGapError, Slice
from kafka_archive.storage import Storage
from kafka_archive.tokens import TokenStore

log = logging.getLogger(__name__)


def start(config: Config, group_name: str, run_id: str, storage: Storage, tokens: TokenStore,
          consumer, now: datetime, dry_run: bool = False) -> Plan:
    group = config.group(group_name)
    marker = storage.get_or_none(layout.inflight_marker(config.archive_root, group.name))
    if marker is not None:
        plan = Plan.from_json(storage.get_bytes(json.loads(marker)["plan"]))
        log.warning("run %s failed before commit; re-executing its plan unchanged", plan.run_id)
        if not dry_run:
            _move_aside(storage, config, plan)
        return plan

    states = planning.observe(consumer, group)
    reads = {t: tokens.read(group.name, t)
             for t in sorted({s.topic for s in states} | set(tokens.topics(group.name)))}
    _refuse_other_clusters(config, group.name, reads)
    offsets = {t: dict(r.token.offsets) if r.token else {} for t, r in reads.items()}
    slices, anomalies, waiting = planning.decide(
        group, states, offsets, int(now.timestamp() * 1000), planning.oldest_pending_reader(consumer))
    failed = [a for a in anomalies if a.action == "failed"]
    if failed:
        # recorded even though the run fails: the lost range must not be forgotten
        storage.put_bytes(layout.run_file(config.archive_root, group.name, run_id, "anomalies.json"),
                          json.dumps([a.__dict__ for a in failed], indent=1).encode())
        raise RetentionGapError(failed)

    slices, superseded = _rewinds(storage, config, group.name, slices, offsets)
    topics = sorted({s.topic for s in slices})
    plan = Plan(
        group=group.name, run_id=run_id, created_at=now.isoformat(timespec="seconds"),
        bootstrap=config.bootstrap_servers, generation=config.generation,
        format=group.format.__dict__, slices=tuple(slices),
        token_versions={t: reads[t].version for t in topics},
        base_offsets={t: {str(p): o for p, o in offsets[t].items()} for t in topics},
        anomalies=tuple(anomalies), superseded=tuple(superseded), waiting=waiting)
    if dry_run or not slices:
        return plan
    plan_url = layout.run_file(config.archive_root, group.name, run_id, "plan.json")
    storage.put_bytes(plan_url, plan.to_json())
    storage.put_bytes(layout.inflight_marker(config.archive_root, group.name),
                      json.dumps({"run_id": run_id, "plan": plan_url}).encode())
    _move_aside(storage, config, plan)
    return plan


def _refuse_other_clusters(config: Config, group: str, reads: dict) -> None:
    for topic, read in reads.items():
        if read.token and read.token.offsets and read.token.bootstrap != config.bootstrap_servers:
            raise TerminalError(
                f"token {group}/{topic} was written for Kafka at {read.token.bootstrap}, "
                f"but the config says {config.bootstrap_servers}: refusing to apply offsets of "
                f"another cluster. Delete the token to start over.")


def _rewinds(storage: Storage, config: Config, group: str, slices: list[Slice],
             offsets: dict[str, dict[int, int]]) -> tuple[list[Slice], list[str]]:
    """For partitions without a token line (a rewind, or new), find archived files at or
    beyond the slice start: they are moved aside so no message is archived twice. A file
    that straddles the start keeps its messages; the slice then starts after it."""

    adjusted, superseded = [], []
    for s in slices:
        if s.partition in offsets.get(s.topic, {}):
            adjusted.append(s)
            continue
        files = sorted((f.first_offset, url) for url, _ in storage.list(
            layout.partition_dir(config.archive_root, group, s.topic, s.partition))
            if (f := layout.parse_file_name(url.rsplit("/", 1)[-1])))
        below = [(first, url) for first, url in files if first < s.start]
        start = s.start
        if below:
            start = max(start, records.last_offset(storage, below[-1][1]) + 1)
        superseded += [url for first, url in files if first >= start]
        adjusted.append(replace(s, start=min(start, s.end)))
    return adjusted, superseded


def _move_aside(storage: Storage, config: Config, plan: Plan) -> None:
    for url in plan.superseded:  # idempotent: a file already moved is simply not found
        if storage.size(url) is not None:
            storage.move(url, layout.superseded(config.archive_root, plan.run_id, url))


def now_utc() -> datetime:
    return datetime.now(timezone.utc)
