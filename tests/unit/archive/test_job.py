import pytest

from kafka_archive.archive import job
from kafka_archive.plan.planning import Plan, Slice
from kafka_archive.storage import Storage


def test_each_slice_is_a_task_until_there_are_many_more_than_spark_runs_at_once():
    few = [Slice("t", p, 0, 100 * (p + 1), 1 << 20) for p in range(8)]
    assert sorted(len(t) for t in job.task_slices(few, parallelism=2)) == [1] * 8
    many = [Slice("t", p, 0, 1 + p % 7, 1 << 20) for p in range(10_000)]
    tasks = job.task_slices(many, parallelism=2)
    assert len(tasks) == 10_000 // job.SLICES_PER_TASK
    assert sorted((s.topic, s.partition) for t in tasks for s in t) == \
        sorted((s.topic, s.partition) for s in many)  # each slice in exactly one task
    loads = [sum(s.end - s.start for s in t) for t in tasks]
    assert max(loads) - min(loads) <= 7  # balanced by offsets, longest first


def _task(tmp_path):
    from kafka_archive import config

    path = tmp_path / "kafka-archive.yaml"
    path.write_text(f"kafka: {{bootstrap_servers: b:9092}}\narchive_root: file://{tmp_path}/archive\n")
    plan = Plan(group="backup", run_id="r", created_at="", bootstrap="b", generation=1,
                format={"kind": "sequencefile", "key": "msgpack", "compression": "default"},
                slices=(Slice("t", 0, 0, 3, 1 << 20), Slice("t", 1, 0, 3, 1 << 20)),
                token_versions={}, base_offsets={})
    return job.ArchiveTask(config.load(path), plan), plan


def _batch(offsets: range):
    import numpy as np
    import pyarrow as pa

    from kafka_archive.formats.batch import HEADER_TYPE, Batch

    n = len(offsets)
    return Batch(np.array(offsets, np.int64), pa.array([None] * n, pa.binary()),
                 pa.array([b"v%d" % o for o in offsets], pa.binary()),
                 np.array([1_795_300_000_000 + o for o in offsets], np.int64),
                 pa.array([None] * n, HEADER_TYPE))


def test_slice_temp_files_live_in_sparks_local_dir_and_go_away(tmp_path, monkeypatch):
    scratch = tmp_path / "spark-local"
    scratch.mkdir()
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(scratch))
    task, plan = _task(tmp_path)
    storage = Storage.from_environment()
    seen, closed = [], []

    def failing_read():
        try:
            yield _batch(range(2))
            seen.extend(scratch.iterdir())  # the slice, still open: its temp file
            raise OSError("the Kafka fetch failed mid-slice")
        finally:
            closed.append(True)

    with pytest.raises(OSError, match="mid-slice"):
        task.archive(plan.slices[1], failing_read(), storage)
    assert [p.name.startswith("kafka-archive-") for p in seen] == [True]
    assert list(scratch.iterdir()) == [] and closed == [True]  # nor the failed slice's

    row = task.archive(plan.slices[0], iter([_batch(range(3))]), storage)
    assert row["records"] == 3 and row["gaps"] == [] and list(scratch.iterdir()) == []
    assert len(list((tmp_path / "archive" / "backup" / "t").rglob("*.seq"))) == 1


def test_a_slice_without_any_message_gets_a_row_whose_gap_is_the_whole_range(tmp_path):
    # e.g. [41, 42) holds only a transaction marker: the reader yields no message
    task, plan = _task(tmp_path)
    row = task.archive(Slice("t", 0, 41, 42, 1 << 20), iter([]), Storage.from_environment())
    assert (row["records"], row["gaps"], row["url"], row["files"]) == (0, [[41, 42]], None, [])


def test_reading_stops_at_the_slice_cap_and_the_read_is_closed(tmp_path):
    task, plan = _task(tmp_path)
    closed = []

    def endless():
        try:
            for start in range(0, 10_000, 10):
                yield _batch(range(start, start + 10))
        finally:
            closed.append(True)

    row = task.archive(Slice("t", 0, 0, 10_000, 25), endless(), Storage.from_environment())
    assert row["cut"] and row["end"] == row["records"] == 11 and closed == [True]  # 2+2+...+3 bytes
