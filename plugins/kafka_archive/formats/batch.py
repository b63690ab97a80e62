"""Consecutive records of one Kafka partition as Arrow columns (what the job's Kafka reader,
archive.source, builds from librdkafka's messages), and their encodings for a whole batch
at once.

The per-record path builds a Python object, a msgpack map and a few small byte strings
per message; at 1 KiB messages that costs more than reading them. Here every encoding is
computed from the column buffers with numpy and pyarrow's kernels, so the cost per message
is a few bytes of vectorized work and one memory copy. The bytes are exactly those of the
per-record code (records.encode_key, the SequenceFile writables, Hadoop's vints):
tests/unit/archive/test_output_bytes.py compares both paths and golden checksums.

Variable-length fields are built in two steps: the small fixed-width parts (a field
number, a type tag, a big-endian length or integer) as a 2-D byte array with a mask of
the bytes each record keeps, compacted into a binary array; then pyarrow's
binary_join_element_wise concatenates those with the key, value or header bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafka_archive.formats.records import Record

HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


@dataclass(frozen=True)
class Batch:
    """Records in offset order. key/value: binary, null when the message has none (a null
    value is a tombstone); headers: list<struct<key: string, value: binary>>, null or empty
    when there are none."""
    offset: np.ndarray        # int64
    key: pa.Array
    value: pa.Array
    timestamp_ms: np.ndarray  # int64
    headers: pa.Array

    @classmethod
    def from_arrow(cls, batch: pa.RecordBatch) -> Batch:
        column = batch.column
        headers = column("headers")
        if pa.types.is_null(headers.type):  # a batch built without Spark's schema
            headers = headers.cast(HEADER_TYPE)
        return cls(_int64(column("offset")), _binary(column("key")), _binary(column("value")),
                   _int64(column("timestamp_ms")), headers)

    @classmethod
    def of_records(cls, records: list[Record]) -> Batch:
        """Records read back from an archived file, as a batch."""
        return cls(np.array([r.offset for r in records], np.int64),
                   binary_array([r.key for r in records]), binary_array([r.value for r in records]),
                   np.array([r.timestamp_ms for r in records], np.int64),
                   headers_array([r.headers for r in records]))

    def merged(self, other: Batch) -> Batch:
        """Both batches' records in one, in offset order (their offsets are distinct)."""
        offsets = np.concatenate([self.offset, other.offset])
        order = np.argsort(offsets, kind="stable")
        take = pa.array(order)
        return Batch(offsets[order], pa.concat_arrays([self.key, other.key]).take(take),
                     pa.concat_arrays([self.value, other.value]).take(take),
                     np.concatenate([self.timestamp_ms, other.timestamp_ms])[order],
                     pa.concat_arrays([self.headers, other.headers]).take(take))

    def __len__(self) -> int:
        return len(self.offset)

    def slice(self, start: int, stop: int) -> Batch:
        n = stop - start
        return Batch(self.offset[start:stop], self.key.slice(start, n),
                     self.value.slice(start, n), self.timestamp_ms[start:stop],
                     self.headers.slice(start, n))

    def payload_sizes(self) -> np.ndarray:
        """len(key or b"") + len(value or b"") per record."""
        return lengths(self.key) + lengths(self.value)

    def header_counts(self) -> np.ndarray:
        return _numpy(pc.fill_null(pc.list_value_length(self.headers), 0)).astype(np.int64)

    def records(self) -> Iterator[Record]:
        """One Record per message, for the writers that take them one at a time."""
        keys, values, headers = (self.key.to_pylist(), self.value.to_pylist(),
                                 self.headers.to_pylist())
        for i in range(len(self)):
            yield Record(int(self.offset[i]), keys[i], values[i], int(self.timestamp_ms[i]),
                         [(h["key"], h["value"]) for h in headers[i] or ()])


