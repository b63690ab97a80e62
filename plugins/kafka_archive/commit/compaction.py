"""Compaction: a table group's small files of older runs rewritten into large ones.

Each run adds one file per Kafka partition (key_value) or per partition and event hour
(parsed) to a table: at a 15-minute schedule, 35,000 a year per partition. Compaction
merges the catalog rows of runs planned longer than `compact_after` ago, a Kafka
partition's contiguous small rows at a time (`choose`, pure), into one row whose files
are the rows' files concatenated in offset order, one per table and time partition, of
at most about `target_file_size` bytes. Every table gets one `replace` snapshot (its
summary names the compaction and the offset ranges), the catalog one `compaction` entry
that swaps the rows for the merged ones, which keep the rows they were made of as
`pieces`: a rewind into a compacted row treats its pieces as it treated the rows
(plan.rewinds), and the audit counts stay what they were.

Exactly once, against the runs: a compaction holds the group's compaction lease
(`_runs/<group>/_compacting.json`, created with If-None-Match) and then looks for a plan
in flight, giving way to it; a new plan marks itself in flight and then looks for the
lease, giving way to a compaction (plan.runs). Of two that start at once at least one
sees the other, so no plan is made from rows a compaction is replacing, and no
compaction replaces rows a plan in flight may move aside.

Any crash is finished by the next compaction (or the plan that finds the lease of a
dead one): the record of what it does (`compaction.json` in its folder under `_runs/`)
is written before any table changes, so its tables' snapshots (each idempotent: found by
the compaction id in the summary), its catalog entry and its done record (`compacted.json`,
which a catalog rebuild replays) are all made again from it. A compaction killed before
its record leaves only files no snapshot reads: the orphan sweep deletes them.

The rewrite is pyarrow's, in the task: the inputs are small by definition and already in
offset order, so a merge is reading them and writing one Parquet file, no shuffle or sort.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime

from kafka_archive import catalog, layout
from kafka_archive.archive.table_files import outputs, rewrite
from kafka_archive.catalog import lease as leases
from kafka_archive.catalog.pieces import merged
from kafka_archive.catalog.state import row_key, with_time_partitions
from kafka_archive.config import Config
from kafka_archive.errors import TerminalError, TransientError
from kafka_archive.manifest import row_files
from kafka_archive.plan import inflight
from kafka_archive.storage import Storage

log = logging.getLogger(__name__)

PREFIX = "compaction."          # a compaction's id: PREFIX + the Airflow run id
SMALL = 0.75                    # a row under this share of the target is compacted (Iceberg's
                                # rewrite_data_files default min-file-size-bytes)
RECORD, DONE = layout.COMPACTION_RECORD, layout.COMPACTION_DONE
COMPACTION = "kafka-archive.compaction"  # snapshot summary: how many rows became how many


class CompactionBusy(TransientError):
    """Another compaction of the group is under way."""


# --- which rows (pure) ---------------------------------------------------------------

def choose(rows: list[dict], older_than: str, target: int) -> list[list[dict]]:
    """The bins of one Kafka partition's rows (in offset order) to merge: runs of at least
    two contiguous rows, each planned at or before `older_than` (ISO-8601, seconds, as
    plans record it) and smaller than SMALL x target, packed in offset order up to target
    bytes. A row not yet that old, a large one or a gap (offsets lost to retention) ends a
    bin.

    Rows of the day `older_than` falls in merge with each other, rows of the days before
    with each other, never the two: today's file grows with each run, and the file of
    the days before is rewritten once a day, when yesterday joins it, not with every run.
    Bytes written per byte archived, 60 days of 15-minute runs of 30 KiB, compacted after
    each: 77 (merging every old row each run: 2,876; tests/unit/commit/test_compaction.py)."""
    bins, current, size, of_today = [], [], 0, False

    def close():
        if len(current) > 1:
            bins.append(list(current))
        current.clear()

    for row in rows:
        planned, nbytes = row.get("planned_at") or "", row.get("bytes") or 0
        if not (planned and planned <= older_than and nbytes < SMALL * target):
            close()
            size = 0
            continue
        today = planned[:10] >= older_than[:10]
        if current and (row["start"] != current[-1]["end"] or size + nbytes > target
                        or today != of_today):
            close()
            size = 0
        current.append(row)
        size, of_today = size + nbytes, today
    close()
    return bins


# --- the group's lease ---------------------------------------------------------------

def lease(storage: Storage, root: str, group: str, compaction_id: str, settle):
    """The group's compaction lease while the block runs, released only when it ends
    without an error: a compaction may have changed tables but not the catalog yet, and
    no plan may start until the next compaction has finished it (the lease of a failed
    process is then a dead one's). A dead one's lease is taken over after `settle(its
    id)` finished what it began."""
    def busy(held: dict) -> CompactionBusy:
        return CompactionBusy(f"group {group} is being compacted by {held.get('id')} (process "
                              f"{held['pid']} on {held['host']}); compaction waits for the "
                              "next run")

    return leases.claimed(storage, layout.compaction_lease(root, group), {"id": compaction_id},
                          busy, lambda held: held.get("id") and settle(held["id"]),
                          release_on_error=False)


# --- a compaction --------------------------------------------------------------------

def compaction_id(run_id: str) -> str:
    return PREFIX + run_id


def compact(config: Config, storage: Storage, tables, group: str, run_id: str,
            now: datetime) -> dict:
    """Compact the group's tables (tables: commit.iceberg.Tables); what it did."""
    spec = tables.spec(group)
    root, cid = config.archive_root, compaction_id(run_id)
    if storage.get_or_none(layout.run_file(root, group, cid, DONE)) is not None:
        return {"compaction": cid, "repeated": True}
    off = {"compaction": cid, "skipped": "compact_after is null"}
    if spec.compact_after_s is None and inflight.compacting(storage, root, group) is None:
        return off  # nothing a killed compaction left to finish: no lease to take
    settle = lambda other: finish(config, storage, tables, group, other)  # noqa: E731
    try:
        with lease(storage, root, group, cid, settle):
            if spec.compact_after_s is None:  # off: only what a killed one began is finished
                if storage.get_or_none(layout.run_file(root, group, cid, RECORD)) is not None:
                    return finish(config, storage, tables, group, cid)  # this one's own
                return off
            return _compact(config, storage, tables, group, cid, now)
    except CompactionBusy as busy:
        log.info("%s", busy)  # that one does the work
        return {"compaction": cid, "skipped": str(busy)}


def _compact(config: Config, storage: Storage, tables, group: str, cid: str,
             now: datetime) -> dict:
    root, spec = config.archive_root, tables.spec(group)
    if storage.get_or_none(layout.run_file(root, group, cid, RECORD)) is not None:
        return finish(config, storage, tables, group, cid)  # this one, killed before
    if run := inflight.holding(storage, root, group):
        log.info("group %s: run %s is in flight; compaction waits for the next run", group, run)
        return {"compaction": cid, "skipped": f"run {run} is in flight"}
    cat = catalog.open_catalog(storage, config, group, may_rebuild=True)
    older = datetime.fromtimestamp(now.timestamp() - spec.compact_after_s,
                                   now.tzinfo).isoformat(timespec="seconds")
    folder = catalog.run_folder(root, group, cid)
    units = []
    for topic in sorted(cat.state.with_rows()):
        for key, summary in sorted(cat.state.topics[topic].summaries.items()):
            if summary.rows < 2:  # nothing to merge: its rows are not even read
                continue
            partition, generation = map(int, key.split(":"))
            rows = [_with_planned_at(cat, r) for r in cat.rows(topic, partition, generation)]
            for chosen in choose(rows, older, spec.target_file_size):
                if not units:  # before its first file (the orphan sweep spares the folder);
                    # a compaction that merges nothing leaves no folder
                    storage.put_bytes(layout.run_file(root, group, cid, layout.COMPACTION_STARTED),
                                      json.dumps({"created_at": now.isoformat(
                                          timespec="seconds")}).encode())
                files = [rewrite(storage, out)
                         for out in outputs(config, group, cid, chosen)]
                units.append({"replaced": chosen,
                              "merged": with_time_partitions(
                                  merged(chosen, files, folder), config.group(group).layout,
                                  root, group)})
    if not units:
        return {"compaction": cid, "rows": 0}
    storage.put_bytes(layout.run_file(root, group, cid, RECORD), json.dumps(
        {"id": cid, "created_at": now.isoformat(timespec="seconds"), "units": units},
        indent=1).encode())
    return finish(config, storage, tables, group, cid)


def _with_planned_at(cat, row: dict) -> dict:
    """A row with `planned_at`, its plan's time (rows from before it was recorded: read
    from the run's plan)."""
    if row.get("planned_at"):
        return row
    data = cat.storage.get_or_none(f"{row['_run']}/plan.json")
    return {**row, "planned_at": json.loads(data)["created_at"] if data else ""}


def finish(config: Config, storage: Storage, tables, group: str, cid: str) -> dict:
    """Make the recorded compaction's table snapshots, catalog entry and done record,
    whichever are missing (idempotent). A record none of whose rows is current any more
    was overtaken (nothing of it reached a table): it is dropped."""
    from kafka_archive.commit import iceberg

    root = config.archive_root
    stored = storage.get_or_none(layout.run_file(root, group, cid, RECORD))
    if stored is None or storage.get_or_none(layout.run_file(root, group, cid, DONE)):
        return {"compaction": cid, "repeated": True}
    record = json.loads(stored)
    units = record["units"]
    by_table: dict[tuple[str, bool], tuple[list[str], list[str], list[str]]] = {}
    for unit in units:
        old, new = unit["replaced"], unit["merged"]
        for dead_letters in tables.kinds(group):
            inside = tables.location(group, new["topic"], dead_letters) + "/"
            remove, add, ranges = by_table.setdefault((new["topic"], dead_letters), ([], [], []))
            remove += [f["url"] for r in old for f in row_files(r) if f["url"].startswith(inside)]
            add += [f["url"] for f in row_files(new) if f["url"].startswith(inside)]
            ranges.append(f"{new['partition']}: [{new['start']}, {new['end']})")
    work = [(tables.table(group, topic, dead_letters), remove, add, ranges)
            for (topic, dead_letters), (remove, add, ranges) in sorted(by_table.items()) if remove]
    if not any(iceberg.run_snapshot(t.refresh(), cid) for t, *_ in work) and (stale := [
            path for t, remove, *_ in work
            for path in sorted(set(remove) - set(iceberg.current_files(t, remove)))]):
        # nothing of it reached a table, and its rows changed since it chose them (a plan
        # that went ahead after its lease expired): dropped, its files are orphans
        log.warning("compaction %s of group %s dropped: %s is no longer a current file",
                    cid, group, stale[0])
        storage.put_bytes(layout.run_file(root, group, cid, DONE), json.dumps(
            {"id": cid, "at": record["created_at"], "dropped": f"{stale[0]} changed"}).encode())
        return {"compaction": cid, "dropped": stale[0]}
    for table, remove, add, ranges in work:
        iceberg.replace_files(table, cid, remove, add, ", ".join(ranges),
                              f"{len(remove)} files -> {len(add)}")

    def entry(cat) -> dict | None:
        current = {}
        for unit in units:
            new = unit["merged"]
            current.update((row_key(r), r) for r in cat.rows(new["topic"], new["partition"],
                                                            new["_generation"]))
        done = all(current.get(row_key(u["merged"]), {}).get("_run", "").endswith("/" + layout.run_folder_name(cid))
                   for u in units)
        if done:  # a finish killed after its entry: no commit came since (the lease)
            seen.append(cat.state.seq)
            return None
        if gone := [r for u in units for r in u["replaced"]
                    if current.get(row_key(r), {}).get("_run") != r["_run"]]:
            raise TerminalError(f"compaction {cid} of group {group}: {gone[0]['topic']} partition "
                                f"{gone[0]['partition']} [{gone[0]['start']}, {gone[0]['end']}) "
                                "changed in the catalog after the compaction's tables did")
        return {"kind": "compaction", "run_id": cid, "at": record["created_at"],
                "remove": [r for u in units for r in u["replaced"]],
                "add": [u["merged"] for u in units]}

    seen: list[int] = []
    seq = catalog.append(storage, config, group, entry).appended
    seq = seq if seq is not None else seen[-1]
    storage.put_bytes(layout.run_file(root, group, cid, DONE), json.dumps(
        {"id": cid, "at": record["created_at"], "entry": seq}).encode())
    files = sum(len(row_files(r)) for u in units for r in u["replaced"])
    made = sum(len(row_files(u["merged"])) for u in units)
    log.info("compaction %s of group %s: %d rows in %d files -> %d rows in %d files", cid,
             group, sum(len(u["replaced"]) for u in units), files, len(units), made)
    return {"compaction": cid, "rows": sum(len(u["replaced"]) for u in units),
            "files_before": files, "files_after": made, "entry": seq}

