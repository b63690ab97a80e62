"""An audit of one group that reads only what is new since its checkpoint.

- monitoring events: only the files `gather.ingest` copied since the last audit;
- archived counts: only the catalog entries since the last audit: the rows each adds are
  counted in, the rows it removes (a rewind, a backfill) counted out. A catalog rebuilt
  since, or a checkpoint from before catalogs, is recounted from the current rows once;
- verdicts: every window is reconciled in memory, but a window judged final keeps its
  verdict while its counts are unchanged (checkpoint.Checkpoint.judge).

`rescan` starts the counts over from every events file and every current row, judges
every window again, and judges them against the archived files themselves; the alarms
(and who acknowledged what) are kept.

The checkpoint is replaced by compare-and-swap: an audit or an acknowledgement that lost a
race to another reads the new checkpoint and does its (idempotent) work again.
"""

from __future__ import annotations

import logging
from datetime import datetime
from dataclasses import dataclass
from typing import Callable, Mapping

from kafka_archive import layout
from kafka_archive.audit import gather, reconcile
from kafka_archive.audit.checkpoint import Alarm, Checkpoint
from kafka_archive.audit.reconcile import Verdict
from kafka_archive import catalog
from kafka_archive.catalog import store
from kafka_archive.config import Config
from kafka_archive.errors import TerminalError, VersionConflict
from kafka_archive.progress_bars import Track, untracked
from kafka_archive.storage import Storage

log = logging.getLogger(__name__)

ATTEMPTS = 3  # compare-and-swap races lost before giving up (an ack and an audit at once)


@dataclass(frozen=True)
class Audit:
    every: list[Verdict]    # a verdict for every window
    judged: list[Verdict]   # the windows judged by this audit (not kept from an earlier one)
    alarms: list[Alarm]     # every mismatch not resolved: new, open or acknowledged
    resolved: list[Alarm]   # alarms whose window turned OK in this audit
    bad_events: list[str]
    new_runs: int           # committed runs (and backfills) counted for the first time
    recounted: bool         # archived counts corrected for a rewind or backfill, or recounted


def load(storage: Storage, config: Config, group: str) -> Checkpoint:
    data, version = storage.get_versioned(layout.audit_checkpoint(config.archive_root, group))
    if data is None:
        return Checkpoint()
    try:
        return Checkpoint.from_json(data, version)
    except (ValueError, KeyError, TypeError) as exc:
        raise TerminalError(f"{layout.audit_checkpoint(config.archive_root, group)}: not a "
                            f"readable audit checkpoint ({exc!r}); `kafka-archive audit --rescan` "
                            "after moving it aside starts over") from None


def audit(config: Config, storage: Storage, group: str, run_id: str, at: str,
          through: Mapping[str, int | None], rescan: bool = False,
          track: Track = untracked) -> Audit:
    """Fold in what is new, judge, store the checkpoint; `through` is
    commit.finalizing.archived_through's (topic -> time up to which it is archived)."""
    def step(cp: Checkpoint) -> Audit:
        if rescan:
            cp.forget_counts()
        bad = _fold_new_events(config, storage, cp)
        new_runs, recounted = _fold_new_runs(config, storage, group, cp, rescan)
        if dropped := cp.drop_retired():
            log.info("audit of %s: %d counts of windows retired before %d ignored", group,
                     dropped, cp.retired_before_ms)
        def verdicts_of(archived: dict) -> list[Verdict]:
            return reconcile.reconcile(cp.expected, archived, config.audit.window_s * 1000,
                                       through, config.audit.grace_s * 1000,
                                       unclosed=cp.unclosed)

        basis = None
        if rescan:  # judged by the files; what the catalog counts is kept beside
            basis = {(v.topic, v.source, v.window_start_ms): v.archived
                     for v in verdicts_of(cp.archived)}
        verdicts = verdicts_of(gather.archived_by_rescan(config, storage, group, track)
                               if rescan else cp.archived)
        every, judged, resolved = cp.judge(verdicts, run_id, at, rescan, basis)
        cp.retire(int(datetime.fromisoformat(at).timestamp() * 1000) - config.audit.retire_s * 1000)
        return Audit(every, judged, sorted(cp.alarms.values(), key=lambda a: a.key), resolved,
                     bad, new_runs, recounted)

    return update(storage, config, group, step)


def update(storage: Storage, config: Config, group: str, change: Callable[[Checkpoint], object]):
    """Read the checkpoint, change it, write it back by compare-and-swap; on a lost race,
    again from a fresh read (at most ATTEMPTS times). Returns what `change` returned."""
    for attempt in range(1, ATTEMPTS + 1):
        cp = load(storage, config, group)
        result = change(cp)
        try:
            storage.put_if(layout.audit_checkpoint(config.archive_root, group), cp.to_json(),
                           cp.version)
            return result
        except VersionConflict:
            if attempt == ATTEMPTS:
                raise
            log.warning("audit checkpoint of %s changed meanwhile; again (%d)", group, attempt)


def alarms(storage: Storage, config: Config, group: str) -> list[Alarm]:
    """The group's unresolved mismatches (new, open and acknowledged), for the CLI and the
    UI page: each with its window, counts, when found and mailed, and its acknowledgement."""
    return sorted(load(storage, config, group).alarms.values(), key=lambda a: a.key)


