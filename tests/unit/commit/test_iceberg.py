"""A run's files into an Iceberg table, on a real pyiceberg SQL catalog (SQLite) over local
files: one snapshot per run, a commit re-run or a zombie's adds nothing, a rewind is one
snapshot (old or new, never neither), a file already in the table is refused."""

from __future__ import annotations

from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kafka_archive.commit import iceberg, table_maintenance
from kafka_archive.errors import TerminalError


@pytest.fixture
def table(tmp_path):
    return handle(tmp_path)


def handle(tmp_path):
    """A table handle of its own (as another process would have)."""
    return iceberg.open_table(iceberg.catalog("test", {
        "type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db",
        "warehouse": f"file://{tmp_path}/warehouse"}), ("archive", "events"))


def parquet(table, tmp_path, partition: int, first: int, count: int, tag: str = "") -> str:
    """A key_value file of offsets [first, first + count) of partition `partition`."""
    schema = table.schema().as_arrow()
    at = datetime(2026, 1, 1, tzinfo=timezone.utc)
    rows = [{"kafka": {"topic": "events", "partition": partition, "offset": o, "timestamp": at,
                       "timestamp_type": "CreateTime"},
             "key": None if o % 3 == 0 else f"k{o}".encode(),
             "value": f"{tag}value {o}".encode(),
             "headers": [{"name": "n", "value": str(o).encode()}] if o % 2 else []}
            for o in range(first, first + count)]
    path = tmp_path / f"1_{partition}_{first:020d}{tag}.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    return f"file://{path}"


def offsets(table, snapshot_id=None) -> list[tuple[int, int, bytes]]:
    scanned = table.scan(snapshot_id=snapshot_id).to_arrow().to_pylist()
    return sorted((r["kafka"]["partition"], r["kafka"]["offset"], r["value"]) for r in scanned)


def test_a_run_is_one_snapshot_and_a_rerun_adds_nothing(table, tmp_path):
    files = [parquet(table, tmp_path, p, 0, 10) for p in range(3)]
    first = iceberg.commit_run(table, "run-1", files, offsets="events 0-2: [0, 10)")
    assert first.summary[iceberg.RUN_ID] == "run-1"
    assert first.summary[iceberg.OFFSETS] == "events 0-2: [0, 10)"
    again = iceberg.commit_run(table, "run-1", files)  # the commit re-run after a crash
    assert again.snapshot_id == first.snapshot_id
    assert len(table.refresh().metadata.snapshots) == 1
    assert len(offsets(table)) == 30 and len(set(offsets(table))) == 30
    assert {t.file.partition[0] for t in table.scan().plan_files()} == {0, 1, 2}
    # readers prune by partition and offset: the bounds are there
    assert len(list(table.scan(row_filter="kafka.partition == 1").plan_files())) == 1


def test_a_rewind_replaces_files_in_one_snapshot_readers_see_old_or_new(table, tmp_path):
    old = [parquet(table, tmp_path, 0, 0, 10), parquet(table, tmp_path, 0, 10, 10)]
    before = iceberg.commit_run(table, "run-1", old)
    new = [parquet(table, tmp_path, 0, 0, 20, tag="again-")]  # the rewound slice, whole
    after = iceberg.commit_run(table, "run-2", new, remove=old)
    assert after.summary.operation.value == "overwrite"
    assert offsets(table) == [(0, o, f"again-value {o}".encode()) for o in range(20)]
    assert offsets(table, before.snapshot_id) == [(0, o, f"value {o}".encode())
                                                  for o in range(20)]  # time travel
    assert [s.summary[iceberg.RUN_ID] for s in table.metadata.snapshots] == ["run-1", "run-2"]


def test_a_zombie_commit_of_the_same_run_adds_it_once(tmp_path, monkeypatch):
    """Two commits of one run at once (a task Airflow thought dead): the second loses the
    catalog's compare-and-swap, reads the table again and finds the run. pyiceberg's own
    retry would have rebuilt its snapshot on the new table and added the files twice."""
    mine, zombie = handle(tmp_path), handle(tmp_path)
    files = [parquet(mine, tmp_path, 0, 0, 10)]
    start = mine.transaction

    def zombie_first():  # the zombie commits between our read of the table and our commit
        monkeypatch.setattr(mine, "transaction", start)
        iceberg.commit_run(zombie, "run-1", files)
        return start()
    monkeypatch.setattr(mine, "transaction", zombie_first)
    ours = iceberg.commit_run(mine, "run-1", files)
    assert ours.snapshot_id == iceberg.run_snapshot(zombie.refresh(), "run-1").snapshot_id
    assert len(handle(tmp_path).metadata.snapshots) == 1
    assert len(offsets(handle(tmp_path))) == 10


def test_a_rewind_adding_a_file_the_table_holds_already_is_refused(table, tmp_path):
    files = [parquet(table, tmp_path, 0, 0, 10), parquet(table, tmp_path, 0, 10, 10)]
    iceberg.commit_run(table, "run-1", files)
    with pytest.raises(TerminalError, match=r"run run-2 would add .*1_0_0+\.parquet, which the "
                                            r"table holds already"):
        iceberg.commit_run(table, "run-2", files[:1], remove=files[1:])
    assert len(table.refresh().metadata.snapshots) == 1


def test_expiry_deletes_the_files_only_expired_snapshots_read(table, tmp_path):
    old = [parquet(table, tmp_path, 0, 0, 10), parquet(table, tmp_path, 1, 0, 10)]
    first = iceberg.commit_run(table, "run-1", old)
    new = [parquet(table, tmp_path, 0, 0, 10, tag="again-")]
    second = iceberg.commit_run(table, "run-2", new, remove=old[:1])  # a rewind of partition 0
    now = second.timestamp_ms + 1000
    assert table_maintenance.expire(table, keep_ms=60_000, now_ms=now) == {"snapshots": 0, "files": 0}
    assert table_maintenance.expire(table, keep_ms=0, now_ms=now) == {"snapshots": 1, "files": 1}
    assert [s.snapshot_id for s in table.refresh().metadata.snapshots] == [second.snapshot_id]
    assert not (tmp_path / old[0].rsplit("/", 1)[-1]).exists()  # only the old snapshot read it
    assert (tmp_path / old[1].rsplit("/", 1)[-1]).exists()      # still current
    assert offsets(table) == sorted([(0, o, f"again-value {o}".encode()) for o in range(10)]
                                    + [(1, o, f"value {o}".encode()) for o in range(10)])
    assert table_maintenance.expire(table, keep_ms=0, now_ms=now + 10_000) == {"snapshots": 0, "files": 0}
    assert first.snapshot_id not in {s.snapshot_id for s in table.metadata.snapshots}


def test_an_expiry_killed_after_deleting_files_is_finished_by_the_next(table, tmp_path):
    """Issue 41: killed between deleting the replaced files and expiring the snapshots, the
    next expiry met the missing file and failed, run after run."""
    old = [parquet(table, tmp_path, 0, 0, 10)]
    iceberg.commit_run(table, "run-1", old)
    second = iceberg.commit_run(table, "run-2", [parquet(table, tmp_path, 0, 0, 10, tag="a-")],
                                remove=old)
    (tmp_path / old[0].rsplit("/", 1)[-1]).unlink()  # what the killed expiry got done
    now = second.timestamp_ms + 1000
    assert table_maintenance.expire(table, keep_ms=0, now_ms=now) == {"snapshots": 1, "files": 1}
    assert [s.snapshot_id for s in table.refresh().metadata.snapshots] == [second.snapshot_id]
    assert offsets(table) == [(0, o, f"a-value {o}".encode()) for o in range(10)]
