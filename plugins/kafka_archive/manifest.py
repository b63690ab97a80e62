"""The manifest: what an archive run wrote, one row per slice. The archive job writes it
beside its plan (`_runs/<group>/<run id>/manifest.json`); commit checks it against the plan
and adds its rows to the group's catalog, where every reader finds them (a rebuilt
catalog reads them back from here). Its shape, where it lives and its JSON are this
module's alone.
"""

from __future__ import annotations

import json
from typing import TypedDict

from kafka_archive import layout
from kafka_archive.storage import Storage


class FileEntry(TypedDict, total=False):
    url: str
    records: int
    bytes: int
    crc32c: str      # S3's CRC32C of the file as uploaded (base64, as HeadObject shows it)
    sha256: str      # instead, in rows written before the CRC32C


class SliceRow(TypedDict, total=False):
    """One slice of the plan as the job archived it. Offsets [start, end) minus `gaps`
    are in `files`; `url` and `crc32c` repeat a single file's (None for several, as the
    event-time layout writes); rows from before multi-file rows have `url` only."""
    topic: str
    partition: int
    start: int
    end: int
    cut: bool                          # the slice ended at its size limit
    records: int
    quarantined: int                   # messages a parser could not read, kept aside
    late: int                          # messages for time partitions already final
    bytes: int
    crc32c: str | None
    url: str | None
    files: list[FileEntry]
    errors: list[list]                 # [offset, why] of the first quarantined messages
    min_timestamp_ms: int | None
    max_timestamp_ms: int | None
    gaps: list[list[int]]              # [start, end): offsets Kafka does not have
    last_message: list[int]            # records.fingerprint of the last message: a
                                       # rewind's plan tells by it whether Kafka holds
                                       # another message there now (archive.earlier)
    placed_by: list[list]              # event time: [end, finalize watermark] steps that
                                       # decided lateness (planning.Slice.archived_before)
    audit: list[list]                  # [source, window start ms, messages]
    audit_elsewhere: list[list]        # the same, of those messages another generation's
                                       # row holds too: the audit counts them there
                                       # (planning.Slice.elsewhere)


class Manifest(TypedDict, total=False):
    run_id: str
    group: str
    slices: list[SliceRow]
    kept: list[SliceRow]               # what a rewind keeps of compacted rows (Plan.cuts)
    vanished: list[list]               # [topic, partition] deleted since the plan
    retention_lost: list[dict]         # planning.Anomaly as dicts
    offsets_reused: list[dict]         # the same: slices a rewind's job found Kafka holding
                                       # other messages than the archive in (archive.earlier)


def url(root: str, group: str, run_id: str) -> str:
    return layout.run_file(root, group, run_id, "manifest.json")


def write(storage: Storage, root: str, manifest: Manifest) -> None:
    storage.put_bytes(url(root, manifest["group"], manifest["run_id"]),
                      json.dumps(manifest, indent=1, sort_keys=True).encode())


def read(storage: Storage, root: str, group: str, run_id: str) -> Manifest | None:
    """The run's manifest; None when the job did not write one."""
    data = storage.get_or_none(url(root, group, run_id))
    return None if data is None else json.loads(data)


def row_files(row: SliceRow) -> list[FileEntry]:
    """The files of a row, whatever its age: rows from before multi-file rows name one
    `url`; older stored ones hold `files` as JSON text."""
    files = row.get("files")
    if files is not None:
        return json.loads(files) if isinstance(files, str) else files
    if row.get("url"):
        return [{"url": row["url"], "records": row["records"], "bytes": row["bytes"],
                 "sha256": row.get("sha256")}]
    return []


def added_rows(manifest: dict) -> list[SliceRow]:
    """The rows a run adds: its slices', and what its rewind keeps of compacted rows."""
    return [*manifest["slices"], *manifest.get("kept", ())]


def not_archived(manifest: dict) -> set[tuple[str, int]]:
    """The (topic, partition) of planned slices the job could not archive: retention
    deleted their head after planning, Kafka lost the topic, or a rewind found Kafka
    holding other messages than the archive. A rewind's rows they were to replace stay
    current."""
    return ({(t, p) for t, p in manifest.get("vanished", ())}
            | {(a["topic"], a["partition"]) for key in ("retention_lost", "offsets_reused")
               for a in manifest.get(key, ())})
