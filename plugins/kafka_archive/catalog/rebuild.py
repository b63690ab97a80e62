"""The catalog from the run folders, which stay the truth: for a group without a catalog
(one archived before catalogs existed), a damaged one, or `kafka-archive catalog
--rebuild`. Reads every run: the one place whose cost follows history.

A group's content is the rows of its committed runs' manifests, taken in the log's order
(log_order: each commit and backfill records its entry's seq):
a run whose plan moved files aside (a rewind, the plan's `superseded` list) takes out
every earlier row holding one of them, then adds its own rows; a backfill
(`backfill.json`) replaces the rows of the slices it rebuilt. A file name can come back
(re-archiving a rewound slice writes the name its superseded predecessor had), so a row
is taken out by what came after it, never by its URL alone. Runs not committed (a plan
still in flight) contribute nothing. Ranges lost to retention and accepted are the
records under `_runs/<group>/_accepted_loss/`, and skipped anomalies of committed plans.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections import defaultdict, deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Iterator

from kafka_archive import layout
from kafka_archive.catalog.spill import Spill
from kafka_archive.catalog.state import State, row_key, with_time_partitions
from kafka_archive.catalog import store
from kafka_archive.catalog.store import (Catalog, StoredRow, entry_url, folder, latest_url,
                                         snapshot_url, _load_json)
from kafka_archive.catalog.lease import one_at_a_time
from kafka_archive.errors import TerminalError, VersionConflict
from kafka_archive.manifest import added_rows, not_archived, row_files
from kafka_archive.storage import Storage, join

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AcceptedLoss:
    group: str
    topic: str
    partition: int
    lost_from: int
    lost_to: int  # exclusive: Kafka's earliest retained offset when accepted
    by: str
    at: str       # ISO-8601 UTC
    reason: str

    def describe(self) -> str:
        return (f"{self.topic} partition {self.partition}: offsets [{self.lost_from}, "
                f"{self.lost_to}) ({self.lost_to - self.lost_from} messages) lost to retention, "
                f"accepted by {self.by} at {self.at}: {self.reason}")


def accepted(storage: Storage, archive_root: str, group: str) -> list[AcceptedLoss]:
    """Every accepted-loss record of a group, in (topic, partition, offset) order."""
    found = []
    for url, _ in storage.list(join(layout.runs_dir(archive_root, group), "_accepted_loss")):
        if url.endswith(".json"):
            try:
                found.append(AcceptedLoss(**json.loads(storage.get_bytes(url))))
            except (ValueError, TypeError) as exc:
                raise TerminalError(f"{url}: not a readable accepted-loss record: {exc}") from None
    return sorted(found, key=lambda a: (a.topic, a.partition, a.lost_from))


def run_folders(storage: Storage, runs_url: str) -> dict[str, set[str]]:
    """Run folder URL -> names of the files in it."""
    folders: dict[str, set[str]] = defaultdict(set)
    for url, _ in storage.list(runs_url):
        run_folder, _, name = url.rpartition("/")
        folders[run_folder].add(name)
    return folders


def committed(names: set[str]) -> bool:
    """Whether a run folder's files say its run committed: a committed.json, and no
    given_up.json (a commit cut short before the catalog, then given up by the next plan,
    which undid its files: never part of the archive)."""
    return "committed.json" in names and "given_up.json" not in names


def committed_runs(storage: Storage, root: str, group: str) -> list[str]:
    """The folders of the group's committed runs."""
    return [run for run, names in run_folders(storage, layout.runs_dir(root, group)).items()
            if committed(names)]


def run_folder(root: str, group: str, run_id: str) -> str:
    return layout.run_file(root, group, run_id, "x").rsplit("/", 1)[0]


def catalog_row(row: dict, run: str, plan: dict, spec: layout.LayoutSpec, root: str,
                group: str) -> dict:
    """A manifest (or backfill) row as the catalog keeps it: with `_run`, the folder of
    the run whose plan made the slice, `_generation`, each file's time partition, and
    `caught_up_at`, the plan's time, when the slice reached the end Kafka had then."""
    latest = plan.get("latest", {}).get(row["topic"], {}).get(str(row["partition"]))
    caught_up = ({"caught_up_at": plan["created_at"]}
                 if latest is not None and row["end"] >= latest and plan.get("created_at") else {})
    planned = {"planned_at": plan["created_at"]} if plan.get("created_at") else {}
    return with_time_partitions({**row, "_run": run, "_generation": plan.get("generation", 1),
                                 **caught_up, **planned}, spec, root, group)


