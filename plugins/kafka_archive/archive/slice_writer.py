"""Writing one slice: its messages, in offset order, to their files at deterministic paths.

Shared by the archive job (messages from Kafka) and backfill (messages from the backup
archive), so the same messages under the same config always give the same files.

- layout `partition` (the backup group): one file per slice, `partition=<n>/`, named by
  the slice's start offset.
- layout `event_time` (the partitioned group): the parser gives each message's event time;
  one file per (slice, time partition), named by the first offset of the slice's messages
  in that time partition. A message the parser cannot read goes to the slice's quarantine
  file with the reason (records.Record.error); a message whose time partition was already
  final when the run was planned (`Target.finalized_ms`) goes to `_late/<time partition>/`,
  so a finalized partition gains no files. A message archived before and archived again
  after a rewind goes where the run that first archived it put it (`archived_before`):
  back into its finalized partition, so a rewind never empties one. Nothing is dropped.

Each file streams to a local temp file (in Spark's local dirs on an executor), its CRC32C
taken on the way, and is uploaded with it when the slice is complete; `finish` returns the slice's manifest
row, `discard` drops the temp files of a slice that failed.
"""

from __future__ import annotations

import bisect
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kafka_archive import formats, layout, retries, spark
from kafka_archive.errors import ArchiveError
from kafka_archive.formats import audit_counts, columns, parsers
from kafka_archive.formats.records import Record, fingerprint
from kafka_archive.layout import LayoutSpec
from kafka_archive.storage import Storage, crc32c, s3_checksum

if TYPE_CHECKING:  # numpy and pyarrow only where batches are written: the Spark job
    from kafka_archive.formats.batch import Batch

MAX_REPORTED_ERRORS = 10  # parse errors listed in a manifest row (all are in the file)


@dataclass(frozen=True)
class Target:
    """What is fixed for every slice of one topic in a run."""
    root: str
    group: str
    topic: str
    generation: int
    format: dict
    layout: LayoutSpec
    parser: parsers.Parser | None       # event_time layout only
    finalized_ms: int | None = None     # time partitions ending at or before it are final
    audit_header: str = "kafka-archive-source"
    audit_window_ms: int = 60_000
    table_run: str | None = None        # a table group's: the run whose folder holds its files
    # an event-time table group's (the parsed shape): the table's columns when planned
    columns: tuple[tuple[str, str], ...] = ()
    column_origins: tuple[tuple[str, str], ...] = ()  # a typed table's (Plan.column_origins)
    # a typed table's: column -> the identities of the field it holds (Plan.column_identities)
    column_identities: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def parsed(self) -> bool:
        return self.table_run is not None and self.layout.kind == "event_time"

    @property
    def typed(self) -> bool:
        """The parsed table's columns come from the registered schemas (formats.schemas)."""
        return isinstance(self.parser, parsers.RegistryParser)


