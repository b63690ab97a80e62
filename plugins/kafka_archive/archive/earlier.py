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
from functools import reduce
from itertools import chain
from typing import Callable, Iterator

from kafka_archive import formats, layout
from kafka_archive.archive.archived_files import DamagedFile, read_archived
from kafka_archive.catalog.state import minus
from kafka_archive.errors import TerminalError
from kafka_archive.formats.batch import Batch
from kafka_archive.formats.records import Record, fingerprint
from kafka_archive.plan.planning import Slice
from kafka_archive.storage import Storage

log = logging.getLogger(__name__)


class OffsetsReused(TerminalError):
    """Kafka holds another message at an offset than the archive does: the topic was
    deleted and re-created, or an unclean leader election truncated it and new messages
    took the offsets. A rewind would mix the two, or replace archived messages with
    others: its slice archives nothing (job.ArchiveTask.archive)."""

    def __init__(self, message: str, offset: int):
        super().__init__(message)
        self.offset = offset

    def __reduce__(self):  # across Spark's processes whole
        return type(self), (str(self), self.offset)


def with_earlier(batches: Iterator[Batch], earlier: Callable[[], Iterator[Record]],
                 start: int, end: int, where: str = "") -> Iterator[Batch]:
    """Kafka's batches of [start, end), with the records of `earlier()` (in offset order)
    at the offsets Kafka skipped. Batches Kafka returned without a skipped offset pass
    through untouched. Where both hold an offset (in a batch with a skipped offset, and
    Kafka's last one before the earlier files' tail), they must hold the same message:
    else OffsetsReused (where names the topic and partition), and the slice replaces
    nothing (the plan's look, first_reused, could not see it: an election after the plan
    was made, or the log cleaner removed the message it compares)."""
    position = start  # every offset below it has been handed on (or is a gap for good)
    found: _Ahead | None = None  # opened at the first skipped offset
    last: Batch | None = None  # Kafka's last batch
    try:
        for batch in batches:
            first, final = int(batch.offset[0]), int(batch.offset[-1])
            last = batch
            if first == position and final - first + 1 == len(batch):
                position = final + 1
                yield batch
                continue
            found = found or _Ahead(earlier())
            kept, both = found.between(position, final + 1, skip=batch.offset)
            _same(both, batch, where)
            position = final + 1
            yield batch.merged(Batch.of_records(kept)) if kept else batch
        if position < end:  # the tail is the earlier files' alone
            found = found or _Ahead(earlier())
            if last is not None:  # the offset before the tail: the same message in both?
                _same(found.between(position - 1, position, skip=last.offset[-1:])[1], last,
                      where)
            if kept := found.between(position, end)[0]:
                yield Batch.of_records(kept)
    finally:
        if found is not None:
            found.close()


def agreeing_with_last(batches: Iterator[Batch], earlier_last, where: str = ""
                       ) -> Iterator[Batch]:
    """Kafka's batches, each checked at the offsets of `earlier_last` (Slice.earlier_last:
    the fingerprint of the last message of each row a rewind replaces) it holds: another
    message there is OffsetsReused. The job's look for what Kafka returns whole (with_earlier
    compares only around the offsets Kafka skips): a topic re-created, or truncated by an
    unclean election after the plan's look, and written again past the cut."""
    import numpy as np

    offsets = np.array(sorted(o for o, *_ in earlier_last), dtype=np.int64)
    last = {o: [o, t, digest] for o, t, digest in earlier_last}
    for batch in batches:
        low, high = np.searchsorted(offsets, [batch.offset[0], batch.offset[-1] + 1])
        for o in offsets[low:high]:
            i = int(np.searchsorted(batch.offset, o))
            if i < len(batch) and batch.offset[i] == o and fingerprint(
                    int(o), batch.key[i].as_py(), batch.value[i].as_py(),
                    int(batch.timestamp_ms[i])) != last[int(o)]:
                raise _reused(where, int(o))
        yield batch


