"""Where everything lives under the archive root. Pure functions of their arguments.

    <root>/<group>/<topic>/partition=<n>/<generation>_<partition>_<first offset:020>.<ext>
    <root>/_runs/<group>/<run id>/plan.json, manifest.json, committed.json
    <root>/_runs/<group>/_inflight.json
    <root>/_superseded/<run id>/<group>/<topic>/partition=<n>/<file>

A file's name is its idempotency key (Secor's LogFilePath): the same slice of the same
data under the same config always lands at the same path with the same bytes.
Paths starting with `_` hold metadata, which Hive and Spark readers skip.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kafka_archive.storage import join

EXTENSIONS = {"sequencefile": "seq"}
_FILE_NAME = re.compile(r"(?P<generation>\d+)_(?P<partition>\d+)_(?P<first>\d{20})\.(?P<ext>\w+)")


@dataclass(frozen=True)
class ArchivedFile:
    generation: int
    partition: int
    first_offset: int
    ext: str


def file_name(generation: int, partition: int, first_offset: int, kind: str) -> str:
    return f"{generation}_{partition}_{first_offset:020d}.{EXTENSIONS[kind]}"


def parse_file_name(name: str) -> ArchivedFile | None:
    m = _FILE_NAME.fullmatch(name)
    if not m:
        return None
    return ArchivedFile(int(m["generation"]), int(m["partition"]), int(m["first"]), m["ext"])


def partition_dir(root: str, group: str, topic: str, partition: int) -> str:
    return join(root, group, topic, f"partition={partition}")


def data_file(root: str, group: str, topic: str, partition: int, generation: int,
              first_offset: int, kind: str) -> str:
    return join(partition_dir(root, group, topic, partition),
                file_name(generation, partition, first_offset, kind))


def runs_dir(root: str, group: str) -> str:
    return join(root, "_runs", group)


def run_file(root: str, group: str, run_id: str, name: str) -> str:
    return join(runs_dir(root, group), _safe(run_id), name)


def inflight_marker(root: str, group: str) -> str:
    return join(runs_dir(root, group), "_inflight.json")


def superseded(root: str, run_id: str, url: str) -> str:
    """Where a file moved aside by a rewind goes: same relative path, under _superseded."""
    relative = url[len(root.rstrip("/")) + 1:]
    return join(root, "_superseded", _safe(run_id), relative)


def _safe(run_id: str) -> str:
    # Airflow run ids hold ':' and '+', which some S3 tools and shells mangle
    return re.sub(r"[^A-Za-z0-9._=-]", "_", run_id)
