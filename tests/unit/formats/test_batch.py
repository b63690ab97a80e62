"""Whole-batch encodings (formats.batch) give exactly the per-record bytes: msgpack keys,
Hadoop vints, SequenceFile records, blocks and sync points, audit sources."""

import io

import msgpack
import numpy as np
import pyarrow as pa
import pytest

from kafka_archive.formats import audit_counts, batch, records, sequencefile as seq

from tests.support import archive_golden  # the golden records, every encoding's edge cases

INTS = [0, 1, 31, 127, 128, 255, 256, 65_535, 65_536, 2**32 - 1, 2**32, 2**63 - 1, -1, -32,
        -33, -128, -129, -32_768, -32_769, -(2**31), -(2**31) - 1, -(2**63)]


def golden_batches(rows_per_batch=None):
    rows = archive_golden.records()
    return [batch.Batch.from_arrow(b)
            for b in archive_golden.arrow_batches(rows, rows_per_batch or archive_golden.BATCH_ROWS)]


def test_msgpack_integers_take_msgpack_pythons_smallest_encoding():
    rows, keep = batch._msgpack_ints(np.array(INTS, np.int64))
    assert batch._compact(rows, keep).to_pylist() == [msgpack.packb(i) for i in INTS]


def test_vlongs_are_hadoops():
    lengths = [0, 1, 127, 128, 255, 256, 65_535, 65_536, 2**24, 2**31 - 1, 2**32, 2**40]
    assert batch.vlongs(np.array(lengths)) == b"".join(seq.encode_vlong(n) for n in lengths)
    with pytest.raises(ValueError, match="never negative"):
        batch.vlongs(np.array([3, -1]))


@pytest.mark.parametrize("start", [0, 5])
def test_msgpack_keys_are_encode_key_of_each_record(start):
    for b in golden_batches():
        part = b.slice(start, len(b))  # a sliced batch: Arrow offsets not at zero
        assert batch.msgpack_keys(part).to_pylist() == [records.encode_key(r) for r in part.records()]


def test_first_header_values_are_the_audit_sources():
    for b in golden_batches():
        part = b.slice(3, len(b))
        values, codes = batch.first_header_values(part, archive_golden.AUDIT_HEADER)
        headers = part.headers.to_pylist()
        assert [audit_counts.source_named(values[c]) for c in codes] == \
            [audit_counts.source_of(h, archive_golden.AUDIT_HEADER) for h in headers]


@pytest.mark.parametrize("compression", list(seq.COMPRESSIONS))
@pytest.mark.parametrize("key_class", seq.KEY_CLASSES)
@pytest.mark.parametrize("block_size, sync_interval", [(1_000_000, seq.SYNC_INTERVAL), (5_000, 3_000),
                                                       (1, 1)])
def test_append_batch_writes_the_bytes_of_append_record(compression, key_class, block_size,
                                                        sync_interval):
    def writer(out):
        return seq.SequenceFileWriter(out, key_class, seq.BYTES_WRITABLE, compression, b"m" * 16,
                                      block_size, sync_interval)

    legacy = key_class == seq.LONG_WRITABLE
    one, many = io.BytesIO(), io.BytesIO()
    by_record, by_batch = writer(one), writer(many)
    for b in golden_batches(rows_per_batch=97):
        for r in b.records():
            by_record.append_record(r.offset if legacy else records.encode_key(r), r.value or b"")
        by_batch.append_batch(b.offset if legacy else batch.msgpack_keys(b), b.value)
    by_record.close()
    by_batch.close()
    assert by_batch.records == by_record.records
    assert many.getvalue() == one.getvalue()


def test_append_batch_refuses_null_bytes_keys_and_a_closed_file():
    w = seq.SequenceFileWriter(io.BytesIO(), seq.BYTES_WRITABLE, seq.BYTES_WRITABLE, "none", b"m" * 16)
    with pytest.raises(TypeError, match="BytesWritable needs bytes"):
        w.append_batch(pa.array([b"k", None]), pa.array([b"v", b"w"]))
    w.close()
    with pytest.raises(ValueError, match="closed"):
        w.append_batch(pa.array([b"k"]), pa.array([b"v"]))


@pytest.mark.parametrize("items", [[], [b"a", None, b"", b"xyz"], [None, None], [b"\x00" * 70_000] * 3])
def test_binary_array_is_pa_array_of_the_bytes(items):
    built = batch.binary_array(items)
    assert built.equals(pa.array(items, pa.binary())) and built.to_pylist() == items


def test_headers_array_holds_librdkafkas_pairs():
    headers = [None, [("a", b"1"), ("b", None)], [], [("\u00e9t\u00e9", b"")]]
    built = batch.headers_array(headers)
    assert built.type == batch.HEADER_TYPE
    assert built.to_pylist() == [[], [{"key": "a", "value": b"1"}, {"key": "b", "value": None}],
                                 [], [{"key": "\u00e9t\u00e9", "value": b""}]]
    b = batch.Batch(np.arange(4), batch.binary_array([None] * 4), batch.binary_array([b"v"] * 4),
                    np.arange(4), built)
    assert [r.headers for r in b.records()] == [[], [("a", b"1"), ("b", None)], [], [("\u00e9t\u00e9", b"")]]
    assert batch.msgpack_keys(b).to_pylist() == [records.encode_key(r) for r in b.records()]


@pytest.mark.parametrize("window_ms", [1, 1000, 3_600_000])
def test_batch_counts_are_the_per_message_counts(window_ms):
    # timestamps before 1970 too: a window number floors, as the per-message count's does
    rng = np.random.default_rng(window_ms)
    sources = ["web", "api", audit_counts.UNKNOWN_SOURCE]
    codes = rng.integers(0, len(sources), 2000)
    timestamps = rng.integers(-5_000_000, 4_000_000_000_000, 2000)
    batched, one_by_one = {}, {}
    audit_counts.count_archived_batch(batched, sources, codes, timestamps, window_ms)
    for code, ts in zip(codes.tolist(), timestamps.tolist()):
        audit_counts.count_archived(one_by_one, sources[code], ts, window_ms)
    assert batched == one_by_one and sum(batched.values()) == 2000
