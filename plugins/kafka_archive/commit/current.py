"""Which manifest rows of a group are current: the one answer that verify, the audit,
backfill and status all use.

A group's content is the rows of its committed runs' manifests, taken in commit order:
a run whose plan moved files aside (a rewind, the plan's `superseded` list) takes out
every earlier row holding one of them, then adds its own rows; a backfill
(`backfill.json`) replaces the rows of the slices it rebuilt. A file name can come back
(re-archiving a rewound slice writes the name its superseded predecessor had), so a row
is taken out by what came after it, never by its URL alone. Runs not committed (a plan
still in flight) contribute nothing. Ranges lost to retention and accepted (commit.losses,
and skipped anomalies of committed plans from before those records) are in `lost`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass

from kafka_archive import layout
from kafka_archive.commit import losses
from kafka_archive.commit.losses import AcceptedLoss
from kafka_archive.errors import TerminalError
from kafka_archive.storage import Storage

Range = tuple[int, int]


@dataclass(frozen=True)
class Contents:
    """The current rows of a group, sorted by (topic, partition, generation, start). Each
    row is its manifest (or backfill) row plus `_run`, the folder of the run whose plan
    made the slice, and `_generation`, that plan's generation."""
    rows: list[dict]
    plans: dict[str, dict]        # run folder -> plan.json, for every committed run
    lost: dict[tuple[str, int], list[Range]]  # (topic, partition) -> ranges accepted as lost
    accepted: tuple[AcceptedLoss, ...] = ()   # the records behind them: who, when, why

    def of_topic(self, topic: str) -> list[dict]:
        return [row for row in self.rows if row["topic"] == topic]

    def format_of(self, row: dict) -> dict:
        """The format a row's files were written in: its plan's, for the row's topic
        (planning.Plan.format_for on the plan as stored)."""
        plan = self.plans.get(row["_run"], {})
        return plan.get("topic_formats", {}).get(row["topic"], plan.get("format", {}))

    def gaps(self) -> dict[tuple[str, int], list[Range]]:
        """(topic, partition) -> offsets Kafka itself lacks, as the rows recorded them."""
        found: dict[tuple[str, int], list[Range]] = defaultdict(list)
        for row in self.rows:
            found[(row["topic"], row["partition"])] += [(a, b) for a, b in row.get("gaps", ())]
        return found


def current(storage: Storage, archive_root: str, group: str) -> Contents:
    events, plans = [], {}
    for folder, names in run_folders(storage, layout.runs_dir(archive_root, group)).items():
        if "committed.json" in names:
            committed = _load(storage, f"{folder}/committed.json")
            plans[folder] = _load(storage, f"{folder}/plan.json")
            events.append((committed["committed_at"], folder, "commit"))
        if "backfill.json" in names:
            events.append((_load(storage, f"{folder}/backfill.json")["at"], folder, "backfill"))
    folders = {folder.rsplit("/", 1)[-1]: folder for folder in plans}
    rows: dict[tuple, dict] = {}
    lost: dict[tuple[str, int], list[Range]] = defaultdict(list)
    for _, folder, kind in sorted(events):
        if kind == "commit":
            plan = plans[folder]
            moved = set(plan.get("superseded", ()))
            if moved:
                rows = {key: row for key, row in rows.items()
                        if not any(f["url"] in moved for f in row_files(row))}
            for anomaly in plan.get("anomalies", ()):
                if anomaly.get("action") == "skipped":
                    lost[(anomaly["topic"], anomaly["partition"])].append(
                        (anomaly["lost_from"], anomaly["lost_to"]))
            for row in _load(storage, f"{folder}/manifest.json")["slices"]:
                _put(rows, row, folder, plan)
        else:
            for row in _load(storage, f"{folder}/backfill.json")["slices"]:
                # the replaced run by its id: its folder's URL depends on how the root is spelled
                planned = folders.get(row["replaces_run"].rsplit("/", 1)[-1])
                if planned in plans:
                    _put(rows, row, planned, plans[planned])
    accepted = losses.accepted(storage, archive_root, group)
    for loss in accepted:  # skipped by a plan or accepted by a person: one list either way
        if (loss.lost_from, loss.lost_to) not in lost[(loss.topic, loss.partition)]:
            lost[(loss.topic, loss.partition)].append((loss.lost_from, loss.lost_to))
    return Contents([rows[key] for key in sorted(rows)], plans, dict(lost), tuple(accepted))


def row_files(row: dict) -> list[dict]:
    """The files of a manifest row; rows from before multi-file rows name one `url`."""
    files = row.get("files")
    if files is not None:
        return json.loads(files) if isinstance(files, str) else files
    if row.get("url"):
        return [{"url": row["url"], "records": row["records"], "bytes": row["bytes"],
                 "sha256": row.get("sha256")}]
    return []


def _put(rows: dict, row: dict, run: str, plan: dict) -> None:
    generation = plan.get("generation", 1)
    rows[(row["topic"], row["partition"], generation, row["start"])] = {
        **row, "_run": run, "_generation": generation}


def run_folders(storage: Storage, runs_url: str) -> dict[str, set[str]]:
    """Run folder URL -> names of the files in it."""
    folders: dict[str, set[str]] = defaultdict(set)
    for url, _ in storage.list(runs_url):
        folder, _, name = url.rpartition("/")
        folders[folder].add(name)
    return folders


def _load(storage: Storage, url: str) -> dict:
    try:
        return json.loads(storage.get_bytes(url))
    except ValueError as exc:
        raise TerminalError(f"{url}: not readable JSON: {exc}") from None
