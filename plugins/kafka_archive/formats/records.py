"""One archived Kafka message, and how it is stored in a file's key and value.

The default SequenceFile key is a MessagePack map holding everything needed to replay the
message into Kafka (DESIGN.md): 1 offset, 2 key (absent when null), 3 timestamp ms,
4 headers as [name, value] pairs (absent when none), 5 true when the value is null (a
tombstone, which the BytesWritable value cannot tell from empty), and, only in quarantine
files, 6 why the message could not be parsed. The value is the message bytes verbatim.
Secor's legacy key, a LongWritable offset, keeps only the offset.

Files are written and read through the format registry (kafka_archive.formats), which
builds on this module.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import msgpack


@dataclass(frozen=True)
class Record:
    offset: int | None            # None when read from a format that keeps values only
    key: bytes | None
    value: bytes | None
    timestamp_ms: int | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    error: str | None = None      # quarantine files: why the message could not be parsed


def encode_key(r: Record) -> bytes:
    fields: dict = {1: r.offset, 3: r.timestamp_ms}
    if r.key is not None:
        fields[2] = r.key
    if r.headers:
        fields[4] = [[name, value] for name, value in r.headers]
    if r.value is None:
        fields[5] = True
    if r.error is not None:
        fields[6] = r.error
    return msgpack.packb(fields)


def decode(key: bytes | int, value: bytes) -> Record:
    if isinstance(key, int):  # legacy LongWritable offset key
        return Record(key, None, value, None)
    fields = msgpack.unpackb(key, strict_map_key=False)
    return Record(offset=fields[1], key=fields.get(2), timestamp_ms=fields.get(3),
                  value=None if fields.get(5) else value,
                  headers=[(name, v) for name, v in fields.get(4, ())], error=fields.get(6))


def fingerprint(offset: int, key: bytes | None, value: bytes | None,
                timestamp_ms: int) -> list[int]:
    """[offset, timestamp ms, CRC-32 of key and value]: enough to tell whether Kafka still
    holds this message at its offset, or another one took the offset (an unclean leader
    election, a topic re-created), without the message itself. (msgpack tells a null key
    or value from an empty one.)"""
    return [offset, timestamp_ms, zlib.crc32(msgpack.packb([key, value]))]
