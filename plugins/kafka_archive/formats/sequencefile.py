"""Hadoop SequenceFile (version 6) writer and reader, in pure Python.

Layout, as org.apache.hadoop.io.SequenceFile writes it:

    header  b"SEQ" 6, key class, value class (Hadoop Text: vint length + UTF-8),
            isCompressed, isBlockCompressed (1 byte each), codec class (Text, if compressed),
            metadata (int32 count + Text pairs), 16-byte sync marker
    uncompressed records
            int32 record length, int32 key length, key, value; every SYNC_INTERVAL bytes
            a sync point (int32 -1 then the sync marker) precedes the next record
    compressed blocks
            sync point, vint record count, then four sections, each a vint length and the
            compressed bytes: key lengths (vints), keys, value lengths (vints), values

Keys and values are serialized Writables: BytesWritable is an int32 length and the bytes,
LongWritable an 8-byte signed integer, all big-endian. "vint" is Hadoop's
WritableUtils.writeVLong encoding, not protobuf's varint.

Hadoop picks a random sync marker per file. Here the caller supplies it (sync_marker_for
derives one from a name) so that rewriting the same records produces identical bytes, and
a retried upload of an archive file is indistinguishable from the first.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from dataclasses import dataclass, field
from typing import BinaryIO, Iterator

BYTES_WRITABLE = "org.apache.hadoop.io.BytesWritable"
LONG_WRITABLE = "org.apache.hadoop.io.LongWritable"
DEFAULT_CODEC = "org.apache.hadoop.io.compress.DefaultCodec"
GZIP_CODEC = "org.apache.hadoop.io.compress.GzipCodec"
SNAPPY_CODEC = "org.apache.hadoop.io.compress.SnappyCodec"

# how blocks are compressed -> the codec class a Hadoop reader decompresses them with.
# block-fast is DEFLATE through ISA-L: a zlib stream, so DefaultCodec reads it; Snappy is
# Hadoop's block framing around raw Snappy blocks, which Hadoop 3.3+ reads with the
# snappy-java it bundles, without native libraries. (LZ4 is left out: a raw LZ4 block does
# not record its size, and Hadoop's framing gives it only for whole blocks of chunks.)
COMPRESSIONS = {"none": None, "block-default": DEFAULT_CODEC, "block-gzip": GZIP_CODEC,
                "block-fast": DEFAULT_CODEC, "block-snappy": SNAPPY_CODEC}
KEY_CLASSES = (BYTES_WRITABLE, LONG_WRITABLE)
# ISA-L's level 3: ~8x zlib 6's speed, about its size. Not levels 1 and 2 (~1.8x faster):
# their bytes depend on memory ISA-L never initialised (a section of a few hundred bytes
# came out differently, still valid, in most processes), and a file's bytes must be a
# function of its slice: a retried task rewrites the file the manifest has sized.
FAST_LEVEL = 3
# uncompressed bytes per Snappy chunk: within the buffer Hadoop's decompressor fills
# (io.compression.codec.snappy.buffersize, 256 KiB by default)
HADOOP_BLOCK_CHUNK = 128 * 1024

MAGIC = b"SEQ"
VERSION = 6
SYNC_SIZE = 16
SYNC_ESCAPE = -1
SYNC_INTERVAL = 5 * 1024 * (4 + SYNC_SIZE)  # as the Hadoop 3 bundled with pyspark: 100 KiB

# zlib's window bits: 15 = zlib header (DefaultCodec, like java.util.zip.Deflater), 31 = gzip.
_WBITS = {DEFAULT_CODEC: 15, GZIP_CODEC: 31}
DEFAULT_LEVEL = 6  # zlib's default, which Hadoop's codecs use

Key = bytes | int  # bytes for BytesWritable keys, int for LongWritable keys


def sync_marker_for(name: str) -> bytes:
    """A deterministic 16-byte sync marker for the file called `name`."""
    return hashlib.md5(name.encode()).digest()[:SYNC_SIZE]


def encode_vlong(value: int) -> bytes:
    """WritableUtils.writeVLong: -112..127 in one byte; otherwise a byte telling sign and
    length, then the magnitude (one's complement if negative) big-endian."""
    if not -(2**63) <= value < 2**63:
        raise ValueError(f"{value} does not fit a Java long")
    if -112 <= value <= 127:
        return value.to_bytes(1, "big", signed=True)
    magnitude = ~value if value < 0 else value
    size = (magnitude.bit_length() + 7) // 8
    prefix = (-120 if value < 0 else -112) - size
    return prefix.to_bytes(1, "big", signed=True) + magnitude.to_bytes(size, "big")


def _vlong_size(first_byte: int) -> int:
    """Total encoded size of the vlong whose first byte is `first_byte` (0..255)."""
    first = _signed_byte(first_byte)
    if first >= -112:
        return 1
    return 1 + (-(first + 120) if first < -120 else -(first + 112))


def _signed_byte(byte: int) -> int:
    return byte - 256 if byte > 127 else byte


def decode_vlong(data: bytes, pos: int = 0) -> tuple[int, int]:
    """WritableUtils.readVLong from data[pos:]: returns (value, position after it)."""
    if pos >= len(data):
        raise ValueError(f"vlong expected at {pos}, data ends")
    first = _signed_byte(data[pos])
    size = _vlong_size(data[pos])
    if pos + size > len(data):
        raise ValueError(f"vlong at {pos} needs {size} bytes, only {len(data) - pos} left")
    if size == 1:
        return first, pos + 1
    magnitude = int.from_bytes(data[pos + 1:pos + size], "big")
    return (~magnitude if first < -120 else magnitude), pos + size


def _text(value: str) -> bytes:
    """Hadoop Text serialization: vint byte length + UTF-8."""
    encoded = value.encode()
    return encode_vlong(len(encoded)) + encoded


def _serialize(writable_class: str, value: Key) -> bytes:
    if writable_class == LONG_WRITABLE:
        if not isinstance(value, int):
            raise TypeError(f"LongWritable needs an int, got {type(value).__name__}")
        return struct.pack(">q", value)
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise TypeError(f"BytesWritable needs bytes, got {type(value).__name__}")
    return struct.pack(">i", len(value)) + bytes(value)


def _deserialize(writable_class: str, payload: bytes) -> Key:
    if writable_class == LONG_WRITABLE:
        if len(payload) != 8:
            raise ValueError(f"LongWritable of {len(payload)} bytes, expected 8")
        return struct.unpack(">q", payload)[0]
    if len(payload) < 4 or struct.unpack(">i", payload[:4])[0] != len(payload) - 4:
        raise ValueError(f"BytesWritable length prefix does not match its {len(payload)} bytes")
    return payload[4:]


def _compressor(compression: str, level: int):
    """The function compressing one block section (bytes -> bytes) for a compression."""
    if compression == "block-fast":
        from isal import isal_zlib

        return lambda data: isal_zlib.compress(data, FAST_LEVEL)
    if compression == "block-snappy":
        import cramjam

        return lambda data: _hadoop_blocks(data, cramjam.snappy.compress_raw)
    wbits = _WBITS[COMPRESSIONS[compression]]
    return lambda data: zlib.compress(data, level, wbits)


def _hadoop_blocks(data, compress) -> bytes:
    """Hadoop's BlockCompressorStream framing: per chunk, its uncompressed length, then
    the compressed chunk after its length (all int32 big-endian). An empty section is
    one zero length, as Hadoop writes it."""
    view = memoryview(data)
    if not len(view):
        return struct.pack(">i", 0)
    out = []
    for start in range(0, len(view), HADOOP_BLOCK_CHUNK):
        chunk = view[start:start + HADOOP_BLOCK_CHUNK]
        compressed = bytes(compress(chunk))
        out += [struct.pack(">ii", len(chunk), len(compressed)), compressed]
    return b"".join(out)


def _hadoop_unblock(data: bytes, decompress) -> bytes:
    """The inverse of _hadoop_blocks, for any chunking Hadoop's writer chose."""
    out, pos = [], 0
    while pos < len(data):
        total = struct.unpack_from(">i", data, pos)[0]
        pos, got = pos + 4, 0
        while got < total:
            if pos + 4 > len(data):
                raise ValueError("compressed stream is truncated")
            size = struct.unpack_from(">i", data, pos)[0]
            if size < 0 or pos + 4 + size > len(data):
                raise ValueError("compressed stream is truncated")
            chunk = bytes(decompress(data[pos + 4:pos + 4 + size]))
            out.append(chunk)
            pos, got = pos + 4 + size, got + len(chunk)
        if got != total:
            raise ValueError(f"a chunk decompressed to {got} bytes, its header says {total}")
    return b"".join(out)


def _decompress(codec: str, data: bytes) -> bytes:
    """Decompress one section; concatenated streams (gzip members) are allowed, trailing
    garbage or a cut-off stream is not."""
    if codec == SNAPPY_CODEC:
        import cramjam

        return _hadoop_unblock(data, cramjam.snappy.decompress_raw)
    out = []
    while data:
        stream = zlib.decompressobj(_WBITS[codec])
        out.append(stream.decompress(data))
        if not stream.eof:
            raise ValueError("compressed stream is truncated")
        data = stream.unused_data
    return b"".join(out)


@dataclass
class _Block:
    """Records buffered for the next compressed block, as Hadoop's four buffers."""

    count: int = 0
    key_lengths: bytearray = field(default_factory=bytearray)
    keys: bytearray = field(default_factory=bytearray)
    value_lengths: bytearray = field(default_factory=bytearray)
    values: bytearray = field(default_factory=bytearray)

    def add(self, key: bytes, value: bytes) -> None:
        self.count += 1
        self.key_lengths += encode_vlong(len(key))
        self.keys += key
        self.value_lengths += encode_vlong(len(value))
        self.values += value

    def add_many(self, count: int, key_lengths, keys, value_lengths, values) -> None:
        """`count` records whose four sections are already encoded."""
        self.count += count
        self.key_lengths += key_lengths
        self.keys += keys
        self.value_lengths += value_lengths
        self.values += values

    def size(self) -> int:
        # Hadoop measures a block by its keys and values, not by their length vints
        return len(self.keys) + len(self.values)

    def sections(self) -> tuple[bytearray, ...]:
        return self.key_lengths, self.keys, self.value_lengths, self.values


class SequenceFileWriter:
    """Streams records into a SequenceFile on `fileobj` (written from its current position;
    `bytes_written` counts from there). The header is written at once; `close()` writes the
    last block and flushes, but leaves `fileobj` open. Memory holds at most one block."""

    def __init__(self, fileobj: BinaryIO, key_class: str, value_class: str, compression: str,
                 sync_marker: bytes, block_size: int = 1_000_000,
                 sync_interval: int = SYNC_INTERVAL, level: int = DEFAULT_LEVEL) -> None:
        if key_class not in KEY_CLASSES:
            raise ValueError(f"key class must be one of {KEY_CLASSES}, got {key_class!r}")
        if value_class != BYTES_WRITABLE:
            raise ValueError(f"value class must be {BYTES_WRITABLE}, got {value_class!r}")
        if compression not in COMPRESSIONS:
            raise ValueError(f"compression must be one of {list(COMPRESSIONS)}, "
                             f"got {compression!r}")
        if len(sync_marker) != SYNC_SIZE:
            raise ValueError(f"sync marker must be {SYNC_SIZE} bytes, got {len(sync_marker)}")
        if not 0 <= level <= 9:
            raise ValueError(f"compression level must be 0 to 9, got {level!r}")
        self.key_class = key_class
        self.value_class = value_class
        self.records = 0
        self.bytes_written = 0
        self._out = fileobj
        self._codec = COMPRESSIONS[compression]
        self._compress = _compressor(compression, level) if self._codec else None
        self._sync_marker = bytes(sync_marker)
        self._block_size = block_size
        self._level = level
        self._sync_interval = sync_interval  # uncompressed files only, as in Hadoop
        self._block = _Block()
        self._last_sync = 0  # Hadoop counts the first interval from the start of the file
        self._closed = False
        self._write(self._header())

    def append_record(self, key: Key, value: bytes) -> None:
        """Append one record: `key` is bytes (BytesWritable) or int (LongWritable)."""
        if self._closed:
            raise ValueError("append_record on a closed SequenceFileWriter")
        key_bytes = _serialize(self.key_class, key)
        value_bytes = _serialize(self.value_class, value)
        if self._codec is None:
            self._write_record(key_bytes, value_bytes)
        else:
            self._block.add(key_bytes, value_bytes)
            if self._block.size() >= self._block_size:
                self._write_block()
        self.records += 1

    def append_batch(self, keys, values) -> None:
        """Append records given as columns, with the bytes append_record would write for
        each in turn: `keys` a binary Arrow array (BytesWritable) or an int64 numpy array
        (LongWritable), `values` a binary Arrow array (null: empty)."""
        import numpy as np
        import pyarrow.compute as pc

        from kafka_archive.formats import batch

        if self._closed:
            raise ValueError("append_batch on a closed SequenceFileWriter")
        count = len(values)
        if self.key_class == LONG_WRITABLE:
            key_bytes, key_sizes = batch.be64(np.asarray(keys, np.int64)), np.full(count, 8)
        else:
            if keys.null_count:
                raise TypeError("BytesWritable needs bytes, got None")
            key_sizes = batch.lengths(keys)
            key_bytes, key_sizes = batch.be32_prefixed(keys, key_sizes), key_sizes + 4
        value_sizes = batch.lengths(values)
        value_bytes = batch.be32_prefixed(pc.fill_null(values, b""), value_sizes)
        value_sizes = value_sizes + 4
        if self._codec is None:
            self._write_records(batch.concat(batch.be32_pairs(key_sizes + value_sizes, key_sizes),
                                             key_bytes, value_bytes),
                                8 + key_sizes + value_sizes)
        else:
            self._add_to_blocks(key_bytes, key_sizes, value_bytes, value_sizes)
        self.records += count

    def _write_records(self, encoded, sizes) -> None:
        """Uncompressed records, each already laid out, with a sync point before a record
        wherever _write_record would put one."""
        import numpy as np

        from kafka_archive.formats.batch import data_bytes

        ends = np.zeros(len(sizes) + 1, np.int64)
        np.cumsum(sizes, out=ends[1:])
        done = 0
        while done < len(sizes):
            if self.bytes_written >= self._last_sync + self._sync_interval:
                self._write_sync()
            # the first later record that starts past the next sync point, if any
            due = self._last_sync + self._sync_interval - self.bytes_written + ends[done]
            stop = min(max(int(np.searchsorted(ends, due, side="left")), done + 1), len(sizes))
            self._write(data_bytes(encoded, done, stop))
            done = stop

    def _add_to_blocks(self, key_bytes, key_sizes, value_bytes, value_sizes) -> None:
        """Fill blocks as append_record does: a block is written right after the record
        that brings it to block_size."""
        import numpy as np

        from kafka_archive.formats.batch import data_bytes, vlongs

        ends = np.zeros(len(key_sizes) + 1, np.int64)
        np.cumsum(key_sizes + value_sizes, out=ends[1:])
        done = 0
        while done < len(key_sizes):
            full = int(np.searchsorted(ends, ends[done] + self._block_size - self._block.size(),
                                       side="left"))
            stop = min(full, len(key_sizes))
            self._block.add_many(stop - done, vlongs(key_sizes[done:stop]),
                                 data_bytes(key_bytes, done, stop), vlongs(value_sizes[done:stop]),
                                 data_bytes(value_bytes, done, stop))
            if full <= len(key_sizes):
                self._write_block()
            done = stop

    def close(self) -> None:
        """Write the buffered block, if any, and flush. Closing twice is harmless."""
        if not self._closed:
            self._write_block()
            self._out.flush()
            self._closed = True

    def __enter__(self) -> SequenceFileWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        # After an error the file is incomplete anyway: don't add a block to it.
        if exc_type is None:
            self.close()

    def _header(self) -> bytes:
        compressed = self._codec is not None
        parts = [MAGIC, bytes([VERSION]), _text(self.key_class), _text(self.value_class),
                 bytes([compressed, compressed])]
        if compressed:
            parts.append(_text(self._codec))
        parts += [struct.pack(">i", 0), self._sync_marker]  # no metadata
        return b"".join(parts)

    def _write_record(self, key: bytes, value: bytes) -> None:
        if self.bytes_written >= self._last_sync + self._sync_interval:
            self._write_sync()
        self._write(struct.pack(">ii", len(key) + len(value), len(key)) + key + value)

    def _write_block(self) -> None:
        if not self._block.count:
            return
        self._write_sync()
        parts = [encode_vlong(self._block.count)]
        for section in self._block.sections():
            compressed = self._compress(section)
            parts += [encode_vlong(len(compressed)), compressed]
        self._write(b"".join(parts))
        self._block = _Block()

    def _write_sync(self) -> None:
        self._write(struct.pack(">i", SYNC_ESCAPE) + self._sync_marker)
        self._last_sync = self.bytes_written

    def _write(self, data: bytes) -> None:
        self._out.write(data)
        self.bytes_written += len(data)


class _Input:
    """Exact reads from a file object, tracking the offset so errors can say where."""

    def __init__(self, fileobj: BinaryIO) -> None:
        self._in = fileobj
        self.offset = 0

    def read(self, size: int, what: str, eof_ok: bool = False) -> bytes:
        """Read exactly `size` bytes of `what`; b"" only at a clean end when eof_ok."""
        if size < 0:
            raise ValueError(f"corrupt SequenceFile: negative size {size} for {what} "
                             f"at byte {self.offset}")
        chunks, missing = [], size
        while missing:
            chunk = self._in.read(missing)
            if not chunk:
                break
            chunks.append(chunk)
            missing -= len(chunk)
        data = b"".join(chunks)
        if missing and not (eof_ok and not data):
            raise ValueError(f"truncated SequenceFile: {what} at byte {self.offset} needs "
                             f"{size} bytes, only {len(data)} left")
        self.offset += len(data)
        return data

    def read_int(self, what: str) -> int:
        return struct.unpack(">i", self.read(4, what))[0]

    def read_vlong(self, what: str) -> int:
        first = self.read(1, what)
        return decode_vlong(first + self.read(_vlong_size(first[0]) - 1, what))[0]

    def read_text(self, what: str) -> str:
        return self.read(self.read_vlong(what), what).decode()


class SequenceFileReader:
    """Iterates the (key, value) records of a SequenceFile, block by block: keys as bytes
    (BytesWritable) or int (LongWritable), values as bytes. Reads uncompressed and
    block-compressed files with DefaultCodec or GzipCodec, from Hadoop or from
    SequenceFileWriter. Raises ValueError, naming the byte offset, on anything malformed."""

    def __init__(self, fileobj: BinaryIO) -> None:
        self._in = _Input(fileobj)
        magic = self._in.read(4, "header")
        if magic[:3] != MAGIC:
            raise ValueError(f"not a SequenceFile: magic {magic[:3]!r}, expected {MAGIC!r}")
        if magic[3] != VERSION:
            raise ValueError(f"unsupported SequenceFile version {magic[3]}, expected {VERSION}")
        self.key_class = self._in.read_text("key class")
        self.value_class = self._in.read_text("value class")
        for name in (self.key_class, self.value_class):
            if name not in KEY_CLASSES:
                raise ValueError(f"unsupported Writable class {name}")
        compressed, block_compressed = self._in.read(2, "compression flags")
        if compressed and not block_compressed:
            raise ValueError("record-compressed SequenceFiles are not supported")
        self.codec: str | None = self._in.read_text("codec class") if compressed else None
        if self.codec is not None and self.codec not in COMPRESSIONS.values():
            raise ValueError(f"unsupported codec {self.codec}")
        self.metadata = {self._in.read_text("metadata key"): self._in.read_text("metadata value")
                         for _ in range(self._in.read_int("metadata count"))}
        self.sync_marker = self._in.read(SYNC_SIZE, "sync marker")

    def __iter__(self) -> Iterator[tuple[Key, Key]]:
        if self.codec is None:
            yield from self._records()
        else:
            while (block := self._read_block()) is not None:
                yield from block

    def _records(self) -> Iterator[tuple[Key, Key]]:
        while True:
            start = self._in.offset
            head = self._in.read(4, "record length", eof_ok=True)
            if not head:
                return
            length = struct.unpack(">i", head)[0]
            if length == SYNC_ESCAPE:
                self._check_sync(start)
                continue
            key_length = self._in.read_int("key length")
            if not 0 <= key_length <= length:
                raise ValueError(f"corrupt record at byte {start}: key length {key_length}, "
                                 f"record length {length}")
            payload = self._in.read(length, "record")
            yield self._decode(payload[:key_length], payload[key_length:], start)

    def _read_block(self) -> list[tuple[Key, Key]] | None:
        """The records of the next block, or None at the end of the file."""
        start = self._in.offset
        escape = self._in.read(4, "block sync escape", eof_ok=True)
        if not escape:
            return None
        if struct.unpack(">i", escape)[0] != SYNC_ESCAPE:
            raise ValueError(f"corrupt block at byte {start}: no sync escape")
        self._check_sync(start)
        count = self._in.read_vlong("block record count")
        names = ("key lengths", "keys", "value lengths", "values")
        key_lengths, keys, value_lengths, values = (self._read_section(n, start) for n in names)
        try:
            key_sizes = _split_lengths(key_lengths, count)
            value_sizes = _split_lengths(value_lengths, count)
        except ValueError as exc:
            raise ValueError(f"corrupt block at byte {start}: bad length section ({exc})") from None
        if sum(key_sizes) != len(keys) or sum(value_sizes) != len(values):
            raise ValueError(f"corrupt block at byte {start}: lengths do not match the data")
        key_chunks, value_chunks = _split(keys, key_sizes), _split(values, value_sizes)
        return [self._decode(key, value, start) for key, value in zip(key_chunks, value_chunks)]

    def _read_section(self, name: str, block_start: int) -> bytes:
        compressed = self._in.read(self._in.read_vlong(f"{name} length"), name)
        try:
            return _decompress(self.codec, compressed)
        except (ValueError, zlib.error, _CramjamError) as exc:
            raise ValueError(f"cannot decompress {name} of the block at byte {block_start}: "
                             f"{exc}") from None

    def _check_sync(self, start: int) -> None:
        if self._in.read(SYNC_SIZE, "sync marker") != self.sync_marker:
            raise ValueError(f"corrupt SequenceFile: wrong sync marker at byte {start}")

    def _decode(self, key: bytes, value: bytes, start: int) -> tuple[Key, Key]:
        try:
            return _deserialize(self.key_class, key), _deserialize(self.value_class, value)
        except ValueError as exc:
            raise ValueError(f"corrupt record at byte {start}: {exc}") from None


try:  # what a damaged Snappy chunk raises
    from cramjam import DecompressionError as _CramjamError
except ImportError:  # cramjam is pinned; a reader without it reads every zlib codec
    class _CramjamError(Exception):
        pass


def _split_lengths(data: bytes, count: int) -> list[int]:
    """`count` vints from `data`, which must hold exactly those."""
    lengths, pos = [], 0
    for _ in range(count):
        length, pos = decode_vlong(data, pos)
        if length < 0:
            raise ValueError(f"negative length {length}")
        lengths.append(length)
    if pos != len(data):
        raise ValueError(f"{len(data) - pos} bytes after {count} lengths")
    return lengths


def _split(data: bytes, sizes: list[int]) -> Iterator[bytes]:
    pos = 0
    for size in sizes:
        yield data[pos:pos + size]
        pos += size
