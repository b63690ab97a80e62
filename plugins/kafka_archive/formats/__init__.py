"""File formats the archiver writes, implemented in pure Python so the archiver needs no JVM.

The registry below is the one way to write and read every kind (`open_writer`, `read`:
the slice writer, `kafka-archive cat`, verify and audit rescans all go through it). Beside
it: `records` (the record and its key encoding, which the formats build on), `batch`
(records as Arrow columns, encoded a whole batch at once), `sequencefile`, `text`,
`baldr` and `gzipped` (the codecs), `parsers` (a message's event time) and
`audit_counts` (the audit's per-window counting). Nothing here imports more than
kafka_archive.errors. A group's format is a dict (config.FormatSpec as a dict, as plans
carry it):

- `sequencefile` (default, `.seq`): Hadoop SequenceFile, lossless: offset, key,
  timestamp, headers and tombstones are kept (records.encode_key). Options `key`
  (msgpack | offset), `compression` and `level`. Compressions, each read by Hadoop's own
  SequenceFile.Reader without native libraries (README, "Compression"): `none`;
  `default` (DefaultCodec: zlib at `level` 1-9, default 6 as Hadoop's codecs); `gzip`
  (GzipCodec, same levels); `fast` (DefaultCodec, DEFLATE through ISA-L's level 3: ~8x
  faster than level 6, files ~15% bigger); `snappy` (SnappyCodec, in Hadoop's block framing).
- `text` (`.txt`, `.txt.gz`, `.escaped.txt`, `.escaped.txt.gz`): one value per line,
  options `compression` (none | gzip) and `escape_newlines` (formats/text.py).
- `baldr` (`.baldr.gz`): Bifrost's length-prefixed gzip file of values (formats/baldr.py).
- `parquet` (`.parquet`): Iceberg's key_value shape, lossless (formats/parquet.py); the
  files an Iceberg table group registers in its table. An event-time table group's are
  the parsed shape (`shape: parsed`: Kafka metadata, event time, the fields as typed
  columns) and its dead letters the key_value shape with a reason (`dead_letter`).

Text and Baldr keep values only: their records read back with offset, key and timestamp
None (`keeps_offsets` False). Their offsets are not derived from the file name and
position, which is exact only for a file of consecutive offsets, and neither a Kafka
partition with gaps (compaction, transaction markers) nor an event-time partition holds
one. The file name still gives the first offset; the manifest gives range and count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import BinaryIO, Callable, Iterator, Mapping, Protocol

from kafka_archive.formats import baldr, sequencefile as seq, text
from kafka_archive.formats.records import Record, decode, encode_key

# Quarantined messages are kept whole whatever the group's format, with their reason
QUARANTINE_FORMAT = {"kind": "sequencefile", "key": "msgpack", "compression": "default"}


class Writer(Protocol):
    def append(self, record: Record) -> None: ...
    def close(self) -> None: ...


@dataclass(frozen=True)
class Format:
    kind: str
    extensions: tuple[str, ...]                  # every name ending it writes, without the dot
    extension: Callable[[Mapping], str]          # the one for these options
    open_writer: Callable[[BinaryIO, Mapping, str], Writer]  # (file, format, file name)
    read: Callable[[BinaryIO, str], Iterator[Record]]        # (file, extension)
    keeps_offsets: bool                          # records read back carry offset, key, time


# --- sequencefile -------------------------------------------------------------------------

SEQUENCEFILE_COMPRESSION = {"none": "none", "default": "block-default", "gzip": "block-gzip",
                            "fast": "block-fast", "snappy": "block-snappy"}


class SequenceFileRecordWriter:
    """Appends Records to one SequenceFile, keyed as the group's format says."""

    def __init__(self, fileobj: BinaryIO, fmt: Mapping, file_name: str):
        self.legacy_key = fmt.get("key", "msgpack") == "offset"
        self._file = seq.SequenceFileWriter(
            fileobj, seq.LONG_WRITABLE if self.legacy_key else seq.BYTES_WRITABLE,
            seq.BYTES_WRITABLE, SEQUENCEFILE_COMPRESSION[fmt.get("compression", "default")],
            sync_marker=seq.sync_marker_for(file_name), level=fmt.get("level", seq.DEFAULT_LEVEL))

    def append(self, r: Record) -> None:
        self._file.append_record(r.offset if self.legacy_key else encode_key(r), r.value or b"")

    def append_batch(self, b) -> None:
        """Records as Arrow columns (a formats.batch.Batch): the bytes of append() for each."""
        from kafka_archive.formats import batch  # numpy and pyarrow: only the Spark job

        self._file.append_batch(b.offset if self.legacy_key else batch.msgpack_keys(b), b.value)

    def close(self) -> None:
        self._file.close()


def _read_sequencefile(fileobj: BinaryIO, ext: str = "seq") -> Iterator[Record]:
    for key, value in seq.SequenceFileReader(fileobj):
        yield decode(key, value)


# --- text and baldr -----------------------------------------------------------------------

