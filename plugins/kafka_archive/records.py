"""One archived Kafka message, and how it is stored in a file's key and value.

The default SequenceFile key is a MessagePack map holding everything needed to replay the
message into Kafka (DESIGN.md): 1 offset, 2 key (absent when null), 3 timestamp ms,
4 headers as [name, value] pairs (absent when none), 5 true when the value is null (a
tombstone, which the BytesWritable value cannot tell from empty). The value is the
message bytes verbatim. Secor's legacy key, a LongWritable offset, keeps only the offset.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import BinaryIO, Iterator

import msgpack

from kafka_archive.formats import sequencefile as seq

COMPRESSION = {"none": "none", "default": "block-default", "gzip": "block-gzip"}


@dataclass(frozen=True)
class Record:
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


def encode_key(r: Record) -> bytes:
    fields: dict = {1: r.offset, 3: r.timestamp_ms}
    if r.key is not None:
        fields[2] = r.key
    if r.headers:
        fields[4] = [[name, value] for name, value in r.headers]
    if r.value is None:
        fields[5] = True
    return msgpack.packb(fields)


def decode(key: bytes | int, value: bytes) -> Record:
    if isinstance(key, int):  # legacy LongWritable offset key
        return Record(key, None, value, None)
    fields = msgpack.unpackb(key, strict_map_key=False)
    return Record(offset=fields[1], key=fields.get(2), timestamp_ms=fields.get(3),
                  value=None if fields.get(5) else value,
                  headers=[(name, v) for name, v in fields.get(4, ())])


class RecordWriter:
    """Appends Records to one SequenceFile, keyed as the group's format says."""

    def __init__(self, fileobj: BinaryIO, fmt: dict, file_name: str):
        self.legacy_key = fmt["key"] == "offset"
        self._file = seq.SequenceFileWriter(
            fileobj, seq.LONG_WRITABLE if self.legacy_key else seq.BYTES_WRITABLE,
            seq.BYTES_WRITABLE, COMPRESSION[fmt["compression"]],
            sync_marker=seq.sync_marker_for(file_name))

    def append(self, r: Record) -> None:
        self._file.append_record(r.offset if self.legacy_key else encode_key(r), r.value or b"")

    def close(self) -> None:
        self._file.close()


def open_writer(fileobj: BinaryIO, fmt: dict, file_name: str) -> RecordWriter:
    if fmt["kind"] != "sequencefile":
        raise ValueError(f"unknown format kind {fmt['kind']!r}")
    return RecordWriter(fileobj, fmt, file_name)


def read(fileobj: BinaryIO) -> Iterator[Record]:
    for key, value in seq.SequenceFileReader(fileobj):
        yield decode(key, value)


def last_offset(storage, url: str) -> int:
    """Offset of the last record of an archived file (read through: used only on rewinds)."""
    last = None
    with storage.open(url) as stream:
        for last in read(stream):
            pass
    if last is None:
        raise ValueError(f"{url}: archived file holds no record")
    return last.offset
