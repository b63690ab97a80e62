"""`kafka-archive ls`: the current files of a group (or one topic), with the Kafka offsets
each slice covers, records and bytes, from the catalog,
so a file moved aside by a rewind or replaced by a backfill is not listed."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from kafka_archive.catalog import Contents
from kafka_archive.manifest import row_files


@dataclass(frozen=True)
class ListedFile:
    topic: str
    partition: int
    generation: int
    start: int      # the slice's offsets [start, end); a slice of an event-time group
    end: int        # spreads over several files, each listed with the slice's range
    records: int
    bytes: int
    url: str
    run: str        # the run folder whose plan made the slice


def list_files(contents: Contents, topic: str | None = None) -> list[ListedFile]:
    rows = contents.of_topic(topic) if topic else contents.rows
    return [ListedFile(row["topic"], row["partition"], row["_generation"], row["start"],
                       row["end"], f["records"], f["bytes"], f["url"],
                       row["_run"].rsplit("/", 1)[-1])
            for row in rows for f in row_files(row)]


def as_json(files: list[ListedFile]) -> list[dict]:
    return [asdict(f) for f in files]


def render(files: list[ListedFile]) -> str:
    lines = [f"{f.topic}\t{f.partition}\t[{f.start}, {f.end})\t{f.records}\t{f.bytes}\t{f.url}"
             for f in files]
    total = sum(f.bytes for f in files)
    return "\n".join(["topic\tpartition\toffsets\trecords\tbytes\tfile", *lines,
                      f"{len(files)} files, {sum(f.records for f in files)} records, "
                      f"{total} bytes"])
