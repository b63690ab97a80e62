"""Whole-file gzip streams shared by the text and Baldr formats.

Writing is deterministic (no file name or time in the gzip header, fixed level), so the
same records always give the same bytes, and buffered, so appending one small record is
cheap. Reading turns every way a gzip stream can be damaged into ValueError, which is
what archive readers raise on malformed files.
"""

from __future__ import annotations

import gzip
import zlib
from typing import BinaryIO, Iterator

LEVEL = 6            # zlib's default, as the SequenceFile codecs
FLUSH_AT = 1 << 20   # bytes buffered before they go to the compressor


class GzipOut:
    """Appends bytes to one gzip member on `fileobj`; close() ends the member and flushes,
    but leaves `fileobj` open."""

    def __init__(self, fileobj: BinaryIO, compress: bool = True):
        self._raw = fileobj
        self._out = (gzip.GzipFile(filename="", mode="wb", fileobj=fileobj, mtime=0,
                                   compresslevel=LEVEL) if compress else fileobj)
        self._buffer = bytearray()
        self._closed = False

    def write(self, data: bytes) -> None:
        if self._closed:
            raise ValueError("write to a closed archive file writer")
        self._buffer += data
        if len(self._buffer) >= FLUSH_AT:
            self._drain()

    def close(self) -> None:
        if not self._closed:
            self._drain()
            if self._out is not self._raw:
                self._out.close()  # a GzipFile given a fileobj does not close it
            self._raw.flush()
            self._closed = True

    def _drain(self) -> None:
        self._out.write(bytes(self._buffer))
        self._buffer.clear()


def reader(fileobj: BinaryIO, compressed: bool = True) -> BinaryIO:
    return gzip.GzipFile(fileobj=fileobj, mode="rb") if compressed else fileobj


def checked(items: Iterator) -> Iterator:
    """`items`, with a damaged or cut-off gzip stream reported as ValueError."""
    try:
        yield from items
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise ValueError(f"damaged gzip stream: {exc}") from None
