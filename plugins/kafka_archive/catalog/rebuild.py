"""The catalog from the run folders, which stay the truth: for a group without a catalog
(one archived before catalogs existed), a damaged one, or `kafka-archive catalog
--rebuild`. Reads every run: the one place whose cost follows history.

A group's content is the rows of its committed runs' manifests, taken in commit order:
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
from collections import defaultdict
from dataclasses import asdict, dataclass

from kafka_archive import layout
from kafka_archive.catalog.state import State, row_key, with_time_partitions
from kafka_archive.catalog import store
from kafka_archive.catalog.store import (Catalog, entry_url, folder, latest_url, snapshot_url,
                                         _load_json)
from kafka_archive.errors import TerminalError, VersionConflict
from kafka_archive.manifest import row_files
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
    return with_time_partitions({**row, "_run": run, "_generation": plan.get("generation", 1),
                                 **caught_up}, spec, root, group)


def run_summary(plan: dict, manifest: dict, committed: dict) -> dict:
    slices = manifest.get("slices", ())
    return {"run_id": committed.get("run_id") or plan.get("run_id", "?"),
            "planned_at": plan.get("created_at", "?"),
            "committed_at": committed.get("committed_at", "?"),
            "records": sum(r["records"] for r in slices),
            "bytes": sum(r.get("bytes") or 0 for r in slices),
            "files": sum(len(row_files(r)) for r in slices)}


def from_run_folders(storage: Storage, root: str, group: str, spec: layout.LayoutSpec
                     ) -> tuple[State, list[dict]]:
    """The state and current rows of a group, replayed from its run folders."""
    events, plans = [], {}
    for run, names in run_folders(storage, layout.runs_dir(root, group)).items():
        if "committed.json" in names:
            committed = _load_json(storage, f"{run}/committed.json")
            plans[run] = _load_json(storage, f"{run}/plan.json")
            events.append((committed["committed_at"], run, "commit", committed))
        if "backfill.json" in names:
            events.append((_load_json(storage, f"{run}/backfill.json")["at"], run, "backfill", None))
    by_id = {run.rsplit("/", 1)[-1]: run for run in plans}
    rows: dict[tuple, dict] = {}
    state = State()  # the fold of the same entries the commits and backfills append

    def replace_rows(gone: list[dict], added: list[dict]) -> list[dict]:
        """Take out `gone` and any current row a new one replaces by key; put `added`."""
        out = {row_key(r): r for r in gone}
        out.update((row_key(r), rows[row_key(r)]) for r in added if row_key(r) in rows)
        for key in out:
            rows.pop(key, None)
        for row in added:
            rows[row_key(row)] = row
        return list(out.values())

    for at, run, kind, committed in sorted(events, key=lambda e: e[:3]):
        if kind == "commit":
            plan = plans[run]
            moved = set(plan.get("superseded", ()))
            gone = [r for r in rows.values() if any(f["url"] in moved for f in row_files(r))]
            manifest = _load_json(storage, f"{run}/manifest.json")
            added = [catalog_row(r, run, plan, spec, root, group) for r in manifest["slices"]]
            state.apply({"kind": "commit", "seq": 0, "run_id": plan.get("run_id"), "at": at,
                         "run": run_summary(plan, manifest, committed),
                         "remove": replace_rows(gone, added), "add": added,
                         "lost": [{"topic": a["topic"], "partition": a["partition"],
                                   "lost_from": a["lost_from"], "lost_to": a["lost_to"]}
                                  for a in plan.get("anomalies", ())
                                  if a.get("action") == "skipped"]})
        else:
            backfill = _load_json(storage, f"{run}/backfill.json")
            added = []
            for r in backfill["slices"]:
                # the replaced run by its id: its folder's URL depends on how the root is spelled
                planned = by_id.get(r["replaces_run"].rsplit("/", 1)[-1])
                if planned in plans:
                    added.append(catalog_row(r, planned, plans[planned], spec, root, group))
            state.apply({"kind": "backfill", "seq": 0, "run_id": run.rsplit("/", 1)[-1],
                         "at": at, "run": {"run_id": run.rsplit("/", 1)[-1], "planned_at": at,
                                           "committed_at": at,
                                           "records": sum(r["records"] for r in added),
                                           "bytes": sum(r.get("bytes") or 0 for r in added),
                                           "files": sum(len(row_files(r)) for r in added)},
                         "remove": replace_rows([], added), "add": added})
    for loss in accepted(storage, root, group):
        state.apply({"kind": "loss", "seq": 0, "loss": asdict(loss)})
    for name, topic in state.topics.items():
        stored = storage.get_or_none(layout.finalized_state(root, group, name))
        if stored is not None:
            topic.finalized_through_ms = json.loads(stored)["through_ms"]
            topic.open_time = {p for p in topic.open_time if topic.finalized_through_ms
                               < layout.time_partition_range(p, spec)[1]}
    return state, [rows[k] for k in sorted(rows)]


ATTEMPTS = 3  # rebuilds that lost their entry to a commit before giving up


def rebuild(storage: Storage, root: str, group: str, spec: layout.LayoutSpec) -> Catalog:
    """Write the catalog anew from the run folders: its snapshot under a name of its own,
    then a `rebuild` entry naming it at the next seq (compare-and-swap), then the regular
    snapshot there. A crash before the entry leaves the old catalog as it was. A group
    that has committed nothing gets an empty catalog and nothing is written: its first
    commit writes entry 1.

    The log is listed before the run folders are scanned, and a commit marks its run
    committed before it adds its entry: so every entry below the claimed seq is a run the
    scan saw, and a commit that adds one meanwhile takes the seq first (this rebuild loses
    the race and scans again). A rebuild that lost to another rebuild takes that one's."""
    for attempt in range(1, ATTEMPTS + 1):
        started = time.monotonic()
        listed = [url for url, _ in storage.list(join(folder(root, group), "log"))]
        seq = int(listed[-1].rsplit("/", 1)[-1].split(".")[0]) + 1 if listed else 1
        state, rows = from_run_folders(storage, root, group, spec)
        if not state.topics and not state.accepted and not state.recent:
            return Catalog(storage, root, group, state)
        state.seq = seq
        catalog = Catalog(storage, root, group, state, tail=[{"add": rows}])
        tag = f"-rebuild-{secrets.token_hex(4)}"
        own = join(folder(root, group), "rebuilds", f"{seq:020d}{tag}.json")
        catalog.write_snapshot(url=own, tag=tag)
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
        log.warning("catalog of group %s rebuilt from its run folders at entry %d: %d rows in "
                    "%.1f s", group, seq, len(rows), time.monotonic() - started)
        return catalog
    raise TerminalError(f"catalog of group {group}: other writers added entries while it was "
                        f"rebuilt, {ATTEMPTS} times; run again")
