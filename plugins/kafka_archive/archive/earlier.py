"""A rewind's slice keeps what the archive held and Kafka no longer returns.

A rewind archives its range again from Kafka and replaces the files that held it
(planning.Slice.earlier). Since they were written, Kafka may have dropped some of those
offsets: its log cleaner keeps only the last message of each key on a compacted topic,
retention deletes the head, an unclean leader election truncates the tail. Those
messages exist only in the earlier files, so the slice takes them from there: every
offset of the slice that Kafka skips is looked up in the earlier files, in offset order,
and a record found there goes into the batch at its place. The written file then holds
what the replaced ones held, plus whatever Kafka has beyond them.

The earlier files are opened only at the first offset Kafka skips (a rewind of a topic
without compaction or transactions never reads them). An offset no earlier file holds
either (a transaction marker, an aborted transaction, a message compacted away before
the first archive) stays a gap, as before.

A parsed table's files keep fields, not the message bytes, so its rewind cannot parse
those messages again: the rows of the earlier files at the offsets the new files lack are
copied into files of the run beside them (copy-on-write, in their table and time
partition; kept_in_table), and the slice's row lists them too. Text and Baldr files keep
values only, without offsets: a rewind of them keeps only what Kafka still has (usable).
"""

from __future__ import annotations

import heapq
import logging
from typing import Callable, Iterator

from kafka_archive import formats, layout
from kafka_archive.archive.archived_files import DamagedFile, read_archived
from kafka_archive.errors import MissingObject
from kafka_archive.formats.batch import Batch
from kafka_archive.formats.records import Record
from kafka_archive.plan.planning import Slice
from kafka_archive.storage import Storage

log = logging.getLogger(__name__)


def with_earlier(batches: Iterator[Batch], earlier: Callable[[], Iterator[Record]],
                 start: int, end: int) -> Iterator[Batch]:
    """Kafka's batches of [start, end), with the records of `earlier()` (in offset order)
    at the offsets Kafka skipped. Batches Kafka returned without a skipped offset pass
    through untouched."""
    position = start  # every offset below it has been handed on (or is a gap for good)
    found: _Ahead | None = None
    for batch in batches:
        first, last = int(batch.offset[0]), int(batch.offset[-1])
        if first == position and last - first + 1 == len(batch):
            position = last + 1
            yield batch
            continue
        found = found or _Ahead(earlier())
        kept = found.between(position, last + 1, skip=batch.offset)
        position = last + 1
        yield batch.merged(Batch.of_records(kept)) if kept else batch
    if position < end:  # Kafka's read ended early: the tail is the earlier files' alone
        found = found or _Ahead(earlier())
        if kept := found.between(position, end):
            yield Batch.of_records(kept)
    if found is not None:
        found.close()


def usable(urls) -> bool:
    """Whether a slice's earlier files say which offsets they hold."""
    return bool(urls) and all(formats.for_file(u)[0].keeps_offsets for u in urls)


def records_of(storage: Storage, urls: list[str], start: int, end: int) -> Iterator[Record]:
    """The records of the files (one row's files may interleave offsets: the event-time
    layout's hours) within [start, end), in offset order. A file that cannot be read is
    named and passed over: a rewind is often how a person replaces a damaged file, and
    what only it held is lost already."""
    def readable(url: str) -> Iterator[Record]:
        try:
            for r in read_archived(storage, url):
                if r.offset >= end:
                    return
                if r.offset >= start:
                    yield r
        except DamagedFile as damaged:
            log.warning("%s: what Kafka no longer holds of offsets [%d, %d) cannot be kept "
                        "from it", damaged, start, end)
    return heapq.merge(*(readable(url) for url in urls), key=lambda r: r.offset)