def run_summary(plan: dict, manifest: dict, committed: dict) -> dict:
    slices = manifest.get("slices", ())
    return {"run_id": committed.get("run_id") or plan.get("run_id", "?"),
            "planned_at": plan.get("created_at", "?"),
            "committed_at": committed.get("committed_at", "?"),
            "records": sum(r["records"] for r in slices),
            "bytes": sum(r.get("bytes") or 0 for r in slices),
            "files": sum(len(row_files(r)) for r in slices)}


def plan_marks(plan: dict) -> dict:
    """What a committed plan records beside its rows: the retention gaps it skipped
    (`lost`), and where each of its slices began (`spots`: the token line it started
    from, or where a new partition's archive begins). Below a spot the archive accounts
    for every offset (in rows, lost, or before the archive began) even when the slice
    archived nothing (start_from: latest, an emptied partition, a head that retention
    deleted before the job read it): a person may delete the line later, and what Kafka
    deleted above the spot is then a loss, not a silent skip."""
    return {"lost": [{"topic": a["topic"], "partition": a["partition"],
                      "lost_from": a["lost_from"], "lost_to": a["lost_to"]}
                     for a in plan.get("anomalies", ()) if a.get("action") == "skipped"],
            "spots": [{"topic": s["topic"], "partition": s["partition"],
                       "generation": plan.get("generation", 0), "offset": s["start"]}
                      for s in plan.get("slices", ())]}


FETCHERS = 16  # GETs of run documents in flight at once (S3 answers each in ~10-50 ms)


def log_order(event: tuple) -> tuple:
    """Where a run's commit or a backfill stood in the catalog's log: its entry's seq,
    recorded after the entry was added; else, for a commit cut before that, one past the
    entry it saw before its tokens moved (its own came later: after an exact entry of
    that seq); else (folders written before these were recorded) before all of those, by
    the wall clock of the host that wrote it."""
    at, run, kind, doc = event
    if doc.get("entry") is not None:
        return doc["entry"], 0, at, run
    if doc.get("after_entry") is not None:
        return doc["after_entry"] + 1, 1, at, run
    return 0, 0, at, run


