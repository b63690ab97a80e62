"""Parquet in Iceberg's key_value shape: lossless, any payload, readable by any engine.

One row per message: `kafka` (topic, partition, offset, timestamp, timestamp_type), `key`
and `value` as bytes (null when the message has none: a null value is a tombstone) and
`headers` as a list of (name, value). Each column carries the field id Iceberg gives it
in a new table (`PARQUET:field_id`), so commit.iceberg can register the files in a table
made from this very schema (pyiceberg's pyarrow_to_schema) without rewriting them. A
file holds one Kafka partition, as every archive file does, which is the table's
partition value.

Rows are collected as Arrow columns and written at close, one row group per file
(a slice is bounded by the group's max_bytes); a compaction's concatenation streams
row groups. Needs pyarrow: the Spark job and the
tools that read files have it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Iterator, Mapping

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kafka_archive.formats import columns, schemas
from kafka_archive.formats.records import Record

COMPRESSION = "zstd"


def _field(name: str, kind: pa.DataType, field_id: int, nullable: bool = True) -> pa.Field:
    return pa.field(name, kind, nullable, metadata={b"PARQUET:field_id": str(field_id).encode()})


# nullable as Arrow builds it from Kafka's headers (a name is never null in practice)
HEADER = pa.struct([_field("name", pa.string(), 11), _field("value", pa.binary(), 12)])
KAFKA = pa.struct([_field("topic", pa.string(), 5, False),
                   _field("partition", pa.int32(), 6, False),
                   _field("offset", pa.int64(), 7, False),
                   _field("timestamp", pa.timestamp("us", tz="UTC"), 8),
                   _field("timestamp_type", pa.string(), 9)])
KEY_VALUE = pa.schema([_field("kafka", KAFKA, 1, False),
                       _field("key", pa.binary(), 2),
                       _field("value", pa.binary(), 3),
                       _field("headers", pa.list_(_field("element", HEADER, 10, False)), 4)])




def _without_ids(kind: pa.DataType) -> pa.DataType:
    if pa.types.is_struct(kind):
        return pa.struct([pa.field(f.name, _without_ids(f.type), f.nullable) for f in kind])
    if pa.types.is_list(kind):
        inner = kind.value_field
        return pa.list_(pa.field(inner.name, _without_ids(inner.type), inner.nullable))
    return kind


# a dead-letter table's: the key_value shape and why the message is not in the parsed
# table; without field ids, as the parsed shape (the table reads both by name)
DEAD_LETTER = pa.schema([pa.field(f.name, _without_ids(f.type), f.nullable) for f in KEY_VALUE]
                        + [pa.field("reason", pa.string())])


class KeyValueWriter:
    """Appends Records (or formats.batch.Batch columns) of one topic partition; the topic
    comes from the format dict's `topic` (the slice writer sets it), the partition from
    the file name (<generation>_<partition>_<first offset>.parquet). With `dead_letter` in
    the format, each Record's error is its row's reason (DEAD_LETTER)."""

    def __init__(self, fileobj: BinaryIO, fmt: Mapping, file_name: str):
        self.file, self.topic = fileobj, fmt.get("topic")
        if not self.topic:
            raise ValueError(f"{file_name}: a key_value Parquet file needs its topic")
        self.partition = int(file_name.split("_")[1])
        self.batches: list[pa.RecordBatch] = []
        self.schema = DEAD_LETTER if fmt.get("dead_letter") else KEY_VALUE
        self.reasons: list[str | None] = []

    def append(self, r: Record) -> None:
        self.reasons.append(r.error)
        self._add(pa.array([r.offset], pa.int64()), pa.array([r.key], pa.binary()),
                  pa.array([r.value], pa.binary()), pa.array([r.timestamp_ms], pa.int64()),
                  [[{"name": n, "value": v} for n, v in r.headers]])

    def append_batch(self, b) -> None:
        # the batch's headers are (key, value) structs: renamed by position (a cast
        # matches struct fields by name and would leave every name null)
        inner = b.headers.values
        named = pa.StructArray.from_arrays([inner.field(0), inner.field(1)], fields=list(HEADER))
        headers = pa.ListArray.from_arrays(b.headers.offsets, named,
                                           mask=b.headers.is_null() if b.headers.null_count
                                           else None)
        self._add(pa.array(b.offset, pa.int64()), b.key, b.value,
                  pa.array(b.timestamp_ms, pa.int64()), headers)

    def _add(self, offsets, keys, values, timestamps_ms, headers) -> None:
        n = len(offsets)
        kafka = pa.StructArray.from_arrays(
            [pa.array([self.topic] * n, pa.string()), pa.array([self.partition] * n, pa.int32()),
             offsets, pc.multiply(timestamps_ms, 1000).cast(pa.timestamp("us", tz="UTC")),
             pa.nulls(n, pa.string())], fields=list(KAFKA))
        self.batches.append(pa.RecordBatch.from_arrays(
            [kafka, keys, values, pa.array(headers, KEY_VALUE.field("headers").type)
             if isinstance(headers, list) else headers.cast(KEY_VALUE.field("headers").type)],
            schema=KEY_VALUE))

    def close(self) -> None:
        table = pa.Table.from_batches(self.batches, KEY_VALUE)
        if self.schema is DEAD_LETTER:
            table = pa.Table.from_arrays([*table.columns, pa.array(self.reasons, pa.string())],
                                         schema=DEAD_LETTER)
        _write(table, self.file)


def _write(table: pa.Table, file: BinaryIO) -> None:
    # one chunk: the bytes depend on the rows, not on how they arrived (a retried task,
    # or the per-record path, writes the same file). Written through a buffer: pyarrow
    # wants a whole Python file (it asks `closed`), the slice writer's only writes, and
    # closing it is the caller's.
    sink = pa.BufferOutputStream()
    pq.write_table(table.combine_chunks(), sink, compression=COMPRESSION,
                   row_group_size=1 << 30)
    file.write(memoryview(sink.getvalue()))


# the parsed shape's own columns, without field ids: its columns are added as messages
# bring them, so the table maps its files by name (commit.iceberg)
PARSED_KAFKA = _without_ids(KAFKA)


class ParsedWriter:
    """The parsed shape: per message the Kafka metadata struct, the event time, and its
    fields as typed columns (formats.columns): those the format's `columns` name (the
    table's, when the run was planned) keep their type; a field none names becomes a new
    column, typed by its values in this file (`columns_written` says which: the commit
    adds them to the table). `append` raises columns.Misfit and keeps nothing of a
    message a column cannot hold: the slice writer sends it to the dead letters.

    `typed` in the format: the fields are a registered schema's (formats.schemas.fit),
    their values as Arrow takes them, their columns typed by the schemas and promoted
    where a later version widens one (`origins` says which schema id set each,
    `identities` which fields each holds: schemas.fit)."""

    def __init__(self, fileobj: BinaryIO, fmt: Mapping, file_name: str):
        self.file, self.topic = fileobj, fmt.get("topic")
        self.partition = int(file_name.split("_")[1])
        self.types: dict = dict(fmt.get("columns", ()))
        self.typed, self.origins = bool(fmt.get("typed")), dict(fmt.get("origins", ()))
        self.identities: dict[str, tuple[str, ...]] = {}
        self.known = frozenset(self.types)
        self.values: dict[str, list] = {name: [] for name in self.types}
        self.pending = 0  # rows in `values`
        # a typed file's earlier rows as Arrow (row count, column -> array), TYPED_CHUNK_ROWS
        # at a time: nested values are many Python objects, which Python's collector walks
        self.chunks: list[tuple[int, dict[str, pa.Array]]] = []
        self.offsets: list[int] = []
        self.timestamps: list[int | None] = []
        self.event_ms: list[int] = []

    def append_parsed(self, r: Record, event_ms: int, fields: dict) -> None:
        self.append_fitted(r, event_ms, *columns.fit(fields, event_ms, self.types, self.known))

    def append_fitted(self, r: Record, event_ms: int, values: dict, types: dict,
                      origins: dict[str, str] | None = None,
                      identities: dict[str, tuple[str, ...]] | None = None) -> None:
        """A message's values as columns.fit (schemas.fit) gave them against this file's
        types."""
        for name in types:
            if name not in self.values:
                self.values[name] = [None] * self.pending
            self.values[name].append(values.get(name))
        self.types = types
        if origins is not None:
            self.origins = origins
        if identities is not None:
            self.identities = identities
        self.offsets.append(r.offset)
        self.timestamps.append(r.timestamp_ms)
        self.event_ms.append(event_ms)
        self.pending += 1
        if self.typed and self.pending >= TYPED_CHUNK_ROWS:
            self._to_arrow()

    def _to_arrow(self) -> None:
        """The pending rows of a typed file as Arrow columns of the file's types so far."""
        self.chunks.append((self.pending, {name: pa.array(values, schemas.arrow(self.types[name]))
                                           for name, values in self.values.items()}))
        self.values = {name: [] for name in self.values}
        self.pending = 0

    def columns_written(self) -> list[list]:
        """[name, type] of every field column of the file, in order."""
        return [[name, kind] for name, kind in self.types.items()]

    def close(self) -> None:
        n = len(self.offsets)
        kafka = pa.StructArray.from_arrays(
            [pa.array([self.topic] * n, pa.string()), pa.array([self.partition] * n, pa.int32()),
             pa.array(self.offsets, pa.int64()), _micros(self.timestamps),
             pa.nulls(n, pa.string())], fields=list(PARSED_KAFKA))
        arrays = [kafka, _micros(self.event_ms)]
        fields = [pa.field(columns.KAFKA, PARSED_KAFKA, False),
                  pa.field(columns.EVENT_TIME, pa.timestamp("us", tz="UTC"), False)]
        if self.typed:
            self._to_arrow()
        for name, kind in self.types.items():
            values, arrow_type = self.values.get(name), schemas.arrow(kind)
            if self.typed:  # each chunk's column as the file's final type (a promotion)
                arrays.append(pa.concat_arrays([
                    columns_of[name].cast(arrow_type) if name in columns_of
                    else pa.nulls(count, arrow_type) for count, columns_of in self.chunks]))
            elif kind == "timestamp":
                arrays.append(_micros(values))
            else:
                arrays.append(pa.array([float(v) if kind in ("float", "double") and v is not None
                                        else v for v in values], arrow_type))
            fields.append(pa.field(name, arrow_type))
        _write(pa.Table.from_arrays(arrays, schema=pa.schema(fields)), self.file)