def _reused(where: str, offset: int) -> OffsetsReused:
    return OffsetsReused(
        f"{where} offset {offset}: Kafka holds another message than the archived one (the "
        "topic deleted and re-created, or truncated by an unclean leader election and "
        "written again): a rewind would mix the two or replace the archived one, so the "
        "slice archives nothing and the archived files stay. Keep both: set a new "
        "`generation` in the config (new file names; the archived files stay as they "
        "are), then delete the token line again", offset)


def _same(earlier: list[Record], batch: Batch, where: str) -> None:
    """The earlier records equal Kafka's at their offsets, else OffsetsReused."""
    if not earlier:
        return
    import numpy as np

    at = np.searchsorted(batch.offset, [r.offset for r in earlier])
    for r, i in zip(earlier, at):
        if not _is(r, batch.value[int(i)].as_py(), batch.key[int(i)].as_py(),
                   int(batch.timestamp_ms[i])):
            raise _reused(where, r.offset)


def _is(record: Record, value: bytes | None, key: bytes | None, timestamp_ms: int) -> bool:
    """Whether an archived record is this message of Kafka's: the value, key and time
    where the archived file kept them (a parsed table's row keeps fields, neither key
    nor value: only its time tells)."""
    fields_only = record.value is None and record.key is None
    return (fields_only or record.value == value) and (record.key is None or record.key == key) and (
        record.timestamp_ms is None or record.timestamp_ms == timestamp_ms)


class HeldElsewhere:
    """Which messages of a slice other generations' rows hold too (Slice.elsewhere): the
    same message at its offset (_is). Their files are read forward in step with the
    slice, each generation's rows one after another, so one file per generation is open.
    A row whose files are gone (a person deleted one) counts as holding the same messages
    at its offsets, as the catalog, which still names it, says it does."""

    def __init__(self, storage: Storage, s: Slice):
        chains: dict[int, list] = {}
        self.assumed: list[tuple[int, int]] = []  # the offsets of rows whose files are gone
        sizes = storage.sizes([url for *_, urls in s.elsewhere for url in urls])
        for generation, start, end, urls in s.elsewhere:
            if any(sizes[url] is None for url in urls):
                log.warning("%s partition %d: a file of generation %d's row [%d, %d) is gone; "
                            "its messages count as the ones this run archives again (for "
                            "the audit)", s.topic, s.partition, generation, start, end)
                self.assumed.append((start, end))
            else:
                chains.setdefault(generation, []).append(urls)
        self.ahead = _Ahead(heapq.merge(*(
            chain.from_iterable(records_of(storage, list(urls), s.start, s.end) for urls in rows)
            for rows in chains.values()), key=lambda r: r.offset))

    @classmethod
    def of(cls, storage: Storage, s: Slice) -> HeldElsewhere | None:
        """None where no other generation holds the slice's offsets, or its files keep
        no offsets (text, Baldr: their messages count in every generation)."""
        urls = [url for *_, row in s.elsewhere for url in row]
        return cls(storage, s) if usable(urls) else None

    def record(self, r: Record) -> bool:
        """Whether another generation holds this message (the next in offset order)."""
        _, there = self.ahead.between(r.offset, r.offset + 1, skip=[r.offset])
        return any(a <= r.offset < b for a, b in self.assumed) or any(
            _is(other, r.value, r.key, r.timestamp_ms) for other in there)

    def batch(self, b: Batch):
        """Per message of the batch (the next in offset order), whether another
        generation holds it: a numpy mask."""
        import numpy as np

        held = np.zeros(len(b), dtype=bool)
        for start, end in self.assumed:
            held |= (b.offset >= start) & (b.offset < end)
        _, there = self.ahead.between(int(b.offset[0]), int(b.offset[-1]) + 1, skip=b.offset)
        for other, i in zip(there, np.searchsorted(b.offset, [r.offset for r in there])):
            i = int(i)
            held[i] = held[i] or _is(other, b.value[i].as_py(), b.key[i].as_py(),
                                     int(b.timestamp_ms[i]))
        return held

    def close(self) -> None:
        self.ahead.close()


TAIL = 1000  # records of the last replaced file the plan compares with Kafka


