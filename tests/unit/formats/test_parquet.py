

def test_parquet_files_are_replayable_like_msgpack_sequencefiles():
    from kafka_archive import formats

    assert formats.replayable({"kind": "parquet"})
    assert formats.replayable({"kind": "sequencefile", "key": "msgpack"})
    assert not formats.replayable({"kind": "sequencefile", "key": "offset"})
    assert not formats.replayable({"kind": "text"}) and not formats.replayable({"kind": "baldr"})


def _kv_file(tmp_path, first: int, count: int, value: bytes) -> bytes:
    from kafka_archive.formats.parquet import KeyValueWriter
    from kafka_archive.formats.records import Record

    path = tmp_path / f"0_3_{first:020d}.parquet"
    with open(path, "wb") as out:
        writer = KeyValueWriter(out, {"topic": "t"}, path.name)
        for offset in range(first, first + count):
            writer.append(Record(offset, f"k{offset}".encode(), value, 1_800_000_000_000,
                                 [("h", b"x")]))
        writer.close()
    return path.read_bytes()


def test_a_concatenation_streams_row_groups_and_keeps_rows_order_and_bytes(tmp_path, monkeypatch):
    """Issue 56, defect 5: inputs read a row group at a time, written in row groups of
    about ROW_GROUP_BYTES: the same rows in the same order, filtered by `below`, and the
    same bytes for the same inputs."""
    import io

    import pyarrow.parquet as pq

    from kafka_archive.formats import parquet

    monkeypatch.setattr(parquet, "ROW_GROUP_BYTES", 40_000)
    inputs = [_kv_file(tmp_path, i * 50, 50, bytes([i]) * 300) for i in range(6)]
    outs = [io.BytesIO(), io.BytesIO()]
    for out in outs:
        rows, _ = parquet.concatenate(iter(inputs), out, parquet.below(280))
        assert rows == 280
    assert outs[0].getvalue() == outs[1].getvalue()
    written = pq.ParquetFile(io.BytesIO(outs[0].getvalue()))
    assert written.num_row_groups > 1
    offsets = written.read().column("kafka").combine_chunks().field("offset").to_pylist()
    assert offsets == list(range(280))
