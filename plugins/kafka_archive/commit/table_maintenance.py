"""A table group's tables kept small: snapshots past the group's keep_snapshots expire
with the files only they read, and files of runs that never committed (orphans) go.
Run by the group's DAG after each commit (airflow.tasks.expire_snapshots)."""

from __future__ import annotations

import json
import logging
from datetime import datetime

from kafka_archive import catalog, layout
from kafka_archive.commit.compaction import PREFIX as COMPACTION_PREFIX
from kafka_archive.commit.iceberg import RUN_ID, WITHDRAWN, name, set_properties
from kafka_archive.config import Config
from kafka_archive.plan import inflight, runs
from kafka_archive.storage import Storage

log = logging.getLogger(__name__)

ORPHANS_SWEPT = "kafka-archive.orphans-swept-at"  # table property: ms of the last sweep
SWEEP_EVERY_MS = 86_400_000


def settled(table, storage: Storage, config: Config, group: str, topic: str) -> bool:
    """Whether the table's current snapshot is of a run whose commit reached the catalog
    (or a withdrawal, or no run's). If not, a commit is under way or its run was given
    up, and the table changes again soon (the commit finishing, or the next plan
    withdrawing it): expiring now would delete the files that snapshot took out while the
    catalog still lists them, and the orphan sweep could take what it put back. The
    group's maintenance waits for it (one small read per table). A compaction's snapshot
    is settled once the compaction's done record says its catalog entry went in. A run
    whose record says nothing of the catalog is asked of the catalog itself (topic: the
    table's): a commit killed before the catalog, whose rows a rebuild from the run
    folders put there, and whose mark a person deleted, is never finished by anyone."""
    table.refresh()
    current = table.current_snapshot()
    run_id = current.summary.get(RUN_ID) if current and current.summary else None
    if run_id is None or run_id.endswith(WITHDRAWN):
        return True
    root = config.archive_root
    if run_id.startswith(COMPACTION_PREFIX):  # a compaction writes no committed.json
        return storage.get_or_none(layout.run_file(root, group, run_id,
                                                   layout.COMPACTION_DONE)) is not None
    if runs.is_final(runs.stored_outcome(storage, root, group, run_id)):
        return True
    try:  # a reader: the next plan rebuilds a damaged catalog, this waits for it
        return runs.in_catalog(catalog.open_catalog(storage, config, group), run_id, topic)
    except catalog.CatalogUnreadable:
        return False


def expire(table, keep_ms: int, now_ms: int) -> dict[str, int]:
    """Snapshots older than keep_ms go (never the current one), and with them the files
    only they read: the ones a rewind (or a withdrawn run) took out, kept until then for
    time travel. Files go first, snapshots after, so a crash in between leaves snapshots
    past their time reading missing files (expired by the next call, for which a file
    already gone counts as deleted), never a file no snapshot names: an orphan nobody
    would ever delete. Reads only the manifests of the
    snapshots that removed files, so a call costs little when no rewind happened."""
    table.refresh()
    current = table.current_snapshot()
    if current is None:
        return {"snapshots": 0, "files": 0}
    old = {s.snapshot_id for s in table.metadata.snapshots
           if s.timestamp_ms < now_ms - keep_ms and s.snapshot_id != current.snapshot_id}
    if not old:
        return {"snapshots": 0, "files": 0}
    gone = [path for s in table.metadata.snapshots
            if s.parent_snapshot_id in old and s.summary is not None
            and s.summary.operation.value in ("overwrite", "delete", "replace")
            for path in removed_by(table, s)]
    for path in gone:
        try:
            table.io.delete(path)
        except FileNotFoundError:  # an expiry killed after deleting it: deleted is deleted
            log.info("table %s: %s was deleted already", name(table), path)
    table.maintenance.expire_snapshots().by_ids(sorted(old)).commit()
    log.info("table %s: %d snapshots expired, %d replaced files deleted", name(table),
             len(old), len(gone))
    return {"snapshots": len(old), "files": len(gone)}


def remove_orphans(table, storage: Storage, root: str, group: str, keep_ms: int,
                   now_ms: int) -> int:
    """Delete the files under the table's data/ that no snapshot of it reads (a deleted
    entry of a kept snapshot still counts: time travel reads it) and that a run planned
    longer than keep_ms ago wrote: a plan given up before its commit. Never the plan in
    flight's folder (written, not committed yet), nor the compaction's that holds the
    group's compaction lease (kept until it or the next compaction finishes its record's
    snapshots), nor a folder whose plan cannot be read (its age unknown), nor the run
    last marked in flight whose mark a person deleted before a plan gave it up (its commit
    may be on its way). Lists the whole folder and reads every kept snapshot's manifests,
    so it runs at most once per SWEEP_EVERY_MS (the table keeps when it last did); how
    many files went."""
    table.refresh()
    if now_ms - int(table.properties.get(ORPHANS_SWEPT, 0)) < SWEEP_EVERY_MS:
        return 0
    read, manifests = set(), set()
    for snapshot in table.metadata.snapshots:
        for manifest in snapshot.manifests(table.io):
            if manifest.manifest_path not in manifests:
                manifests.add(manifest.manifest_path)
                read |= {entry.data_file.file_path for entry in
                         manifest.fetch_manifest_entry(table.io, discard_deleted=False)}
    compacting = inflight.compacting(storage, root, group)
    spared = {layout.run_folder_name(run) for run in (
        inflight.holding(storage, root, group), _not_given_up(storage, root, group),
        compacting and compacting.get("id")) if run}
    data = f"{table.location().rstrip('/')}/{layout.TABLE_DATA}/"
    planned: dict[str, int | None] = {}
    gone = 0
    for url, _ in storage.list(data):
        folder = url[len(data):].split("/", 1)[0]
        if url in read or folder in spared:
            continue
        if folder not in planned:
            planned[folder] = _started_ms(storage, root, group, folder)
        if planned[folder] is not None and planned[folder] < now_ms - keep_ms:
            storage.delete(url)
            gone += 1
    set_properties(table, {ORPHANS_SWEPT: str(now_ms)})
    if gone:
        log.warning("table %s: %d files of runs that never committed deleted", name(table), gone)
    return gone


def _not_given_up(storage: Storage, root: str, group: str) -> str | None:
    """The run last marked in flight, unless a plan has given it up since: a person who
    deletes the mark does not stop a commit already on its way (its files must stay until
    the next plan gives the run up)."""
    note = inflight.last(storage, root, group)
    return None if note is None or note.get("given_up") else note["run_id"]


def _started_ms(storage: Storage, root: str, group: str, folder: str) -> int | None:
    """When the run (its plan) or the compaction (commit.compaction) whose folder it is
    began; None when neither says."""
    for name in ("plan.json", layout.COMPACTION_STARTED):
        found = storage.get_or_none(layout.run_file(root, group, folder, name))
        if found is not None:
            return int(datetime.fromisoformat(json.loads(found)["created_at"]).timestamp() * 1000)
    return None


def removed_by(table, snapshot) -> list[str]:
    """The data files a snapshot took out of the table."""
    from pyiceberg.manifest import ManifestEntryStatus

    return [entry.data_file.file_path for manifest in snapshot.manifests(table.io)
            if manifest.added_snapshot_id == snapshot.snapshot_id
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False)
            if entry.status == ManifestEntryStatus.DELETED
            and entry.snapshot_id == snapshot.snapshot_id]