class OpenSlice:
    def __init__(self, target: Target, partition: int, start: int, end: int, max_bytes: int,
                 archived_before: tuple[tuple[int, int | None], ...] = (), elsewhere=None):
        """archived_before: planning.Slice.archived_before (a rewind's re-archive);
        elsewhere: which messages other generations hold too (earlier.HeldElsewhere)."""
        self.target, self.partition, self.start, self.end = target, partition, start, end
        self.before_ends = [end for end, _ in archived_before]
        self.before_marks = [mark for _, mark in archived_before]
        # a rewind's re-archive replaces rows whole: no size cut before their end
        self.cut_from = self.before_ends[-1] if self.before_ends else start
        self.topic, self.max_bytes = target.topic, max_bytes
        self.event_time = target.layout.kind == "event_time"
        # the directory of each open file (event time: and which replaced row it follows)
        self.files: dict[str | tuple[str, int], _OpenFile] = {}
        self.next_offset, self.gaps, self.count, self.payload = start, [], 0, 0
        self.quarantined, self.late, self.errors = 0, 0, []
        self.min_ts = self.max_ts = None
        self.last: Record | Batch | None = None  # the last message written (or its batch)
        self.cut = False
        self.audit_counts: dict[tuple[str, int], int] = {}  # (source, window start) -> messages
        self.elsewhere = elsewhere
        self.audit_elsewhere: dict[tuple[str, int], int] = {}  # of them, those held elsewhere

    def add(self, r: Record) -> None:
        """The next message of the slice (offsets increasing)."""
        size = len(r.key or b"") + len(r.value or b"")
        if self.count and self.payload + size > self.max_bytes and r.offset >= self.cut_from:
            # end right after the last record written, so a gap before `offset` is left
            # to the next run; deterministic: depends on the data only
            self.cut, self.end = True, self.next_offset
            return
        if r.offset > self.next_offset:
            self.gaps.append([self.next_offset, r.offset])
        if self.target.parsed:
            self._add_parsed(r)
        else:
            self._append(*self._file_for(r))
        self.count += 1
        self.payload += size
        source = audit_counts.source_of(r.headers, self.target.audit_header)
        audit_counts.count_archived(self.audit_counts, source, r.timestamp_ms,
                                    self.target.audit_window_ms)
        if self.elsewhere is not None and self.elsewhere.record(r):
            audit_counts.count_archived(self.audit_elsewhere, source, r.timestamp_ms,
                                        self.target.audit_window_ms)
        self.next_offset, self.last = r.offset + 1, r
        self.min_ts = r.timestamp_ms if self.min_ts is None else min(self.min_ts, r.timestamp_ms)
        self.max_ts = r.timestamp_ms if self.max_ts is None else max(self.max_ts, r.timestamp_ms)

    def add_batch(self, b: Batch) -> None:
        """The next messages of the slice, as Arrow columns: the same files, bytes and row
        as add() for each in turn, without a Python object per message where the layout
        (one file per slice) and the format's writer allow it."""
        writer = None if self.event_time else self._slice_file().writer
        if not hasattr(writer, "append_batch"):
            for r in b.records():
                if self.cut:
                    return
                self.add(r)
            return
        if self.cut or not len(b):
            return
        import numpy as np

        sizes = b.payload_sizes()
        over = self.payload + np.cumsum(sizes) > self.max_bytes
        over[0] &= self.count > 0  # a slice's first message is kept whatever its size
        over &= b.offset >= self.cut_from
        cut_at = int(np.argmax(over)) if over.any() else None
        if cut_at is not None:
            b, sizes = b.slice(0, cut_at), sizes[:cut_at]
        if len(b):
            self._append_batch(b, int(sizes.sum()))
        if cut_at is not None:
            self.cut, self.end = True, self.next_offset

    def _append_batch(self, b: Batch, payload: int) -> None:
        import numpy as np

        from kafka_archive.formats import batch

        offsets, ts = b.offset, b.timestamp_ms
        expected = np.concatenate([[self.next_offset], offsets[:-1] + 1])
        self.gaps += [[int(s), int(e)] for s, e in zip(expected[offsets > expected],
                                                       offsets[offsets > expected])]
        out = self._slice_file()
        try:
            out.writer.append_batch(b)
        except OSError as exc:
            raise out.write_error(exc, f"{self.topic} partition {self.partition} at offsets "
                                       f"{offsets[0]} to {offsets[-1]}") from exc
        out.count += len(b)
        self.count += len(b)
        self.payload += payload
        values, codes = batch.first_header_values(b, self.target.audit_header)
        sources = [audit_counts.source_named(v) for v in values]
        audit_counts.count_archived_batch(self.audit_counts, sources, codes, ts,
                                          self.target.audit_window_ms)
        if self.elsewhere is not None and (held := self.elsewhere.batch(b)).any():
            audit_counts.count_archived_batch(self.audit_elsewhere, sources, codes[held],
                                              ts[held], self.target.audit_window_ms)
        self.next_offset, self.last = int(offsets[-1]) + 1, b
        low, high = int(ts.min()), int(ts.max())
        self.min_ts = low if self.min_ts is None else min(self.min_ts, low)
        self.max_ts = high if self.max_ts is None else max(self.max_ts, high)

    def _append(self, out: _OpenFile, r: Record, write=None) -> None:
        """r into out (by `write`, default the writer's append); a write error names both."""
        try:
            write() if write else out.writer.append(r)
        except OSError as exc:
            raise out.write_error(exc, f"{self.topic} partition {self.partition} at offset "
                                       f"{r.offset}") from exc
        out.count += 1

    def _add_parsed(self, r: Record) -> None:
        """A message of an event-time table group: its fields into its time partition's
        file of the parsed table, or the whole message into the dead letters with why
        (not an object, no event time, a field its column cannot hold)."""
        t = self.target
        try:
            ms, fields = parsers.parse(t.parser, t.topic, r)
            time_path = layout.time_partition(ms, t.layout)
            url = layout.table_data_file(t.root, t.group, t.topic, t.table_run, self.partition,
                                         t.generation, r.offset, t.format, time_path)
            folder = url.rsplit("/", 1)[0]
            opened = self.files.get(folder)  # a file is named by its first message: fit first
            types = opened.writer.types if opened else dict(t.columns)
            if t.typed:
                from kafka_archive.formats import schemas  # pyarrow: the job's, as the writer

                fitted = schemas.fit(fields, fields.schema, fields.schema_id, ms, types,
                                     opened.writer.origins if opened
                                     else dict(t.column_origins), fields.native,
                                     opened.writer.identities if opened
                                     else dict(t.column_identities))
            else:
                fitted = columns.fit(fields, ms, types, frozenset(dict(t.columns)))
            out = self._open(folder, lambda: url, {**t.format, "shape": "parsed",
                                                   "columns": t.columns, "typed": t.typed})
            self._append(out, r, lambda: out.writer.append_fitted(r, ms, *fitted))
        except (parsers.ParseError, columns.Misfit) as exc:
            reason = exc.reason if isinstance(exc, parsers.ParseError) else str(exc)
            self._dead_letter(r, reason)

    def _dead_letter(self, r: Record, reason: str) -> None:
        t = self.target
        self.quarantined += 1
        if len(self.errors) < MAX_REPORTED_ERRORS:
            self.errors.append([r.offset, reason])
        url = layout.dead_letter_file(t.root, t.group, t.topic, t.table_run, self.partition,
                                      t.generation, r.offset)
        self._append(self._open(url.rsplit("/", 1)[0], lambda: url,
                                {"kind": "parquet", "dead_letter": True}),
                     Record(r.offset, r.key, r.value, r.timestamp_ms, r.headers, error=reason))

    def _slice_file(self) -> _OpenFile:
        """The one file of a slice in the partition layout."""
        t = self.target
        if t.table_run is not None:
            url = layout.table_data_file(t.root, t.group, t.topic, t.table_run, self.partition,
                                         t.generation, self.start, t.format)
            return self._open(url.rsplit("/", 1)[0], lambda: url, t.format)
        return self._open(layout.partition_dir(t.root, t.group, t.topic, self.partition),
                          lambda: layout.data_file(t.root, t.group, t.topic, self.partition,
                                                   t.generation, self.start, t.format), t.format)

    def _file_for(self, r: Record) -> tuple[_OpenFile, Record]:
        """The file a message goes to, and the record to write (with its parse error)."""
        t = self.target
        if not self.event_time:
            return self._slice_file(), r
        try:
            ms = parsers.event_time_ms(t.parser, t.topic, r)
            time_path = layout.time_partition(ms, t.layout)
        except parsers.ParseError as exc:
            self.quarantined += 1
            if len(self.errors) < MAX_REPORTED_ERRORS:
                self.errors.append([r.offset, exc.reason])
            url = layout.quarantine_file(t.root, t.group, t.topic, self.partition,
                                         t.generation, r.offset)
            return self._open(url.rsplit("/", 1)[0], lambda: url, formats.QUARANTINE_FORMAT,
                              r.offset), \
                Record(r.offset, r.key, r.value, r.timestamp_ms, r.headers, error=exc.reason)
        finalized_ms = self._finalized_ms(r.offset)
        if finalized_ms is not None and _final(time_path, finalized_ms, t.layout):
            self.late += 1
            url = layout.late_file(t.root, t.group, t.topic, time_path, self.partition,
                                   t.generation, r.offset, t.format)
            return self._open(url.rsplit("/", 1)[0], lambda: url, t.format, r.offset), r
        folder = layout.time_partition_dir(t.root, t.group, t.topic, time_path)
        return self._open(folder, lambda: layout.event_data_file(
            t.root, t.group, t.topic, time_path, self.partition, t.generation, r.offset,
            t.format), t.format, r.offset), r

    def _finalized_ms(self, offset: int) -> int | None:
        """The watermark deciding whether a message is late: the one of the run that
        archived it before (a rewind's re-archive puts it back where it was), or this
        run's for a message archived the first time."""
        i = bisect.bisect_right(self.before_ends, offset)
        return self.before_marks[i] if i < len(self.before_ends) else self.target.finalized_ms

    def _placed_by(self) -> list[list]:
        """[end, watermark] steps covering the slice: which watermark decided lateness
        below each end, so that a later rewind places every message the same way."""
        steps = [[end, mark] for end, mark in zip(self.before_ends, self.before_marks)
                 if end <= self.end]
        if not steps or steps[-1][0] < self.end:
            steps.append([self.end, self.target.finalized_ms])
        return steps

    def _open(self, folder: str, url, fmt: dict, offset: int | None = None) -> _OpenFile:
        """The slice's open file in folder (url: its name, if it opens now). offset: of
        the message, in the event-time layout, where a rewind's re-archive cuts a new file
        at each end of the rows it replaces (`archived_before`), so an hour gets back the
        files it had, byte for byte, not one file where two runs wrote two."""
        key = folder if offset is None else (folder, bisect.bisect_right(self.before_ends, offset))
        out = self.files.get(key)
        if out is None:  # the topic: a Parquet file keeps it in every row
            out = self.files[key] = _OpenFile(url(), {**fmt, "topic": self.topic})
        return out

    def finish(self, storage: Storage) -> dict:
        """Upload every file; the slice's manifest row."""
        if not self.cut and self.next_offset < self.end:
            self.gaps.append([self.next_offset, self.end])
        written = []
        try:
            for out in self.files.values():
                written.append(out.finish(storage))
        finally:
            self.discard()
        written.sort(key=lambda f: f["url"])
        single = written[0] if len(written) == 1 and not self.event_time else None
        return {"topic": self.topic, "partition": self.partition, "start": self.start,
                "end": self.end, "cut": self.cut, "records": self.count,
                "quarantined": self.quarantined, "late": self.late,
                "bytes": sum(f["bytes"] for f in written),
                "crc32c": single["crc32c"] if single else None,
                "url": single["url"] if single else None, "files": written,
                "errors": self.errors,
                "min_timestamp_ms": self.min_ts, "max_timestamp_ms": self.max_ts,
                **({"last_message": self._last_message()} if self.last is not None else {}),
                "gaps": self.gaps, **({"placed_by": self._placed_by()} if self.event_time else {}),
                "audit": _listed(self.audit_counts),
                **({"audit_elsewhere": _listed(self.audit_elsewhere)}
                   if self.audit_elsewhere else {})}

    def _last_message(self) -> list[int]:
        """The fingerprint of the slice's last message (SliceRow.last_message)."""
        r = self.last
        if isinstance(r, Record):
            return fingerprint(r.offset, r.key, r.value, r.timestamp_ms)
        return fingerprint(int(r.offset[-1]), r.key[-1].as_py(), r.value[-1].as_py(),
                           int(r.timestamp_ms[-1]))

    def discard(self) -> None:
        """Remove the slice's temp files (after upload, or when the slice failed)."""
        for out in self.files.values():
            out.discard()


