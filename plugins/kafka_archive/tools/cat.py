"""`kafka-archive cat`: the records of one archived file, one line each."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Iterator

from kafka_archive import formats
from kafka_archive.errors import ArchiveError
from kafka_archive.formats.records import Record
from kafka_archive.storage import Storage
from kafka_archive.tools import verify

PREVIEW_BYTES = 60


def cat_file(storage: Storage, url: str, limit: int | None) -> None:
    for n, record in enumerate(read_archived(storage, url)):
        if limit is not None and n >= limit:
            break
        print(format_record(record))


def read_archived(storage: Storage, url: str) -> Iterator[Record]:
    """The file's records; any failure to read it is an error naming the file (failures
    to print, such as a closed pipe, are not)."""
    try:
        with storage.open(url) as stream:
            yield from formats.read(stream, url)
    except verify.READ_ERRORS as exc:
        raise ArchiveError(f"cannot read archived file {url}: {exc}") from None


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
    more = len(data) - PREVIEW_BYTES
    return repr(data[:PREVIEW_BYTES]) + (f"...(+{more} bytes)" if more > 0 else "")
