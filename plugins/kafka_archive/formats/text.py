"""Newline-delimited text: one message value per line, optionally the whole file gzip.

Each record is its value, verbatim bytes (no encoding assumed), then b"\\n"; an empty value
is an empty line. Only the value is kept: no offset, key, timestamp or headers, and a
tombstone (null value) is written as an empty line. Choose `sequencefile` to keep those.

A value holding b"\\n" would read back as two records, so the writer refuses it, naming
the offset, unless `escape_newlines` is set. Then every value is escaped, reversibly:
a backslash is written as two backslashes and a newline as backslash + "n"; nothing else
changes. The reader undoes it. Escaped files are named `.escaped.txt[.gz]`, so a reader
knows from the name alone which bytes it holds; other tools reading them must unescape
(values holding a backslash differ on disk from the message).
"""

from __future__ import annotations

import re
from typing import BinaryIO, Iterator

from kafka_archive.errors import TerminalError
from kafka_archive.formats import gzipped

_ESCAPED = re.compile(rb"\\(.?)", re.S)
_UNESCAPE = {b"\\": b"\\", b"n": b"\n"}


class NewlineInValue(TerminalError):
    """A message the text format cannot store: its value holds a newline."""


def escape(value: bytes) -> bytes:
    return value.replace(b"\\", b"\\\\").replace(b"\n", b"\\n")


def unescape(line: bytes) -> bytes:
    if b"\\" not in line:
        return line
    return _ESCAPED.sub(_unescape_one, line)


def _unescape_one(m: re.Match) -> bytes:
    try:
        return _UNESCAPE[m[1]]
    except KeyError:
        raise ValueError(f"bad escape {m[0]!r} in an escaped text line") from None


class TextWriter:
    """Writes values as lines; `append(offset, value)`, then close()."""

    def __init__(self, fileobj: BinaryIO, gzip: bool, escape_newlines: bool, file_name: str):
        self._out = gzipped.GzipOut(fileobj, compress=gzip)
        self._escape = escape_newlines
        self._name = file_name

    def append(self, offset: int, value: bytes | None) -> None:
        value = value or b""
        if self._escape:
            value = escape(value)
        elif b"\n" in value:
            raise NewlineInValue(
                f"{self._name}: the message at offset {offset} holds a newline, which the "
                "text format cannot store: set the group's format.escape_newlines: true, or "
                "use format kind sequencefile")
        self._out.write(value + b"\n")

    def close(self) -> None:
        self._out.close()


def read_values(fileobj: BinaryIO, gzip: bool, escaped: bool) -> Iterator[bytes]:
    """The values of a text file, in order. ValueError on a cut-off last line (no newline),
    a bad escape, or a damaged gzip stream."""
    for line in gzipped.checked(iter(gzipped.reader(fileobj, gzip))):
        if not line.endswith(b"\n"):
            raise ValueError(f"text file ends inside a line ({len(line)} bytes after the "
                             "last newline): truncated")
        yield unescape(line[:-1]) if escaped else line[:-1]
