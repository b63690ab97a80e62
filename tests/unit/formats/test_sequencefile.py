import io
import struct

import pytest

from kafka_archive.formats import sequencefile as seq
from kafka_archive.formats.sequencefile import (
    COMPRESSIONS, BYTES_WRITABLE, LONG_WRITABLE, SYNC_INTERVAL, SequenceFileReader, SequenceFileWriter,
    decode_vlong, encode_vlong, sync_marker_for)

MARKER = sync_marker_for("test-file")
MODES = list(COMPRESSIONS)

AWKWARD_VALUES = [b"", bytes(range(256)), b"line one\nline two\r\n", b"\x00" * 1000, b"x"]


def write(records, key_class=BYTES_WRITABLE, compression="block-default", block_size=1_000_000,
          marker=MARKER, sync_interval=2000) -> bytes:
    """Small sync interval by default: the format tests want sync points in small files."""
    out = io.BytesIO()
    with SequenceFileWriter(out, key_class, BYTES_WRITABLE, compression, marker,
                            block_size, sync_interval) as writer:
        for key, value in records:
            writer.append_record(key, value)
    return out.getvalue()


def read(data: bytes) -> list:
    return list(SequenceFileReader(io.BytesIO(data)))


def sync_points(data: bytes, marker=MARKER) -> int:
    """Sync escapes + marker after the header (which holds the marker once, unescaped)."""
    return data.count(struct.pack(">i", -1) + marker)


@pytest.mark.parametrize("vlong, encoded", [
    (0, b"\x00"), (1, b"\x01"), (127, b"\x7f"), (-1, b"\xff"), (-112, b"\x90"),
    (128, b"\x8f\x80"), (255, b"\x8f\xff"), (256, b"\x8e\x01\x00"), (-113, b"\x87\x70"),
    (-256, b"\x87\xff"), (-257, b"\x86\x01\x00"), (1_000_000, b"\x8d\x0f\x42\x40"),
    (2**63 - 1, b"\x88" + b"\x7f" + b"\xff" * 7), (-(2**63), b"\x80" + b"\x7f" + b"\xff" * 7),
])
def test_vlong_matches_hadoop_writable_utils(vlong, encoded):
    assert encode_vlong(vlong) == encoded
    assert decode_vlong(b"junk" + encoded + b"more", 4) == (vlong, 4 + len(encoded))


def test_vlong_round_trips_around_every_length_boundary():
    edges = [2**bits + delta for bits in range(0, 63, 4) for delta in (-1, 0, 1)]
    for value in edges + [-v for v in edges] + [-(2**63), 2**63 - 1]:
        assert decode_vlong(encode_vlong(value)) == (value, len(encode_vlong(value)))
    with pytest.raises(ValueError, match="Java long"):
        encode_vlong(2**63)
    with pytest.raises(ValueError, match="needs 3 bytes"):
        decode_vlong(b"\x8e\x01")


@pytest.mark.parametrize("compression", MODES)
def test_bytes_keys_round_trip(compression):
    records = [(bytes([i % 256]) * (i % 7), value) for i, value in enumerate(AWKWARD_VALUES)]
    records.append((b"", b""))
    assert read(write(records, compression=compression)) == records


@pytest.mark.parametrize("compression", MODES)
def test_long_keys_round_trip(compression):
    records = [(key, value) for key, value in zip([0, -1, 42, 2**63 - 1, -(2**63)], AWKWARD_VALUES)]
    data = write(records, LONG_WRITABLE, compression)
    reader = SequenceFileReader(io.BytesIO(data))
    assert (reader.key_class, reader.value_class) == (LONG_WRITABLE, BYTES_WRITABLE)
    assert list(reader) == records


@pytest.mark.parametrize("compression", MODES)
def test_many_records_span_blocks_and_sync_points(compression):
    records = [(f"key-{i}".encode(), f"value {i}\n".encode() * (i % 5) * 20) for i in range(2000)]
    data = write(records, compression=compression, block_size=1000, sync_interval=SYNC_INTERVAL)
    assert read(data) == records
    if compression == "none":
        assert len(data) // SYNC_INTERVAL >= 5  # enough data to need several sync points
        assert sync_points(data) >= len(data) // SYNC_INTERVAL - 1
    else:
        assert sync_points(data) > 20  # one per block