def first_reused(storage: Storage, consumer, s: Slice) -> int | None:
    """An offset at which Kafka holds another message than the archive, among those a
    rewind's slice would replace, if any: the plan's look before it moves anything aside.
    A topic re-created, or truncated by an unclean election and written again, differs
    there. Two looks, in step with Kafka's messages (kafka-python's consumer):
    - the tail (TAIL records) of the last file replaced: the first offset there that
      differs (where an election's cut most often falls);
    - then the last message of every row replaced (Slice.earlier_last, as the job
      recorded it) that Kafka's retention still holds: an election cuts the log from some
      offset on, so a row archived before it that reaches past that offset has its last
      message there, where Kafka now holds another (or none: the log cleaner removed it,
      and the row goes unjudged). One read of Kafka per such row, no file read.
    None where they agree (the job's look, with_earlier, stays the last word)."""
    from kafka import TopicPartition

    tp = TopicPartition(s.topic, s.partition)
    if (found := _first_reused_in_tail(storage, consumer, s, tp)) is not None or \
            not s.earlier_last:
        return found
    # only where Kafka still holds offsets: a rewind over a long history reads the rows of
    # Kafka's retention, not the whole archive's (an archive past Kafka's latest offset is
    # held before this)
    earliest, end = consumer.beginning_offsets([tp])[tp], consumer.end_offsets([tp])[tp]
    for offset, timestamp_ms, digest in s.earlier_last:
        if earliest <= offset < end and (k := _message_at(consumer, tp, offset)) is not None \
                and fingerprint(offset, k.key, k.value, k.timestamp) != [offset, timestamp_ms, digest]:
            return offset
    return None


def _message_at(consumer, tp, offset: int):
    """Kafka's message at offset, None if it holds none there."""
    from kafka_archive import brokers

    return next((m for m in brokers.read_range(consumer, tp, offset, offset + 1)
                 if m.offset == offset), None)


def _first_reused_in_tail(storage: Storage, consumer, s: Slice, tp) -> int | None:
    """first_reused's look at the last file's tail: its last TAIL records and Kafka's
    messages at their offsets, in step; None where the file keeps no offsets or cannot
    be read."""
    from collections import deque

    from kafka_archive import brokers

    last = s.earlier[-1:]
    if not usable(last):
        return None
    archived = iter(deque(records_of(storage, list(last), s.start, s.end), maxlen=TAIL))
    a = next(archived, None)
    if a is None:
        return None
    kafka = brokers.read_range(consumer, tp, a.offset, s.end)
    k = next(kafka, None)
    while a is not None and k is not None:
        if a.offset < k.offset:
            a = next(archived, None)
        elif k.offset < a.offset:
            k = next(kafka, None)
        elif not _is(a, k.value, k.key, k.timestamp):
            return a.offset
        else:
            a, k = next(archived, None), next(kafka, None)
    return None


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

    def between(self, low: int, high: int, skip=()) -> tuple[list[Record], list[Record]]:
        """Its records with offsets in [low, high): those other than `skip`'s (sorted
        offsets), and those at them; the ones below `low` are passed over."""
        out = []
        while True:
            r = self.next if self.next is not None else next(self.records, None)
            self.next = None
            if r is None or r.offset >= high:
                self.next = r
                return _split(out, skip)
            if r.offset >= low:
                out.append(r)

    def close(self) -> None:
        close = getattr(self.records, "close", None)
        if close:
            close()


def _split(records: list[Record], offsets) -> tuple[list[Record], list[Record]]:
    """(the records at none of the offsets, the records at them)."""
    if not records or not len(offsets):
        return records, []
    import numpy as np

    held = np.isin(np.fromiter((r.offset for r in records), np.int64, len(records)), offsets)
    return ([r for r, h in zip(records, held) if not h], [r for r, h in zip(records, held) if h])


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
        inside = [r.offset for r in records_of(storage, [url], s.start, s.end)
                  if _within(r.offset, holes)]
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
            "gaps": reduce(lambda gaps, o: minus(gaps, o, o + 1), sorted(kept), holes)}


def _within(offset: int, ranges: list[list[int]]) -> bool:
    return any(a <= offset < b for a, b in ranges)
