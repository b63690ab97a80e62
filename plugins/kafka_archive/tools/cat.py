"""`kafka-archive cat`: the records of one archived file, one line each, as

- `text` (default, for people): offset, time, key and value as text (UTF-8, other bytes
  and control characters escaped as \\xNN, \\n...; cut after PREVIEW_CHARS), header names;
- `json` (for programs, `jq`): one JSON object per line that round-trips the record:
  {"offset", "timestamp_ms", "key", "value", "headers": [[name, value], ...]} with every
  byte string base64-encoded (standard alphabet, padded) and null kept as null (a
  tombstone's value, a missing key);
- `raw`: the values only, verbatim, each followed by a newline (like `kcat -f '%s\\n'`);
  a tombstone prints an empty line.
"""

from __future__ import annotations

import base64
import json
import sys
from datetime import datetime, timezone
from typing import BinaryIO

from kafka_archive.archive.archived_files import read_archived
from kafka_archive.formats.records import Record
from kafka_archive.storage import Storage

FORMATS = ("text", "json", "raw")
PREVIEW_CHARS = 200
_ESCAPES = {i: f"\\x{i:02x}" for i in range(32)} | {10: "\\n", 13: "\\r", 9: "\\t", 127: "\\x7f"}


def cat_file(storage: Storage, url: str, limit: int | None, fmt: str = "text",
             out: BinaryIO | None = None) -> None:
    out = out or sys.stdout.buffer
    for n, record in enumerate(read_archived(storage, url)):
        if limit is not None and n >= limit:
            break
        if fmt == "raw":
            out.write((record.value or b"") + b"\n")
        else:
            line = json_record(record) if fmt == "json" else format_record(record)
            out.write(line.encode() + b"\n")
    out.flush()


def format_record(r: Record) -> str:
    when = ("-" if r.timestamp_ms is None else
            datetime.fromtimestamp(r.timestamp_ms / 1000, timezone.utc)
            .isoformat(timespec="milliseconds").replace("+00:00", "Z"))
    headers = ",".join(name for name, _ in r.headers) or "-"
    return f"{'-' if r.offset is None else r.offset}  {when}  key={preview(r.key)}  value={preview(r.value)}  headers={headers}"


def preview(data: bytes | None) -> str:
    if data is None:
        return "<null>"
    if not data:
        return "<empty>"
    text = data.decode("utf-8", "backslashreplace").translate(_ESCAPES)
    more = len(text) - PREVIEW_CHARS
    return text[:PREVIEW_CHARS] + (f"...(+{more} chars)" if more > 0 else "")


def json_record(r: Record) -> str:
    return json.dumps({"offset": r.offset, "timestamp_ms": r.timestamp_ms, "key": _b64(r.key),
                       "value": _b64(r.value),
                       "headers": [[name, _b64(value)] for name, value in r.headers]})


def record_from_json(line: str) -> Record:
    """The inverse of json_record."""
    d = json.loads(line)
    unb64 = lambda s: None if s is None else base64.b64decode(s)  # noqa: E731
    return Record(d["offset"], unb64(d["key"]), unb64(d["value"]), d["timestamp_ms"],
                  [(name, unb64(value)) for name, value in d["headers"]])


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")