@pytest.mark.parametrize("compression", MODES)
def test_zero_records_is_a_header_only_file(compression):
    data = write([], compression=compression)
    assert data.startswith(b"SEQ\x06") and data.endswith(MARKER)
    assert sync_points(data) == 0
    assert read(data) == []


def test_header_layout():
    data = write([], compression="block-gzip")
    codec = b"org.apache.hadoop.io.compress.GzipCodec"
    text = bytes([len(BYTES_WRITABLE)]) + BYTES_WRITABLE.encode()  # Text: vint length + UTF-8
    expected = (b"SEQ\x06" + text + text + b"\x01\x01" + bytes([len(codec)]) + codec
                + b"\x00\x00\x00\x00" + MARKER)  # compressed, block-compressed, codec, no metadata
    assert data == expected
    reader = SequenceFileReader(io.BytesIO(data))
    assert (reader.codec, reader.sync_marker, reader.metadata) == (codec.decode(), MARKER, {})


def test_uncompressed_record_layout():
    data = write([(b"k", b"vv")], compression="none")
    header_length = len(write([], compression="none"))
    # record length, key length, BytesWritable key (length + bytes), BytesWritable value
    assert data[header_length:] == (struct.pack(">ii", 5 + 6, 5)
                                    + b"\x00\x00\x00\x01k" + b"\x00\x00\x00\x02vv")


def test_same_records_and_marker_give_identical_bytes():
    records = [(f"k{i}".encode(), bytes(range(i % 256))) for i in range(500)]
    for compression in MODES:
        first = write(records, compression=compression, block_size=2000)
        assert write(records, compression=compression, block_size=2000) == first
        assert write(records, compression=compression, block_size=2000,
                     marker=sync_marker_for("other")) != first


# compresses 12,000 small sections as `fast` blocks and prints their digest: in a fresh
# process each, whose address layout and heap leftovers differ, as another worker's do
_FAST_DIGEST = """
import hashlib, random
from kafka_archive.formats.sequencefile import _compressor
compress, rng, digest = _compressor("block-fast", 1), random.Random(1), hashlib.sha256()
for _ in range(12000):
    digest.update(compress(bytes(b if b < 77 else 65 for b in rng.randbytes(rng.randrange(10, 400)))))
print(digest.hexdigest())
"""


def test_fast_compression_gives_the_same_bytes_in_every_process():
    """ISA-L's levels 1 and 2 read memory they never initialised: at level 1 nearly every
    process printed its own digest."""
    import subprocess
    import sys

    runs = [subprocess.Popen([sys.executable, "-c", _FAST_DIGEST], stdout=subprocess.PIPE,
                             text=True) for _ in range(4)]
    digests = {run.communicate()[0].strip() for run in runs}
    assert all(run.returncode == 0 for run in runs) and len(digests) == 1, digests


def test_sync_marker_for_is_md5_prefix():
    assert sync_marker_for("a") == bytes.fromhex("0cc175b9c0f1b6a831c399e269772661")
    assert len(sync_marker_for("")) == 16


def test_writer_streams_blocks_and_counts():
    out = io.BytesIO()
    writer = SequenceFileWriter(out, BYTES_WRITABLE, BYTES_WRITABLE, "block-default", MARKER, 100)
    header_length = len(out.getvalue())
    for i in range(50):
        writer.append_record(b"key", b"v" * 10)
    assert len(out.getvalue()) > header_length  # full blocks are written before close
    writer.close()
    writer.close()
    assert writer.records == 50
    assert writer.bytes_written == len(out.getvalue())
    assert not out.closed
    with pytest.raises(ValueError, match="closed"):
        writer.append_record(b"k", b"v")


def test_writer_rejects_bad_arguments():
    out = io.BytesIO()
    with pytest.raises(ValueError, match="sync marker"):
        SequenceFileWriter(out, BYTES_WRITABLE, BYTES_WRITABLE, "none", b"short")
    with pytest.raises(ValueError, match="compression"):
        SequenceFileWriter(out, BYTES_WRITABLE, BYTES_WRITABLE, "record", MARKER)
    with pytest.raises(ValueError, match="key class"):
        SequenceFileWriter(out, "org.apache.hadoop.io.Text", BYTES_WRITABLE, "none", MARKER)
    writer = SequenceFileWriter(io.BytesIO(), LONG_WRITABLE, BYTES_WRITABLE, "none", MARKER)
    with pytest.raises(TypeError, match="LongWritable needs an int"):
        writer.append_record(b"1", b"v")
    with pytest.raises(TypeError, match="BytesWritable needs bytes"):
        writer.append_record(1, "text")


