"""Baldr, the format of uSwitch's Bifrost: each record is its length as an 8-byte
big-endian integer, then its bytes; the whole file is gzip (`.baldr.gz`).

As Bifrost does, a record holds the message value only: no offset, key, timestamp or
headers, and a tombstone (null value) is written as an empty record. Choose
`sequencefile` to keep those.
"""

from __future__ import annotations

import struct
from typing import BinaryIO, Iterator

from kafka_archive.formats import gzipped

_LENGTH = struct.Struct(">q")
MAX_RECORD = (1 << 31) - 1  # a Kafka message fits a Java array; more is a damaged length


class BaldrWriter:
    def __init__(self, fileobj: BinaryIO):
        self._out = gzipped.GzipOut(fileobj)

    def append(self, offset: int, value: bytes | None) -> None:
        """offset: not stored (Bifrost's records hold the value only)."""
        value = value or b""
        self._out.write(_LENGTH.pack(len(value)) + value)

    def close(self) -> None:
        self._out.close()


def read_values(fileobj: BinaryIO) -> Iterator[bytes]:
    """The records of a Baldr file, in order. ValueError when the file is cut off inside a
    record, a length is negative, or the gzip stream is damaged."""
    return gzipped.checked(_records(gzipped.reader(fileobj)))


def _records(stream: BinaryIO) -> Iterator[bytes]:
    position = 0
    while head := stream.read(_LENGTH.size):
        if len(head) < _LENGTH.size:
            raise ValueError(f"Baldr file ends inside the length of the record at byte {position}")
        (length,) = _LENGTH.unpack(head)
        if not 0 <= length <= MAX_RECORD:
            raise ValueError(f"bad record length {length} at byte {position}")
        value = stream.read(length)
        if len(value) < length:
            raise ValueError(f"Baldr record at byte {position} needs {length} bytes, only "
                             f"{len(value)} left: truncated")
        yield value
        position += _LENGTH.size + length