def from_run_folders(storage: Storage, root: str, group: str, spec: layout.LayoutSpec
                     ) -> tuple[State, Iterator[StoredRow]]:
    """The state and current rows of a group, replayed from its run folders in commit
    order. Each run's documents are fetched FETCHERS at a time, a bounded window ahead
    of the replay. What a run changes is spilled per Kafka partition to local disk
    (Spill), then each partition is folded on its own: memory follows one partition's
    rows and a window of runs, never the group's history (a year of 15-minute runs of
    100 partitions is 3.5 million rows). The rows come back in key order."""
    folders = run_folders(storage, layout.runs_dir(root, group))
    commits = [run for run, names in folders.items() if committed(names)]
    backfill_runs = [run for run, names in folders.items() if "backfill.json" in names]
    compactions = [run for run, names in folders.items()
                   if layout.COMPACTION_DONE in names]  # some dropped
    by_id = {run.rsplit("/", 1)[-1]: run for run in commits}
    state = State()  # the fold of the same entries the commits and backfills append
    spill = Spill(root, spec)
    plans: dict[str, dict] = {}  # of replaced runs, for backfills: read when first needed

    def plan_of(run: str) -> dict:
        if run not in plans:
            plans[run] = _load_json(storage, f"{run}/plan.json")
        return plans[run]

    with ThreadPoolExecutor(FETCHERS) as pool:
        load = lambda name: lambda run: _load_json(storage, f"{run}/{name}")  # noqa: E731
        events = sorted(
            [(c["committed_at"], run, "commit", c)
             for run, c in zip(commits, pool.map(load("committed.json"), commits))]
            + [(b["at"], run, "backfill", b)
               for run, b in zip(backfill_runs, pool.map(load("backfill.json"), backfill_runs))]
            + [(c["at"], run, "compaction", c)
               for run, c in zip(compactions, pool.map(load(layout.COMPACTION_DONE),
                                                        compactions))],
            key=log_order)

        def documents(event) -> tuple[dict, dict] | None:
            _, run, kind, _ = event
            if kind != "commit":
                return None
            return (_load_json(storage, f"{run}/plan.json"),
                    _load_json(storage, f"{run}/manifest.json"))

        for (at, run, kind, doc), fetched in zip(events, _ahead(pool, documents, events)):
            if kind == "commit":
                plan, manifest = fetched
                added = [catalog_row(r, run, plan, spec, root, group)
                         for r in added_rows(manifest)]
                # a slice the job could not archive replaces nothing: its old rows stay
                spill.event(plan.get("superseded", ()), not_archived(manifest), added)
                state.apply({"kind": "commit", "seq": 0, "run_id": plan.get("run_id"), "at": at,
                             "run": run_summary(plan, manifest, doc), **plan_marks(plan)})
                continue
            if kind == "compaction":  # commit.compaction: rows swapped for merged ones
                if doc.get("dropped"):
                    continue
                units = _load_json(storage, f"{run}/{layout.COMPACTION_RECORD}")["units"]
                spill.event([f["url"] for u in units for r in u["replaced"] for f in row_files(r)],
                            set(), [{**u["merged"], "_run": run} for u in units])
                state.apply({"kind": "compaction", "seq": 0})
                continue
            added = []
            for r in doc["slices"]:
                # the replaced run by its id: its folder's URL depends on how the root is spelled
                planned = by_id.get(r["replaces_run"].rsplit("/", 1)[-1])
                if planned is not None:
                    added.append(catalog_row(r, planned, plan_of(planned), spec, root, group))
            spill.event((), set(), added)
            state.apply({"kind": "backfill", "seq": 0, "run_id": run.rsplit("/", 1)[-1],
                         "at": at, "run": {"run_id": run.rsplit("/", 1)[-1], "planned_at": at,
                                           "committed_at": at,
                                           "records": sum(r["records"] for r in added),
                                           "bytes": sum(r.get("bytes") or 0 for r in added),
                                           "files": sum(len(row_files(r)) for r in added)}})
    for loss in accepted(storage, root, group):
        state.apply({"kind": "loss", "seq": 0, "loss": asdict(loss)})
    for run, names in folders.items():  # where given-up plans began (plan.runs): in any order
        if "given_up.json" in names:
            given_up = _load_json(storage, f"{run}/given_up.json")
            state.apply({"kind": "give_up", "seq": 0, "spots": given_up.get("spots", ())})
    rows = spill.fold(state)
    for name, topic in state.topics.items():
        stored = storage.get_or_none(layout.finalized_state(root, group, name))
        if stored is not None:
            topic.finalized_through_ms = json.loads(stored)["through_ms"]
            topic.open_time = {p for p in topic.open_time if topic.finalized_through_ms
                               < layout.time_partition_range(p, spec)[1]}
    return state, rows


def from_log(storage: Storage, root: str, group: str
             ) -> tuple[State, Iterator[StoredRow]] | None:
    """The state and current rows replayed from the catalog's own log, in its order (the
    compare-and-swap's, not clocks'), when the log is whole from entry 1 and every entry
    reads; None when it is not, or holds a rebuild entry (then what came before that is
    in a snapshot, not the log): the run folders decide then."""
    listed = [url for url, _ in storage.list(join(folder(root, group), "log"))]
    if not listed or any(store.seq_of(url) != n for n, url in enumerate(listed, start=1)):
        return None
    committed = {run.rsplit("/", 1)[-1] for run in committed_runs(storage, root, group)}
    rows: dict[tuple, dict] = {}
    state, logged = State(), set()
    with ThreadPoolExecutor(FETCHERS) as pool:
        for entry in _ahead(pool, lambda url: _readable(storage, url), listed):
            if entry is None or entry.get("kind") == "rebuild":
                return None
            if entry.get("kind") == "commit":
                logged.add(layout.run_folder_name(entry["run_id"]))
            for row in entry.get("remove", ()):
                rows.pop(row_key(row), None)
            rows.update((row_key(row), row) for row in entry.get("add", ()))
            state.apply(entry)
    if committed - logged:  # a run the log lacks (a commit under way): the folders decide
        return None
    return state, (StoredRow.of(rows[k]) for k in sorted(rows))