TYPED_CHUNK_ROWS = 4096


def _micros(ms: list[int | None]) -> pa.Array:
    return pc.multiply(pa.array(ms, pa.int64()), 1000).cast(pa.timestamp("us", tz="UTC"))


# rows a compaction's output row group gathers before it is written (by their Arrow size):
# a rewrite holds about one input row group and one of these at a time, whatever the bin
ROW_GROUP_BYTES = 64 << 20


Keep = Callable[[pa.ChunkedArray], pa.ChunkedArray]  # Kafka offsets -> which rows to keep


def below(offset: int) -> Keep:
    """The rows below an offset (what a rewind keeps of a compacted file)."""
    return lambda offsets: pc.less(offsets, offset)


def among(offsets: Iterable[int]) -> Keep:
    """The rows at these offsets (what a rewind keeps of the files it replaces)."""
    wanted = pa.array(sorted(offsets), pa.int64())
    return lambda found: pc.is_in(found, value_set=wanted)


def concatenate(files: Iterable[bytes], out: BinaryIO, keep: Keep | list[Keep | None] | None = None,
                ordered: bool = False) -> tuple[int, list[list[str]]]:
    """Files of one table's shape (key_value, dead letters or parsed), in order, written
    as one to `out`: their rows whose Kafka offsets `keep` keeps (below, among; all:
    None; or one per input). A column a
    later file brings is null in the earlier rows. Returns the rows written and the
    parsed shape's field columns ([name, type], in order of appearance). ordered: the
    inputs' rows interleave (a rewind's own file and the rows it keeps of the files it
    replaces): written in offset order, read whole (one slice's files, not a bin).

    Streamed: the inputs are spooled to a temporary folder (their footers give the one
    schema first), then read a row group at a time and written in row groups of about
    ROW_GROUP_BYTES, so memory is bounded by the row groups, not by the bin (a 65 MiB
    bin read whole peaked at 10x). Same inputs, same bytes."""
    with tempfile.TemporaryDirectory(prefix="kafka-archive-concatenate-") as folder:
        paths = []
        for i, data in enumerate(files):
            paths.append(Path(folder) / f"{i}.parquet")
            paths[-1].write_bytes(data)
            del data
        schema = _unified([pq.read_schema(p) for p in paths])
        rows, pending = 0, []
        with pq.ParquetWriter(out, schema, compression=COMPRESSION) as writer:
            def flush() -> None:
                if pending:
                    writer.write_table(pa.Table.from_batches(pending, schema).combine_chunks(),
                                       row_group_size=1 << 30)
                    pending.clear()

            keeps = keep if isinstance(keep, list) else [keep] * len(paths)
            for path, keep in zip(paths, keeps):
                source = pq.ParquetFile(path)
                for group in range(source.num_row_groups):
                    table = _conformed(source.read_row_group(group), schema)
                    if keep is not None:
                        table = table.filter(keep(_offsets(table)))
                    pending.extend(table.to_batches())
                    rows += table.num_rows
                    if not ordered and sum(b.nbytes for b in pending) >= ROW_GROUP_BYTES:
                        flush()
            if ordered and pending:
                whole = pa.Table.from_batches(pending, schema)
                pending[:] = whole.take(pc.sort_indices(_offsets(whole))).to_batches()
            flush()
    if columns.EVENT_TIME not in schema.names:  # not the parsed shape: no field columns
        return rows, []
    return rows, [[f.name, schemas.kind(f.type)] for f in schema
                  if f.name not in columns.RESERVED]