class _Ahead:
    """An iterator of records in offset order, read forward in windows."""

    def __init__(self, records: Iterator[Record]):
        self.records, self.next = records, None

    def between(self, low: int, high: int, skip=()) -> list[Record]:
        """Its records with offsets in [low, high) other than `skip`'s (sorted offsets);
        those below `low` are passed over."""
        out = []
        while True:
            r = self.next if self.next is not None else next(self.records, None)
            self.next = None
            if r is None:
                return _not_in(out, skip)
            if r.offset >= high:
                self.next = r
                return _not_in(out, skip)
            if r.offset >= low:
                out.append(r)

    def close(self) -> None:
        close = getattr(self.records, "close", None)
        if close:
            close()


def _not_in(records: list[Record], offsets) -> list[Record]:
    if not records or not len(offsets):
        return records
    import numpy as np

    held = np.isin(np.fromiter((r.offset for r in records), np.int64, len(records)), offsets)
    return [r for r, h in zip(records, held) if not h]


def kept_in_table(storage: Storage, root: str, group: str, spec, run_id: str,
                  generation: int, s: Slice, row: dict) -> dict:
    """A parsed table's rewind slice: the rows of its earlier files at the offsets its own
    files lack, copied into its files (per table and time partition: the slice's file
    there written again with them, in offset order, or a file of their own); the slice's
    row with them (records, quarantined, files, gaps)."""
    from kafka_archive.archive import table_files
    from kafka_archive.formats import parquet  # pyarrow: where table files are written

    def place(url: str) -> tuple:
        where = layout.parse_url(root, url, spec)
        return where.place, where.time_path

    holes = row["gaps"]
    found: dict[tuple, list[tuple[str, list[int]]]] = {}  # place -> (earlier file, offsets)
    for url in s.earlier:
        try:
            inside = [o for o in parquet.offsets(storage.get_bytes(url)) if _within(o, holes)]
        except MissingObject:
            log.warning("cannot read archived file %s: it is not there; what Kafka no longer "
                        "holds of offsets [%d, %d) cannot be kept from it", url, s.start, s.end)
            continue
        if inside:
            found.setdefault(place(url), []).append((url, inside))
    if not found:
        return row
    own = {place(f["url"]): f for f in row["files"]}
    files, kept = {f["url"]: f for f in row["files"]}, set()
    for where, earlier_files in sorted(found.items(), key=lambda kv: str(kv[0])):
        added = {o for _, inside in earlier_files for o in inside}
        inputs, keeps, first = [u for u, _ in earlier_files], [parquet.among(added)], min(added)
        keeps *= len(inputs)
        if (mine := own.get(where)) is not None:  # its offsets are in no hole: all kept
            inputs, keeps = [mine["url"], *inputs], [None, *keeps]
            first = min(first, layout.parse_url(root, mine["url"], spec).name.first_offset)
            del files[mine["url"]]
        args = (root, group, s.topic, run_id, s.partition, generation, first)
        url = (layout.dead_letter_file(*args) if where[0] == "quarantine"
               else layout.table_data_file(*args, "parquet", time_path=where[1]))
        entry = table_files.rewrite(storage, table_files.Output(url, tuple(inputs)), keeps,
                                    ordered=True)
        if mine is not None and mine["url"] != url:
            storage.delete(mine["url"])  # named by its first offset, which it no longer is
        files[url] = entry
        kept |= added
        if where[0] == "quarantine":
            row = {**row, "quarantined": row["quarantined"] + len(added)}
    written = sorted(files.values(), key=lambda f: f["url"])
    return {**row, "records": row["records"] + len(kept), "files": written,
            "bytes": sum(f["bytes"] for f in written), "url": None, "crc32c": None,
            "gaps": _without(holes, sorted(kept))}


def _within(offset: int, ranges: list[list[int]]) -> bool:
    return any(a <= offset < b for a, b in ranges)


def _without(ranges: list[list[int]], offsets: list[int]) -> list[list[int]]:
    """The [start, end) ranges less the offsets (sorted)."""
    out = []
    for a, b in ranges:
        at = a
        for o in offsets:
            if a <= o < b:
                if at < o:
                    out.append([at, o])
                at = o + 1
        if at < b:
            out.append([at, b])
    return out