def _listed(counts: dict[tuple[str, int], int]) -> list[list]:
    """Per-(source, window) counts as a row keeps them: [source, window, messages]."""
    return sorted([source, window, n] for (source, window), n in counts.items())


def _final(time_path: str, finalized_ms: int, spec: LayoutSpec) -> bool:
    return layout.time_partition_range(time_path, spec)[1] <= finalized_ms


class _OpenFile:
    def __init__(self, url: str, fmt: dict):
        self.url, self.count = url, 0
        fd, self.tmp_path = tempfile.mkstemp(prefix="kafka-archive-", suffix=".part",
                                             dir=spark.local_dir())
        self.file = _ChecksummedFile(os.fdopen(fd, "wb"))
        self.writer = formats.open_writer(self.file, fmt, url.rsplit("/", 1)[-1])

    def write_error(self, exc: OSError, what: str) -> ArchiveError:
        where = f"writing {self.url} ({what}) to local {self.tmp_path}"
        if retries.is_disk_full(exc):
            return retries.disk_full(exc, self.tmp_path, where)
        return retries.classify(exc, where)

    def finish(self, storage: Storage) -> dict:
        try:  # buffered and compressed bytes reach the disk only now
            self.writer.close()
            self.file.close()
        except OSError as exc:
            raise self.write_error(exc, f"{self.count} records, closing") from exc
        storage.upload_file(Path(self.tmp_path), self.url, self.file.crc32c)
        written = getattr(self.writer, "columns_written", None)  # the parsed shape's
        origins = getattr(self.writer, "origins", None)  # a typed one's
        identities = getattr(self.writer, "identities", None)  # a typed one's
        return {"url": self.url, "records": self.count, "bytes": self.file.size,
                "crc32c": s3_checksum(self.file.crc32c),
                **({"columns": written()} if written else {}),
                **({"origins": origins} if origins else {}),
                **({"identities": identities} if identities else {})}

    def discard(self) -> None:
        self.file.raw.close()  # a failed slice's file is still open
        if os.path.exists(self.tmp_path):
            os.unlink(self.tmp_path)


class _ChecksummedFile:
    """A file that keeps the CRC32C and size of what was written to it: the one pass over
    the bytes that the upload's and the manifest's checksum take."""

    def __init__(self, raw):
        self.raw, self.crc32c, self.size = raw, 0, 0

    def write(self, data: bytes) -> int:
        self.crc32c = crc32c(data, self.crc32c)
        self.size += len(data)
        return self.raw.write(data)

    def flush(self) -> None:
        self.raw.flush()

    def close(self) -> None:
        if self.raw.closed:
            return
        self.raw.flush()
        os.fsync(self.raw.fileno())
        self.raw.close()