def binary_array(items: list) -> pa.Array:
    """A binary array of Python bytes (None: null), built from one joined buffer and the
    lengths: a copy of the bytes, no per-item conversion (and pa.array's look for pandas
    types, which imports pandas into every Spark worker)."""
    n = len(items)
    validity = None
    if None in items:
        valid = np.fromiter((item is not None for item in items), bool, n)
        validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
        items = [item or b"" for item in items]
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(np.fromiter(map(len, items), np.int64, n), out=offsets[1:])
    if offsets[-1] >= 2**31:  # beyond binary's int32 offsets (a batch is far smaller)
        raise ValueError(f"{offsets[-1]} bytes do not fit one binary array")
    return pa.Array.from_buffers(pa.binary(), n, [validity, pa.py_buffer(offsets.astype(np.int32)),
                                                  pa.py_buffer(b"".join(items))])


def headers_array(headers: list) -> pa.Array:
    """HEADER_TYPE from librdkafka's headers: a list of (name, value) pairs per record,
    or None; a record without headers gets an empty list."""
    counts = np.fromiter((len(h) if h else 0 for h in headers), np.int64, len(headers))
    offsets = np.zeros(len(headers) + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    pairs = [pair for h in headers if h for pair in h]
    names = binary_array([name.encode() for name, _ in pairs]).view(pa.string())
    values = binary_array([value for _, value in pairs])
    entries = pa.StructArray.from_arrays([names, values], fields=list(HEADER_TYPE.value_type))
    return pa.Array.from_buffers(HEADER_TYPE, len(headers), [None, pa.py_buffer(offsets)],
                                 children=[entries])


def first_header_values(b: Batch, name: str) -> tuple[list[bytes | None], np.ndarray]:
    """The value of each record's first header called `name`, as (distinct values, index
    of each record's value in them): index 0, value None, for records without one."""
    codes = np.zeros(len(b), np.int64)
    flat = pc.list_flatten(b.headers)
    matches = np.flatnonzero(_numpy(pc.equal(pc.struct_field(flat, "key"), name)))
    if not len(matches):
        return [None], codes
    parents = _numpy(pc.list_parent_indices(b.headers))[matches]
    records, first = np.unique(parents, return_index=True)  # parents ascend: first per record
    values = pc.struct_field(flat, "value").take(pa.array(matches[first]))
    encoded = values.dictionary_encode(null_encoding="encode")
    codes[records] = _numpy(encoded.indices).astype(np.int64) + 1
    return [None, *encoded.dictionary.to_pylist()], codes


def msgpack_keys(b: Batch) -> pa.Array:
    """records.encode_key of every record (no quarantine reason): the map {1: offset,
    3: timestamp, 2: key if any, 4: headers if any, 5: True if a tombstone}, in that order."""
    n = len(b)
    has_key = _numpy(b.key.is_valid())
    header_counts = b.header_counts()
    tombstone = _numpy(b.value.is_null())
    fields = 2 + has_key.astype(np.int64) + (header_counts > 0) + tombstone
    head = np.empty((n, 2), np.uint8)
    head[:, 0] = 0x80 | fields  # fixmap
    head[:, 1] = 1
    ts_field = np.full((n, 1), 3, np.uint8)
    off_rows, off_keep = _msgpack_ints(b.offset)
    ts_rows, ts_keep = _msgpack_ints(b.timestamp_ms)
    fixed = _compact(np.hstack([head, off_rows, ts_field, ts_rows]),
                     np.hstack([np.ones((n, 2), bool), off_keep, np.ones((n, 1), bool), ts_keep]))
    key_part = pc.binary_join_element_wise(_tagged(2, _bin_headers(lengths(b.key))), b.key, b"")
    parts = [fixed, key_part]
    if header_counts.any():
        parts.append(_msgpack_headers(b.headers, header_counts))
    if tombstone.any():
        parts.append(pc.if_else(pa.array(tombstone), pa.scalar(b"\x05\xc3", pa.binary()),
                                pa.scalar(None, pa.binary())))
    return pc.binary_join_element_wise(*parts, b"", null_handling="skip")


def _msgpack_headers(headers: pa.Array, counts: np.ndarray) -> pa.Array:
    """Field 4 of each record with headers (null for the others): an array of
    [name (str), value (bin, or nil)] pairs."""
    flat = pc.list_flatten(headers)
    names = _binary(pc.struct_field(flat, "key"))
    values = pc.struct_field(flat, "value")
    name_head = _compact(*_tag_and_length(lengths(names), _STR_TAGS, pair=True))
    value_head = pc.if_else(values.is_null(), pa.scalar(b"\xc0", pa.binary()),
                            _bin_headers(lengths(values)))
    pairs = pc.binary_join_element_wise(name_head, names, value_head,
                                        pc.fill_null(values, b""), b"")
    offsets = np.zeros(len(counts) + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    joined = pc.binary_join(pa.ListArray.from_arrays(pa.array(offsets), pairs), b"")
    field = pc.binary_join_element_wise(_tagged(4, _compact(*_tag_and_length(counts, _ARRAY_TAGS))),
                                        joined, b"")
    return pc.if_else(pa.array(counts > 0), field, pa.scalar(None, pa.binary()))


# msgpack's length-prefixed types: (largest length, tag or None when the length is in the
# tag, length bytes); the first that fits is used, as msgpack-python does
_BIN_TAGS = ((0xFF, 0xC4, 1), (0xFFFF, 0xC5, 2), (0xFFFFFFFF, 0xC6, 4))
_STR_TAGS = ((31, 0xA0, 0), (0xFF, 0xD9, 1), (0xFFFF, 0xDA, 2), (0xFFFFFFFF, 0xDB, 4))
_ARRAY_TAGS = ((15, 0x90, 0), (0xFFFF, 0xDC, 2), (0xFFFFFFFF, 0xDD, 4))


def _bin_headers(sizes: np.ndarray) -> pa.Array:
    return _compact(*_tag_and_length(sizes, _BIN_TAGS))


def _tag_and_length(sizes: np.ndarray, tags, pair: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Rows [0x92 if pair] tag, 4-byte big-endian length, and which bytes to keep: a tag
    with zero length bytes holds the length in its low bits (fixstr, fixarray)."""
    n = len(sizes)
    rows = np.zeros((n, 5), np.uint8)
    rows[:, 1:] = sizes.astype(">u4").view(np.uint8).reshape(n, 4)
    width = np.full(n, -1)
    for limit, tag, size in reversed(tags):
        fits = sizes <= limit
        width[fits] = size
        rows[fits, 0] = tag | (sizes[fits] if size == 0 else 0)
    if (width < 0).any():
        raise ValueError("a length beyond 4 GiB does not fit msgpack")
    keep = np.ones((n, 5), bool)
    keep[:, 1:] = np.arange(4) >= 4 - width[:, None]
    if pair:
        rows = np.hstack([np.full((n, 1), 0x92, np.uint8), rows])
        keep = np.hstack([np.ones((n, 1), bool), keep])
    return rows, keep


def _msgpack_ints(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """msgpack-python's encoding of int64s as rows of 9 bytes and which of them to keep:
    fixint in one byte, else the smallest of uint 8/16/32/64 (non-negative) or int
    8/16/32/64 (negative), big-endian."""
    n = len(x)
    rows = np.empty((n, 9), np.uint8)
    rows[:, 1:] = x.astype(">i8").view(np.uint8).reshape(n, 8)
    fix = (x >= -32) & (x < 128)
    conditions = [fix, x < -(2**31), x < -(2**15), x < -(2**7), x < 0,
                  x < 2**8, x < 2**16, x < 2**32]
    width = np.select(conditions, [0, 8, 4, 2, 1, 1, 2, 4], 8)
    tag = np.select(conditions, [0, 0xD3, 0xD2, 0xD1, 0xD0, 0xCC, 0xCD, 0xCE], 0xCF)
    rows[:, 0] = np.where(fix, rows[:, 8], tag)
    keep = np.ones((n, 9), bool)
    keep[:, 1:] = np.arange(8) >= 8 - width[:, None]
    return rows, keep


def _tagged(field: int, values: pa.Array) -> pa.Array:
    return pc.binary_join_element_wise(pa.scalar(bytes([field]), pa.binary()), values, b"")


# --- Hadoop's encodings -----------------------------------------------------------------

def vlongs(x: np.ndarray) -> bytes:
    """WritableUtils.writeVLong of each non-negative int64, concatenated."""
    if len(x) and x.min() < 0:
        raise ValueError("vlongs encodes lengths, which are never negative")
    n = len(x)
    rows = np.empty((n, 9), np.uint8)
    rows[:, 1:] = x.astype(">i8").view(np.uint8).reshape(n, 8)
    small = x <= 127
    size = np.select([small, x < 2**8, x < 2**16, x < 2**24, x < 2**32], [0, 1, 2, 3, 4],
                     (np.floor(np.log2(np.maximum(x, 1))).astype(np.int64) // 8) + 1)
    rows[:, 0] = np.where(small, rows[:, 8], (-112 - size) & 0xFF)
    keep = np.ones((n, 9), bool)
    keep[:, 1:] = np.arange(8) >= 8 - size[:, None]
    return rows[keep].tobytes()


def be32_prefixed(values: pa.Array, sizes: np.ndarray) -> pa.Array:
    """BytesWritable serialization: each value after its 4-byte big-endian length."""
    return pc.binary_join_element_wise(_fixed(sizes.astype(">i4")), values, b"")


def be64(x: np.ndarray) -> pa.Array:
    """LongWritable serialization: 8 bytes big-endian each."""
    return _fixed(x.astype(">i8"))


def data_bytes(values: pa.Array, start: int = 0, stop: int | None = None) -> memoryview:
    """The concatenated bytes of values[start:stop] of a binary array without nulls."""
    stop = len(values) if stop is None else stop
    offsets = np.frombuffer(values.buffers()[1], np.int32, len(values) + 1, values.offset * 4)
    data = values.buffers()[2]
    if data is None:
        return memoryview(b"")
    return memoryview(data)[offsets[start]:offsets[stop]]


def lengths(values: pa.Array) -> np.ndarray:
    """Byte length of each binary value, 0 for null."""
    return _numpy(pc.fill_null(pc.binary_length(values), 0)).astype(np.int64)


# --- building arrays ----------------------------------------------------------------------

def _compact(rows: np.ndarray, keep: np.ndarray) -> pa.Array:
    """A binary array whose element i is rows[i][keep[i]]."""
    sizes = keep.sum(axis=1)
    offsets = np.zeros(len(rows) + 1, np.int32)
    np.cumsum(sizes, out=offsets[1:])
    return pa.Array.from_buffers(pa.binary(), len(rows),
                                 [None, pa.py_buffer(offsets), pa.py_buffer(rows[keep])])


def _fixed(items: np.ndarray) -> pa.Array:
    """A binary array of the raw bytes of each element of a numpy array."""
    width = items.dtype.itemsize * int(np.prod(items.shape[1:]))
    offsets = np.arange(0, (len(items) + 1) * width, width, dtype=np.int32)
    return pa.Array.from_buffers(pa.binary(), len(items),
                                 [None, pa.py_buffer(offsets), pa.py_buffer(items.tobytes())])


def _binary(column: pa.Array) -> pa.Array:
    return column if column.type == pa.binary() else column.cast(pa.binary())


def _int64(column: pa.Array) -> np.ndarray:
    return _numpy(column).astype(np.int64, copy=False)


def _numpy(array: pa.Array) -> np.ndarray:
    return array.to_numpy(zero_copy_only=False)


def be32_pairs(first: np.ndarray, second: np.ndarray) -> pa.Array:
    """Two 4-byte big-endian integers per record (an uncompressed record's lengths)."""
    return _fixed(np.stack([first, second], axis=1).astype(">i4"))


def concat(*parts: pa.Array) -> pa.Array:
    """Element-wise concatenation of binary arrays of the same length."""
    return pc.binary_join_element_wise(*parts, b"")
