"""A table group's files written again from its own files: a compaction's merge
(commit.compaction) and the part of a compacted file a rewind keeps (archive.job).
Parquet in, Parquet out (formats.parquet.concatenated): no Kafka, no parser."""

from __future__ import annotations

import os
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from kafka_archive import layout
from kafka_archive.config import Config
from kafka_archive.errors import TerminalError
from kafka_archive.manifest import row_files
from kafka_archive.storage import Storage, crc32c, s3_checksum


@dataclass(frozen=True)
class Output:
    """Where a bin's files of one destination (a table's Kafka partition, or its time
    partition) go."""
    url: str
    inputs: tuple[str, ...]


def outputs(config: Config, group: str, writer: str, rows: list[dict]) -> list[Output]:
    """One output per table and time partition the rows' files (of one Kafka partition)
    are in, named by the first offset its inputs start at, in the folder of the table's
    data/ of `writer` (the compaction's or run's id)."""
    root, spec = config.archive_root, config.group(group).layout
    by_place: dict[tuple, list[tuple[int, str]]] = defaultdict(list)
    for row in rows:
        for f in row_files(row):
            where = layout.parse_url(root, f["url"], spec)
            if where is None:
                raise TerminalError(f"{f['url']}: not a table file of group {group}; not compacted")
            by_place[(where.place, where.time_path)].append((where.name.first_offset, f["url"]))
    first, made = rows[0], []
    for (place, time_path), files in sorted(by_place.items(), key=lambda kv: str(kv[0])):
        start = min(offset for offset, _ in files)
        args = (root, group, first["topic"], writer, first["partition"],
                first["_generation"], start)
        url = (layout.dead_letter_file(*args) if place == "quarantine"
               else layout.table_data_file(*args, "parquet", time_path=time_path))
        made.append(Output(url, tuple(u for _, u in sorted(files))))
    return made


def rewrite(storage: Storage, output: Output, keep=None, ordered: bool = False) -> dict | None:
    """The inputs concatenated, in order, into one Parquet file, of the rows whose offsets
    `keep` keeps (formats.parquet.below, among; all: None); its file entry, or None when
    no row is (nothing written). ordered: the inputs' offsets interleave, the rows are
    written in offset order (formats.parquet.concatenate). Same inputs, same bytes."""
    from kafka_archive.formats import parquet

    fd, tmp = tempfile.mkstemp(prefix="kafka-archive-rewrite-", suffix=".parquet")
    try:
        with os.fdopen(fd, "wb") as out:
            rows, columns = parquet.concatenate((storage.get_bytes(url) for url in output.inputs),
                                                out, keep, ordered)
        if not rows:
            return None
        crc = 0
        with open(tmp, "rb") as written:
            while chunk := written.read(8 << 20):
                crc = crc32c(chunk, crc)
        storage.upload_file(Path(tmp), output.url, crc)
        entry = {"url": output.url, "records": rows, "bytes": os.path.getsize(tmp),
                 "crc32c": s3_checksum(crc)}
    finally:
        os.unlink(tmp)
    return {**entry, "columns": columns} if columns else entry