@pytest.mark.parametrize("compression", MODES)
def test_truncated_file_raises_with_offset(compression):
    data = write([(f"k{i}".encode(), b"value" * i) for i in range(100)], compression=compression)
    with pytest.raises(ValueError, match=r"at byte \d+"):
        read(data[:-1])


@pytest.mark.parametrize("compression", MODES)
def test_every_cut_either_raises_value_error_or_reads_whole_records(compression):
    records = [(f"k{i}".encode(), bytes(range(i * 7 % 100))) for i in range(40)]
    data = write(records, compression=compression, block_size=300)
    assert sync_points(data) >= 1  # so some cuts fall inside a sync point
    for cut in range(len(data)):
        try:
            got = read(data[:cut])
        except ValueError:
            continue
        # A cut exactly between records (or blocks) is a valid shorter file, as for Hadoop.
        assert got == records[:len(got)]


def test_header_errors_name_the_problem():
    data = write([(b"k", b"v")])
    with pytest.raises(ValueError, match="not a SequenceFile"):
        read(b"PAR1" + data[4:])
    with pytest.raises(ValueError, match="unsupported SequenceFile version 5"):
        read(b"SEQ\x05" + data[4:])
    renamed = data.replace(b"compress.DefaultCodec", b"compress.NoSuchCodec1")
    with pytest.raises(ValueError, match="unsupported codec .*compress.NoSuchCodec1"):
        read(renamed)
    with pytest.raises(ValueError, match="truncated SequenceFile: header at byte 0"):
        read(b"SE")


@pytest.mark.parametrize("compression", MODES)
def test_wrong_sync_marker_is_corruption(compression):
    records = [(f"k{i}".encode(), b"v" * 100) for i in range(100)]
    data = bytearray(write(records, compression=compression, block_size=500))
    header_length = len(write([], compression=compression))
    position = data.index(struct.pack(">i", -1) + MARKER, header_length) + 4
    data[position] ^= 0xFF
    with pytest.raises(ValueError, match=r"wrong sync marker at byte \d+"):
        read(bytes(data))


@pytest.mark.parametrize("compression, codec", [("block-fast", seq.DEFAULT_CODEC),
                                                ("block-snappy", seq.SNAPPY_CODEC)])
def test_fast_compressions_name_the_codec_hadoop_reads_them_with(compression, codec):
    data = write([(b"k", b"v" * 1000)], compression=compression)
    reader = SequenceFileReader(io.BytesIO(data))
    assert reader.codec == codec and list(reader) == [(b"k", b"v" * 1000)]


def test_fast_deflate_is_a_zlib_stream_smaller_than_level_1_costs():
    import zlib

    values = [(b"k%d" % i, b"GET /api/v1/items/%d 200 %d ms\n" % (i, i % 97)) for i in range(5000)]
    fast, zlib6 = write(values, compression="block-fast"), write(values)
    assert read(fast) == read(zlib6) == values
    assert len(fast) < 2 * len(zlib6)  # bigger, not unboundedly
    section = seq._compressor("block-fast", 6)(b"abc" * 1000)
    assert zlib.decompress(section) == b"abc" * 1000  # what DefaultCodec's inflater reads


@pytest.mark.parametrize("size", [0, 1, seq.HADOOP_BLOCK_CHUNK, 3 * seq.HADOOP_BLOCK_CHUNK + 5])
def test_hadoop_block_framing_chunks_within_hadoops_buffer(size):
    import cramjam

    data = bytes(i % 251 for i in range(size))
    framed = seq._hadoop_blocks(data, cramjam.snappy.compress_raw)
    assert seq._hadoop_unblock(framed, cramjam.snappy.decompress_raw) == data
    chunks, pos = [], 0
    while pos < len(framed):
        total, compressed = struct.unpack_from(">ii", framed, pos) if size else (0, 0)
        chunks.append(total)
        pos += 8 + compressed if size else 4
    assert sum(chunks) == size and max(chunks) <= seq.HADOOP_BLOCK_CHUNK


def test_a_damaged_snappy_chunk_names_its_block():
    data = bytearray(write([(b"k%d" % i, b"value %d" % i * 50) for i in range(200)],
                           compression="block-snappy"))
    data[-20:-10] = b"\xff" * 10
    with pytest.raises(ValueError, match=r"cannot decompress values of the block at byte \d+"):
        read(bytes(data))