def _readable(storage: Storage, url: str) -> dict | None:
    try:
        return _load_json(storage, url)
    except store.CatalogUnreadable:
        return None


def _ahead(pool: ThreadPoolExecutor, fetch, items: list, window: int = 2 * FETCHERS):
    """fetch(item) for each item, in order, at most `window` fetched ahead."""
    pending = deque()
    for item in items:
        pending.append(pool.submit(fetch, item))
        if len(pending) >= window:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()


ATTEMPTS = 3  # rebuilds that lost their entry to a commit before giving up
def rebuild(storage: Storage, root: str, group: str, spec: layout.LayoutSpec,
            from_runs: bool = False) -> Catalog:
    """Write the catalog anew, one rebuild at a time (one_at_a_time), from its own log
    when that is whole (from_log: a damaged snapshot or chunk), else (or with from_runs)
    from the run folders, the truth: its snapshot under a name of its own,
    then a `rebuild` entry naming it at the next seq (compare-and-swap), then the regular
    snapshot there. A crash before the entry leaves the old catalog as it was. A group
    that has committed nothing gets an empty catalog and nothing is written: its first
    commit writes entry 1.

    The log is listed before the run folders are scanned, and a commit marks its run
    committed before it adds its entry: so every entry below the claimed seq is a run the
    scan saw, and a commit that adds one meanwhile takes the seq first (this rebuild loses
    the race and scans again). A rebuild that lost to another rebuild takes that one's."""
    with one_at_a_time(storage, root, group):
        return _rebuild(storage, root, group, spec, from_runs)


def _rebuild(storage: Storage, root: str, group: str, spec: layout.LayoutSpec,
             from_runs: bool) -> Catalog:
    for attempt in range(1, ATTEMPTS + 1):
        started = time.monotonic()
        listed = [url for url, _ in storage.list(join(folder(root, group), "log"))]
        seq = int(listed[-1].rsplit("/", 1)[-1].split(".")[0]) + 1 if listed else 1
        replayed = None if from_runs else from_log(storage, root, group)
        source = "its log" if replayed else "its run folders"
        state, rows = replayed or from_run_folders(storage, root, group, spec)
        if not state.topics and not state.accepted and not state.recent:
            return Catalog(storage, root, group, state)
        state.seq = seq
        catalog = Catalog(storage, root, group, state)
        tag = f"-rebuild-{secrets.token_hex(4)}"
        own = join(folder(root, group), "rebuilds", f"{seq:020d}{tag}.json")
        catalog.write_whole(rows, url=own, tag=tag)
        try:
            storage.put_if(entry_url(root, group, seq), json.dumps(
                {"kind": "rebuild", "seq": seq, "snapshot": own}).encode(), None)
        except VersionConflict:
            winner = _load_json(storage, entry_url(root, group, seq))
            if winner.get("kind") == "rebuild":  # one rebuild at a time: take the other's
                log.warning("catalog of group %s was rebuilt by another reader at entry %d",
                            group, seq)
                return store.read(storage, root, group)
            log.warning("catalog of group %s: a %s took entry %d while it was being rebuilt; "
                        "again (%d)", group, winner.get("kind"), seq, attempt)
            continue
        storage.put_bytes(snapshot_url(root, group, seq), storage.get_bytes(own))
        storage.put_bytes(latest_url(root, group), json.dumps({"seq": seq}).encode())
        log.warning("catalog of group %s rebuilt from %s at entry %d: %d rows in %.1f s",
                    group, source, seq, sum(c.rows for cs in catalog.chunks.values() for c in cs),
                    time.monotonic() - started)
        return catalog
    raise TerminalError(f"catalog of group {group}: other writers added entries while it was "
                        f"rebuilt, {ATTEMPTS} times; run again")
