"""A group's in-flight mark: the one plan that was made and has not committed yet.

`<root>/_runs/<group>/_inflight.json` names it. Only plan.runs sets the mark and only
commit clears it; everything else that must not act while a plan is in flight (rewind,
accept-loss, backfill, the alerts) asks here, per topic: a plan in flight holds the
topics whose tokens it will advance.

Its counterpart for a table group's compaction (commit.compaction) is the compaction
lease, `_runs/<group>/_compacting.json`: a plan looks for it after marking itself, a
compaction for the mark after taking it (see compacting).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from kafka_archive import layout
from kafka_archive.catalog import lease
from kafka_archive.plan.planning import Plan
from kafka_archive.storage import Storage


def plan(storage: Storage, root: str, group: str) -> Plan | None:
    """The plan in flight, or None."""
    marker = storage.get_or_none(layout.inflight_marker(root, group))
    return None if marker is None else Plan.from_json(storage.get_bytes(json.loads(marker)["plan"]))


def holding(storage: Storage, root: str, group: str, topic: str | None = None) -> str | None:
    """The run id of the plan in flight if it holds topic (any topic: None), else None.
    A marker whose plan cannot be read holds every topic."""
    marker = storage.get_or_none(layout.inflight_marker(root, group))
    if marker is None:
        return None
    found = json.loads(marker)
    if topic is None:
        return found.get("run_id")
    held = _held(storage, found)
    return found.get("run_id") if held is None or topic in held else None


def held_topics(storage: Storage, root: str, group: str) -> frozenset[str] | None:
    """The topics the plan in flight holds (none in flight: empty; None: every topic, its
    plan cannot be read), in a few reads whatever the number of topics. A plan a person
    gave up by deleting its mark still holds them until the next plan takes back what it
    moved (the note says given_up then): its commit may have moved tokens the catalog
    does not hold yet."""
    marker = storage.get_or_none(layout.inflight_marker(root, group))
    if marker is not None:
        return _held(storage, json.loads(marker))
    note = last(storage, root, group)
    if note is None or note.get("given_up") or storage.size(
            layout.run_file(root, group, note["run_id"], "committed.json")) is not None:
        return frozenset()
    return _held(storage, note)


def _held(storage: Storage, marker: dict) -> frozenset[str] | None:
    stored = storage.get_or_none(marker["plan"])
    return None if stored is None else frozenset(json.loads(stored).get("token_versions", {}))


@dataclass(frozen=True)
class InFlight:
    """The plan in flight as operators see it: whose, since when, which topics it holds."""
    run_id: str
    planned_at: str | None  # ISO-8601 UTC; None: its plan cannot be read
    topics: tuple[str, ...]

    def age_ms(self, now_ms: int) -> int | None:
        if self.planned_at is None:
            return None
        return max(0, now_ms - int(datetime.fromisoformat(self.planned_at).timestamp() * 1000))


def current(storage: Storage, root: str, group: str) -> InFlight | None:
    """The plan in flight, for status and the group page; None when there is none."""
    marker = storage.get_or_none(layout.inflight_marker(root, group))
    if marker is None:
        return None
    found = json.loads(marker)
    stored = storage.get_or_none(found["plan"])
    plan = json.loads(stored) if stored is not None else {}
    return InFlight(found.get("run_id", "?"), plan.get("created_at"),
                    tuple(sorted(plan.get("token_versions", {}))))


def mark(storage: Storage, root: str, group: str, run_id: str, plan_url: str) -> None:
    """The mark, and beside it a note of the run it names that outlives the mark: a
    person may delete the mark (giving the plan up), and the next plan must then find
    what the given-up plan moved and wrote (plan.runs._put_back_given_up)."""
    marker = json.dumps({"run_id": run_id, "plan": plan_url}).encode()
    storage.put_bytes(layout.last_plan_marker(root, group), marker)
    storage.put_bytes(layout.inflight_marker(root, group), marker)


def last(storage: Storage, root: str, group: str) -> dict | None:
    """The note of the run last marked in flight ({run_id, plan, given_up?}), or None."""
    note = storage.get_or_none(layout.last_plan_marker(root, group))
    return None if note is None else json.loads(note)


def note_given_up(storage: Storage, root: str, group: str, note: dict) -> None:
    storage.put_bytes(layout.last_plan_marker(root, group),
                      json.dumps({**note, "given_up": True}).encode())


def clear(storage: Storage, root: str, group: str, run_id: str) -> None:
    """The mark taken off by the run it names, and only by it: a run re-executed after
    another was planned (a Clear in Airflow, a late attempt) must not release that one's
    plan, whose files are being written."""
    url = layout.inflight_marker(root, group)
    marker = storage.get_or_none(url)
    if marker is not None and json.loads(marker).get("run_id") == run_id:
        storage.delete(url)


def compacting(storage: Storage, root: str, group: str) -> dict | None:
    """The group's compaction lease as found ({id, host, pid, until, ..., alive}), or
    None. alive: its process may still be running (another host's: until its claim
    expires)."""
    data = storage.get_or_none(layout.compaction_lease(root, group))
    if data is None or lease.released(data):
        return None
    held = lease.parsed(data)
    return {**(held or {}), "alive": held is not None and lease.alive(held)}
