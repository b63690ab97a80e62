

def test_parquet_files_are_replayable_like_msgpack_sequencefiles():
    from kafka_archive import formats

    assert formats.replayable({"kind": "parquet"})
    assert formats.replayable({"kind": "sequencefile", "key": "msgpack"})
    assert not formats.replayable({"kind": "sequencefile", "key": "offset"})
    assert not formats.replayable({"kind": "text"}) and not formats.replayable({"kind": "baldr"})
