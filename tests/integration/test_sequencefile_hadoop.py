"""Hadoop's own SequenceFile reader (through PySpark) reads what SequenceFileWriter writes,
and SequenceFileReader reads what Hadoop writes."""

import pytest

from kafka_archive.formats.sequencefile import (
    BYTES_WRITABLE, LONG_WRITABLE, SequenceFileReader, SequenceFileWriter, sync_marker_for)

MODES = ["none", "block-default", "block-gzip", "block-fast", "block-snappy"]
# "bigger" spans several Snappy chunks of a block section
RECORDS = [(b"key-0", b""), (b"", b"empty key"), (b"bin", bytes(range(256))),
           (b"lines", b"one\ntwo\r\nthree\n"), (b"big", b"x" * 100_000),
           (b"bigger", bytes(range(256)) * 1600)]


def write_file(path, records, compression, key_class=BYTES_WRITABLE, block_size=1_000_000):
    marker = sync_marker_for(path.name)
    with open(path, "wb") as out, SequenceFileWriter(
            out, key_class, BYTES_WRITABLE, compression, marker, block_size) as writer:
        for key, value in records:
            writer.append_record(key, value)


def hadoop_read(sc, path, key_class=BYTES_WRITABLE) -> list:
    pairs = sc.sequenceFile(str(path), key_class, BYTES_WRITABLE).collect()
    return [(key if isinstance(key, int) else bytes(key), bytes(value)) for key, value in pairs]


@pytest.mark.parametrize("compression", MODES)
def test_hadoop_reads_bytes_keys(sc, tmp_path, compression):
    path = tmp_path / f"{compression}.seq"
    write_file(path, RECORDS, compression)
    assert hadoop_read(sc, path) == RECORDS


@pytest.mark.parametrize("compression", MODES)
def test_hadoop_reads_long_keys(sc, tmp_path, compression):
    records = [(offset, value) for offset, (_, value) in zip([0, 1, -1, 2**40, 2**63 - 1], RECORDS)]
    path = tmp_path / f"long-{compression}.seq"
    write_file(path, records, compression, key_class=LONG_WRITABLE)
    assert hadoop_read(sc, path, LONG_WRITABLE) == records


@pytest.mark.parametrize("compression", MODES)
def test_hadoop_reads_several_blocks(sc, tmp_path, compression):
    records = [(f"key-{i}".encode(), f"value {i}\n".encode() * 20) for i in range(300)]
    path = tmp_path / f"blocks-{compression}.seq"
    write_file(path, records, compression, block_size=25_000)  # 64 KB of keys+values: 3 blocks
    assert hadoop_read(sc, path) == records


@pytest.mark.parametrize("codec", [None, "org.apache.hadoop.io.compress.DefaultCodec",
                                   "org.apache.hadoop.io.compress.GzipCodec",
                                   "org.apache.hadoop.io.compress.SnappyCodec"])
def test_reader_reads_files_hadoop_wrote(sc, tmp_path, codec):
    records = [(f"key-{i}".encode(), bytes(range(i % 256))) for i in range(3000)]
    out = tmp_path / "hadoop"
    # Spark asks Hadoop for block compression whenever a codec is given.
    sc.parallelize([(bytearray(k), bytearray(v)) for k, v in records], 1).saveAsSequenceFile(
        str(out), compressionCodecClass=codec)
    with open(out / "part-00000", "rb") as file:
        reader = SequenceFileReader(file)
        assert (reader.key_class, reader.codec) == (BYTES_WRITABLE, codec)
        assert list(reader) == records
