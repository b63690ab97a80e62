import pytest

from kafka_archive.archive.job import rows_for_empty_slices
from kafka_archive.commit.protocol import verify
from kafka_archive.plan.planning import Plan, Slice


def test_slice_without_any_record_still_gets_a_manifest_row_that_commits():
    # e.g. [41, 42) holds only a transaction commit marker: Spark returns no row for it
    marker_only, normal = Slice("t", 0, 41, 42, 1000), Slice("t", 1, 0, 2, 1000)
    written = [{"topic": "t", "partition": 1, "start": 0, "end": 2, "records": 2, "gaps": [],
                "cut": False, "url": "s3://b/f", "bytes": 10}]
    rows = written + rows_for_empty_slices([marker_only, normal], written)
    assert rows[1]["gaps"] == [[41, 42]] and rows[1]["url"] is None
    plan = Plan(group="backup", run_id="r", created_at="", bootstrap="b", generation=1,
                format={}, slices=(marker_only, normal), token_versions={}, base_offsets={})
    assert verify(plan, {"run_id": "r", "slices": rows}, lambda url: 10) == \
        {("t", 0): 42, ("t", 1): 2}


def _writer(tmp_path):
    from kafka_archive import config
    from kafka_archive.archive.job import SliceWriter

    path = tmp_path / "kafka-archive.yaml"
    path.write_text(f"kafka: {{bootstrap_servers: b:9092}}\narchive_root: file://{tmp_path}/archive\n")
    plan = Plan(group="backup", run_id="r", created_at="", bootstrap="b", generation=1,
                format={"kind": "sequencefile", "key": "msgpack", "compression": "default"},
                slices=(Slice("t", 0, 0, 3, 1 << 20), Slice("t", 1, 0, 3, 1 << 20)),
                token_versions={}, base_offsets={})
    return SliceWriter(config.load(path), plan)


def _batch(partition: int, offsets: range):
    import pyarrow as pa

    n = len(offsets)
    return pa.RecordBatch.from_pydict({
        "topic": ["t"] * n, "partition": [partition] * n, "offset": list(offsets),
        "key": [None] * n, "value": [b"v%d" % o for o in offsets],
        "timestamp_ms": [1_795_300_000_000 + o for o in offsets], "headers": [None] * n})


def test_slice_temp_files_live_in_sparks_local_dir_and_go_away(tmp_path, monkeypatch):
    scratch = tmp_path / "spark-local"
    scratch.mkdir()
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(scratch))
    seen = []

    def batches():
        yield _batch(0, range(3))
        seen.extend(scratch.iterdir())  # slice 0, still open: its temp file
        yield _batch(1, range(2))
        raise OSError("the Kafka fetch failed mid-slice")

    rows = _writer(tmp_path)(batches())
    assert next(rows).num_rows == 1  # slice 0 done
    with pytest.raises(OSError, match="mid-slice"):
        next(rows)
    assert [p.name.startswith("kafka-archive-") for p in seen] == [True]
    assert list(scratch.iterdir()) == []  # nor the failed slice's temp file

    rows = list(_writer(tmp_path)(iter([_batch(0, range(3)), _batch(1, range(3))])))
    assert len(rows) == 2 and list(scratch.iterdir()) == []
    assert len(list((tmp_path / "archive" / "backup" / "t").rglob("*.seq"))) == 2