def acknowledge(storage: Storage, config: Config, group: str, topic: str, source: str,
                at_ms: int, reason: str, by: str, now: str) -> Alarm:
    """Mark the alarm of (topic, source) whose window holds at_ms as acknowledged: it stays
    listed, no longer counts as open, and is not mailed again."""
    if not reason.strip():
        raise TerminalError("an acknowledgement needs a reason")

    def step(cp: Checkpoint) -> Alarm:
        alarm = cp.find_alarm(topic, source, at_ms)
        if alarm is None:
            listed = "; ".join(f"{a.topic} {a.source} "
                               f"{reconcile.format_window(a.window_start_ms, a.window_ms)}"
                               for a in cp.alarms.values()) or "none"
            raise TerminalError(f"audit of group {group}: no mismatch of topic {topic}, source "
                                f"{source} at that window (unresolved: {listed})")
        alarm.ack = {"by": by, "at": now, "reason": reason}
        return alarm

    return update(storage, config, group, step)


def mark_mailed(storage: Storage, config: Config, group: str, keys, now: str | None) -> None:
    """The alarms recorded as mailed at `now` (None: not mailed, a failed send)."""
    keys = set(keys)

    def step(cp: Checkpoint) -> None:
        for key in keys & cp.alarms.keys():
            cp.alarms[key].mailed_at = now

    update(storage, config, group, step)


def locate(storage: Storage, config: Config, group: str, alarms: list[Alarm]) -> dict:
    """Where the archived messages of each alarm's window are: alarm key -> per current
    row counting messages of that window and source, its partition, offsets, count and
    file. Reads the rows of the alarms' topics: meant for the rare mail."""
    width = config.audit.window_s * 1000
    cat = catalog.open_catalog(storage, config, group)
    found: dict = {a.key: [] for a in alarms}
    for a in alarms:
        end = a.window_start_ms + max(a.window_ms, width)
        for row in cat.rows(a.topic):
            n = sum(c for s, w, c in row.get("audit", ()) if s == a.source
                    and a.window_start_ms <= w < end)
            if n:
                found[a.key].append({"partition": row["partition"], "start": row["start"],
                                     "end": row["end"], "messages": n, "url": row.get("url")})
    return found


def holes(storage: Storage, config: Config, group: str, alarms: list[Alarm],
          located: dict) -> dict:
    """The holes near each alarm's window, as verify names them: alarm key -> (partition,
    start, end) of offsets below the token that no current file holds and no accepted
    loss explains, touching the offsets of the rows holding the window's messages (every
    hole of the topic when none holds any). From the catalog's summaries."""
    cat = catalog.open_catalog(storage, config, group)
    lost = catalog.lost_ranges(cat.state)
    found: dict = {}
    for a in alarms:
        topic = cat.state.topics.get(a.topic)
        spans: dict[int, tuple[int, int]] = {}
        for r in located.get(a.key, ()):
            low, high = spans.get(r["partition"], (r["start"], r["end"]))
            spans[r["partition"]] = (min(low, r["start"]), max(high, r["end"]))
        found[a.key] = []
        for summary in (topic.summaries.values() if topic else ()):
            if summary.generation != config.generation:
                continue
            for (_, hole_from), (hole_to, _) in zip(summary.covered, summary.covered[1:]):
                near = spans.get(summary.partition)
                if spans and (near is None or hole_to < near[0] or hole_from > near[1]):
                    continue  # not next to the window's messages
                if any(lo < hole_to and hole_from < hi
                       for lo, hi in lost.get((a.topic, summary.partition), ())):
                    continue  # lost to retention, and accepted
                found[a.key].append((summary.partition, hole_from, hole_to))
    return found


def _fold_new_events(config: Config, storage: Storage, cp: Checkpoint) -> list[str]:
    """Per partition folder, the files after the last one counted (zero-padded first
    offsets: names sort as the files were written)."""
    bad = []
    for folder in storage.folders(layout.audit_events_dir(config.archive_root, config.audit.topic)):
        partition = folder.rsplit("/", 1)[-1]
        last = cp.events.get(partition)
        for url, _ in storage.list(folder, start_after=f"{folder}/{last}" if last else None):
            found = gather.read_events_file(storage, url)
            cp.fold_events(found.events)
            bad += found.bad
            cp.events[partition] = url.rsplit("/", 1)[-1]
    return bad


def _fold_new_runs(config: Config, storage: Storage, group: str, cp: Checkpoint,
                   recount: bool) -> tuple[int, bool]:
    """Fold in the catalog entries since the checkpoint's: rows added count in, rows
    removed (a rewind, a backfill) count out. A rebuilt catalog (or no checkpoint
    position) is recounted. Returns the runs folded in and whether counts already folded
    in changed."""
    new, corrected = 0, False
    if not recount and cp.catalog_seq is not None:
        for entry in store.entries_after(storage, config.archive_root, group, cp.catalog_seq):
            # a rebuilt catalog, or entries its cleanup deleted since this checkpoint
            if entry["kind"] == "rebuild" or entry["seq"] != cp.catalog_seq + 1:
                recount = True
                break
            gather.count_rows(entry.get("remove", ()), cp.archived, sign=-1)
            corrected = corrected or bool(entry.get("remove"))
            gather.count_rows(entry.get("add", ()), cp.archived)
            new += entry["kind"] in ("commit", "backfill")
            cp.catalog_seq = entry["seq"]
    if recount or cp.catalog_seq is None:
        cat = catalog.open_catalog(storage, config, group)
        cp.archived = dict(gather.count_rows(cat.rows()))
        cp.catalog_seq = cat.state.seq
        log.info("audit of %s: archived counts recounted from the catalog's current rows "
                 "(entry %d)", group, cat.state.seq)
        return new, True
    return new, corrected
