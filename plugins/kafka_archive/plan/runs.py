"""Starting a run: resume the plan still in flight, or make, store and mark a new one.

A plan is written before any data moves. While `_inflight.json` names it, every run
re-executes that same plan, so files are rewritten byte for byte and no offset is
planned twice. Only commit clears the mark.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timezone

from kafka_archive import layout
from kafka_archive.commit import finalizing
from kafka_archive.config import Config
from kafka_archive.errors import TerminalError
from kafka_archive.plan import planning, rewinds
from kafka_archive.plan.planning import Caps, Plan, RetentionGapError
from kafka_archive.storage import Storage
from kafka_archive.tokens import TokenStore

log = logging.getLogger(__name__)


def start(config: Config, group_name: str, run_id: str, storage: Storage, tokens: TokenStore,
          consumer, now: datetime, dry_run: bool = False, topics: tuple[str, ...] = (),
          caps: Caps = Caps()) -> Plan:
    """topics (empty: all of the group) and caps come from a manual run's params."""
    group = config.group(group_name)
    marker = storage.get_or_none(layout.inflight_marker(config.archive_root, group.name))
    if marker is not None:
        plan = Plan.from_json(storage.get_bytes(json.loads(marker)["plan"]))
        log.warning("run %s failed before commit; re-executing its plan unchanged%s", plan.run_id,
                    " (this run's topics and caps do not apply)" if topics or caps != Caps() else "")
        if not dry_run:
            _move_aside(storage, config, plan)
        return plan

    states = planning.only_topics(planning.observe(consumer, group), topics, group)
    with_tokens = set() if topics else set(tokens.topics(group.name))
    reads = {t: tokens.read(group.name, t) for t in sorted({s.topic for s in states} | with_tokens)}
    _refuse_other_clusters(config, group.name, reads)
    offsets = {t: dict(r.token.offsets) if r.token else {} for t, r in reads.items()}
    slices, anomalies, waiting = planning.decide(
        group, states, offsets, int(now.timestamp() * 1000), planning.oldest_pending_reader(consumer),
        caps)
    failed = [a for a in anomalies if a.action == "failed"]
    if failed:
        # recorded even though the run fails: the lost range must not be forgotten
        storage.put_bytes(layout.run_file(config.archive_root, group.name, run_id, "anomalies.json"),
                          json.dumps([a.__dict__ for a in failed], indent=1).encode())
        raise RetentionGapError(failed)

    slices, superseded = rewinds.supersede(storage, config, group.name, slices, offsets)
    topics = sorted({s.topic for s in slices})
    plan = Plan(
        group=group.name, run_id=run_id, created_at=now.isoformat(timespec="seconds"),
        bootstrap=config.bootstrap_servers, generation=config.generation,
        format=group.format.__dict__, slices=tuple(slices),
        topic_formats={t: group.format_for(t).__dict__ for t in topics
                       if group.format_for(t) != group.format},
        token_versions={t: reads[t].version for t in topics},
        base_offsets={t: {str(p): o for p, o in offsets[t].items()} for t in topics},
        anomalies=tuple(anomalies), superseded=tuple(superseded), waiting=waiting,
        finalized=finalizing.watermarks(storage, config, group, topics))
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


def _move_aside(storage: Storage, config: Config, plan: Plan) -> None:
    for url in plan.superseded:  # idempotent: a file already moved is simply not found
        if storage.size(url) is not None:
            storage.move(url, layout.superseded(config.archive_root, plan.run_id, url))


def now_utc() -> datetime:
    return datetime.now(timezone.utc)
