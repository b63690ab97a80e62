"""Parquet in Iceberg's key_value shape: lossless, any payload, readable by any engine.

One row per message: `kafka` (topic, partition, offset, timestamp, timestamp_type), `key`
and `value` as bytes (null when the message has none: a null value is a tombstone) and
`headers` as a list of (name, value). Each column carries the field id Iceberg gives it
in a new table (`PARQUET:field_id`), so commit.iceberg can register the files in a table
made from this very schema (pyiceberg's pyarrow_to_schema) without rewriting them. A
file holds one Kafka partition, as every archive file does, which is the table's
partition value.

Rows are collected as Arrow columns and written at close, one row group per file
(a slice is bounded by the group's max_bytes). Needs pyarrow: the Spark job and the
tools that read files have it.
"""

from __future__ import annotations

from typing import BinaryIO, Iterator, Mapping

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

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


class KeyValueWriter:
    """Appends Records (or formats.batch.Batch columns) of one topic partition; the topic
    comes from the format dict's `topic` (the slice writer sets it), the partition from
    the file name (<generation>_<partition>_<first offset>.parquet)."""

    def __init__(self, fileobj: BinaryIO, fmt: Mapping, file_name: str):
        self.file, self.topic = fileobj, fmt.get("topic")
        if not self.topic:
            raise ValueError(f"{file_name}: a key_value Parquet file needs its topic")
        self.partition = int(file_name.split("_")[1])
        self.batches: list[pa.RecordBatch] = []

    def append(self, r: Record) -> None:
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
        # one chunk: the bytes depend on the rows, not on how they arrived (a retried
        # task, or the per-record path, writes the same file). Written through a buffer:
        # pyarrow wants a whole Python file (it asks `closed`), the slice writer's only
        # writes, and closing it is the caller's.
        sink = pa.BufferOutputStream()
        pq.write_table(pa.Table.from_batches(self.batches, KEY_VALUE).combine_chunks(),
                       sink, compression=COMPRESSION, row_group_size=1 << 30)
        self.file.write(memoryview(sink.getvalue()))


def read(fileobj: BinaryIO, ext: str = "parquet") -> Iterator[Record]:
    """The file's Records. Parquet's footer is at its end: a stream that cannot seek (an
    S3 object's body, as verify and the audit's rescan read them) is read whole first."""
    seekable = getattr(fileobj, "seekable", None)
    table = pq.read_table(fileobj if seekable and seekable() else pa.BufferReader(fileobj.read()))
    kafka = table.column("kafka").combine_chunks()
    timestamps = pc.divide(kafka.field("timestamp").cast(pa.int64()), 1000)  # us -> ms
    for offset, key, value, ts, headers in zip(
            kafka.field("offset").to_pylist(), table.column("key").to_pylist(),
            table.column("value").to_pylist(), timestamps.to_pylist(),
            table.column("headers").to_pylist()):
        yield Record(offset, key, value, ts, [(h["name"], h["value"]) for h in headers or ()])