class _ValuesWriter:
    """Adapts a values-only writer, append(offset, value), to Records."""

    def __init__(self, writer):
        self._writer = writer

    def append(self, r: Record) -> None:
        self._writer.append(r.offset, r.value)

    def close(self) -> None:
        self._writer.close()


def _values(values: Iterator[bytes]) -> Iterator[Record]:
    for value in values:
        yield Record(None, None, value, None)


def _text_extension(fmt: Mapping) -> str:
    ext = "escaped.txt" if fmt.get("escape_newlines") else "txt"
    return ext + ".gz" if fmt.get("compression", "none") == "gzip" else ext


def _open_text(fileobj: BinaryIO, fmt: Mapping, file_name: str) -> Writer:
    compression = fmt.get("compression", "none")
    if compression not in ("none", "gzip"):
        raise ValueError(f"text format compression must be none or gzip, got {compression!r}")
    return _ValuesWriter(text.TextWriter(fileobj, compression == "gzip",
                                         bool(fmt.get("escape_newlines")), file_name))


def _read_text(fileobj: BinaryIO, ext: str) -> Iterator[Record]:
    return _values(text.read_values(fileobj, gzip=ext.endswith(".gz"),
                                    escaped=ext.startswith("escaped.")))


def _open_parquet(fileobj: BinaryIO, fmt: Mapping, file_name: str) -> Writer:
    from kafka_archive.formats import parquet  # pyarrow: only where files are written or read

    if fmt.get("shape") == "parsed":
        return parquet.ParsedWriter(fileobj, fmt, file_name)
    return parquet.KeyValueWriter(fileobj, fmt, file_name)


def _read_parquet(fileobj: BinaryIO, ext: str) -> Iterator[Record]:
    from kafka_archive.formats import parquet

    return parquet.read(fileobj, ext)


FORMATS = {f.kind: f for f in (
    Format("sequencefile", ("seq",), lambda fmt: "seq", SequenceFileRecordWriter,
           _read_sequencefile, keeps_offsets=True),
    Format("text", ("txt", "txt.gz", "escaped.txt", "escaped.txt.gz"), _text_extension,
           _open_text, _read_text, keeps_offsets=False),
    Format("baldr", ("baldr.gz",), lambda fmt: "baldr.gz",
           lambda fileobj, fmt, name: _ValuesWriter(baldr.BaldrWriter(fileobj)),
           lambda fileobj, ext: _values(baldr.read_values(fileobj)), keeps_offsets=False),
    Format("parquet", ("parquet",), lambda fmt: "parquet", _open_parquet, _read_parquet,
           keeps_offsets=True),
)}
# every extension a data file may have, longest first (escaped.txt.gz before txt.gz)
EXTENSIONS = sorted((e for f in FORMATS.values() for e in f.extensions), key=len, reverse=True)
_BY_EXTENSION = {e: f for f in FORMATS.values() for e in f.extensions}


def get(kind: str) -> Format:
    try:
        return FORMATS[kind]
    except KeyError:
        raise ValueError(f"unknown format kind {kind!r} (have: {', '.join(FORMATS)})") from None


def extension(fmt: Mapping | str) -> str:
    """The file name extension for a format dict, or for a kind with default options."""
    fmt = {"kind": fmt} if isinstance(fmt, str) else fmt
    return get(fmt["kind"]).extension(fmt)


def split_extension(name: str) -> tuple[str, str] | None:
    """(stem, extension) when `name` ends in a known data file extension, else None."""
    for ext in EXTENSIONS:
        if name.endswith("." + ext):
            return name[:-len(ext) - 1], ext
    return None


def for_file(name: str) -> tuple[Format, str]:
    """The format of an archived file and its extension, from its name (path or URL)."""
    found = split_extension(name.rsplit("/", 1)[-1])
    if found is None:
        raise ValueError(f"{name}: not an archive file name (extensions: {', '.join(EXTENSIONS)})")
    return _BY_EXTENSION[found[1]], found[1]


def replayable(fmt: Mapping) -> bool:
    """Whether files of this format keep all replay needs: offset, key, value (null apart
    from empty), timestamp and headers. SequenceFiles with the msgpack key and Parquet do;
    Secor's offset key, text and Baldr keep values only."""
    return (fmt.get("kind") == "parquet"
            or (fmt.get("kind") == "sequencefile" and fmt.get("key", "msgpack") == "msgpack"))


def open_writer(fileobj: BinaryIO, fmt: Mapping, file_name: str) -> Writer:
    """A writer of Records to `fileobj` in format `fmt`; `file_name` (the base name) seeds
    what must be deterministic and names the file in errors."""
    return get(fmt["kind"]).open_writer(fileobj, fmt, file_name)


def read(fileobj: BinaryIO, name: str | None = None) -> Iterator[Record]:
    """The Records of an archived file. The format comes from the file name (a path or URL
    will do); without one, only a SequenceFile is recognized, by its magic bytes."""
    if name is None:
        return _read_sequencefile(fileobj)
    fmt, ext = for_file(name)
    return fmt.read(fileobj, ext)