def _offsets(table: pa.Table) -> pa.ChunkedArray:
    return pc.struct_field(table.column(columns.KAFKA), "offset")


def _unified(found: list[pa.Schema]) -> pa.Schema:
    """The one schema of files of one table: each column as the first file that has it
    has it, promoted where a later file's holds more (formats.columns.promoted: a typed
    table's int evolved to long, a struct that gained a field); in order of appearance."""
    fields: dict[str, pa.Field] = {}
    for schema in found:
        for f in schema:
            seen = fields.setdefault(f.name, f)
            if seen.type != f.type:
                merged = columns.promoted(schemas.kind(seen.type), schemas.kind(f.type))
                if merged is None:
                    raise ValueError(f"column {f.name} is {seen.type} in one file, {f.type} "
                                     "in another of the same table")
                fields[f.name] = pa.field(f.name, schemas.arrow(merged))
    return pa.schema(list(fields.values()))


def _conformed(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """The table with the columns of `schema` (one it lacks: nulls), in its order and types."""
    return pa.Table.from_arrays(
        [table.column(f.name).cast(f.type) if f.name in table.column_names
         else pa.nulls(table.num_rows, f.type) for f in schema], schema=schema)


def read(fileobj: BinaryIO, ext: str = "parquet") -> Iterator[Record]:
    """The file's Records. Parquet's footer is at its end: a stream that cannot seek (an
    S3 object's body, as verify and the audit's rescan read them) is read whole first."""
    seekable = getattr(fileobj, "seekable", None)
    table = pq.read_table(fileobj if seekable and seekable() else pa.BufferReader(fileobj.read()))
    kafka = table.column("kafka").combine_chunks()
    timestamps = pc.divide(kafka.field("timestamp").cast(pa.int64()), 1000)  # us -> ms
    if "value" not in table.column_names:  # the parsed shape keeps fields, not the bytes
        for offset, ts in zip(kafka.field("offset").to_pylist(), timestamps.to_pylist()):
            yield Record(offset, None, None, ts)
        return
    reasons = (table.column("reason").to_pylist() if "reason" in table.column_names
               else [None] * table.num_rows)
    for offset, key, value, ts, headers, reason in zip(
            kafka.field("offset").to_pylist(), table.column("key").to_pylist(),
            table.column("value").to_pylist(), timestamps.to_pylist(),
            table.column("headers").to_pylist(), reasons):
        yield Record(offset, key, value, ts, [(h["name"], h["value"]) for h in headers or ()],
                     error=reason)
