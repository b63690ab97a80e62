"""Which rows a compaction merges, and the row that replaces them (commit.compaction's
pure part); the protocol around it is the simulation's (test_protocol_simulation)."""

from datetime import datetime, timedelta, timezone

from kafka_archive.catalog.pieces import merged, pieces
from kafka_archive.commit.compaction import choose

OLD, NEW = "2026-01-01T10:00:00+00:00", "2026-01-01T12:30:00+00:00"
BEFORE = "2026-01-01T12:00:00+00:00"  # compact rows planned before this
TARGET = 1000


def row(start, end, size=100, planned=OLD, run="r", **more):
    return {"topic": "t", "partition": 0, "start": start, "end": end, "records": end - start,
            "bytes": size, "planned_at": planned, "_run": f"root/_runs/g/{run}{start}",
            "_generation": 1, "files": [{"url": f"u{start}", "records": end - start,
                                         "bytes": size}], **more}


def spans(bins):
    return [[(r["start"], r["end"]) for r in b] for b in bins]


def test_contiguous_small_rows_of_old_runs_are_merged():
    rows = [row(0, 5), row(5, 9), row(9, 12)]
    assert spans(choose(rows, BEFORE, TARGET)) == [[(0, 5), (5, 9), (9, 12)]]


def test_rows_of_recent_runs_stay_as_they_are():
    rows = [row(0, 5), row(5, 9), row(9, 12, planned=NEW), row(12, 13, planned=NEW)]
    assert spans(choose(rows, BEFORE, TARGET)) == [[(0, 5), (5, 9)]]


def test_a_row_planned_exactly_compact_after_ago_is_old_enough():
    # compact_after: 0 and a run planned in the compaction's second (plans record seconds)
    rows = [row(0, 5, planned=BEFORE), row(5, 9, planned=BEFORE)]
    assert spans(choose(rows, BEFORE, TARGET)) == [[(0, 5), (5, 9)]]


def test_a_lone_small_row_is_not_rewritten():
    assert choose([row(0, 5)], BEFORE, TARGET) == []
    assert choose([row(0, 5), row(5, 9, planned=NEW)], BEFORE, TARGET) == []


def test_a_large_row_or_a_gap_ends_a_bin():
    rows = [row(0, 5), row(5, 9), row(9, 20, size=800), row(20, 22), row(22, 24),
            row(30, 31), row(31, 33)]  # [24, 30) lost to retention
    assert spans(choose(rows, BEFORE, TARGET)) == [[(0, 5), (5, 9)], [(20, 22), (22, 24)],
                                                  [(30, 31), (31, 33)]]


def test_bins_are_packed_up_to_the_target_in_offset_order():
    rows = [row(i, i + 1, size=400) for i in range(5)]
    assert spans(choose(rows, BEFORE, TARGET)) == [[(0, 1), (1, 2)], [(2, 3), (3, 4)]]


def test_rows_of_earlier_days_merge_with_each_other_not_with_todays():
    yesterday = "2025-12-31T20:00:00+00:00"
    rows = [row(0, 5, planned=yesterday), row(5, 9, planned=yesterday), row(9, 12),
            row(12, 13)]
    assert spans(choose(rows, BEFORE, TARGET)) == [[(0, 5), (5, 9)], [(9, 12), (12, 13)]]
    assert choose([row(0, 5, planned=yesterday), row(5, 9)], BEFORE, TARGET) == []


def compacted_each_run(days: int, run_bytes: int, target: int) -> tuple[float, list[dict]]:
    """A partition's rows after `days` of 15-minute runs of `run_bytes`, each followed by a
    compaction (compact_after 1h), as the group's DAG does; bytes written by compactions
    per byte archived, and the rows."""
    start, rows, written = datetime(2026, 3, 1, tzinfo=timezone.utc), [], 0
    for i in range(days * 96):
        now = start + timedelta(minutes=15 * i)
        rows.append(row(i, i + 1, size=run_bytes, planned=now.isoformat(timespec="seconds")))
        for chosen in choose(rows, (now - timedelta(hours=1)).isoformat(timespec="seconds"),
                             target):
            at = rows.index(chosen[0])
            rows[at:at + len(chosen)] = [merged(chosen, [{"url": "m", "records": 0, "bytes": sum(
                r["bytes"] for r in chosen)}], f"c{i}")]
            written += rows[at]["bytes"]
    return written / (days * 96 * run_bytes), rows


def test_a_days_runs_end_in_one_file_and_the_last_hours():
    _, rows = compacted_each_run(1, 30 << 10, 256 << 20)
    # after the last run's (23:45) compaction: the day's file (22:45's run included: it is
    # exactly compact_after old), the runs of the last hour
    assert len(rows) == 1 + 4
    assert rows[0]["start"] == 0 and len(rows[0]["pieces"]) == 96 - 4


def test_a_low_volume_partitions_large_file_is_not_rewritten_with_every_run():
    """Merging every old row each run rewrote the growing file 96 times a day: 2,876 bytes
    written per byte archived over 60 days at 30 KiB a run; this way under 100."""
    amplification, rows = compacted_each_run(60, 30 << 10, 256 << 20)
    assert amplification < 100, amplification
    assert len(rows) <= 1 + 1 + 5  # the days before, today's file, the last hour's runs
    amplification, rows = compacted_each_run(30, 10 << 20, 256 << 20)
    assert amplification < 12, amplification  # a file fills up within a day: sealed


def test_the_merged_row_sums_its_rows_and_keeps_them_as_pieces():
    a = row(0, 5, audit=[["p1", 0, 3], ["p2", 0, 2]], min_timestamp_ms=10,
            max_timestamp_ms=20, gaps=[[3, 4]], placed_by=[[5, None]])
    b = row(5, 9, audit=[["p1", 0, 4]], min_timestamp_ms=5, max_timestamp_ms=15, gaps=[],
            placed_by=[[9, 1000]], caught_up_at=OLD)
    files = [{"url": "m", "records": 9, "bytes": 150}]
    m = merged([a, b], files, "root/_runs/g/compaction.x")
    assert (m["start"], m["end"], m["records"], m["bytes"]) == (0, 9, 9, 150)
    assert m["files"] == files and m["_run"] == "root/_runs/g/compaction.x"
    assert m["audit"] == [["p1", 0, 7], ["p2", 0, 2]] and "audit_elsewhere" not in m
    assert (m["min_timestamp_ms"], m["max_timestamp_ms"]) == (5, 20)
    assert m["gaps"] == [[3, 4]] and m["placed_by"] == [[5, None], [9, 1000]]
    assert m["caught_up_at"] == OLD
    assert [(p["start"], p["end"], p["_run"]) for p in m["pieces"]] == [
        (0, 5, "root/_runs/g/r0"), (5, 9, "root/_runs/g/r5")]


def test_the_merged_row_keeps_what_other_generations_hold_too_for_the_audit():
    """A merged row's audit counts less its `audit_elsewhere` are its rows' together: the
    audit (gather.count_rows) counts each message once before and after a compaction."""
    from kafka_archive.audit.gather import count_rows

    a = row(0, 5, audit=[["p1", 0, 5]], audit_elsewhere=[["p1", 0, 3]])
    b = row(5, 9, audit=[["p1", 0, 4]])
    m = merged([a, b], [{"url": "m", "records": 9, "bytes": 150}], "c")
    assert m["audit_elsewhere"] == [["p1", 0, 3]]
    assert dict(count_rows([m])) == dict(count_rows([a, b])) == {("t", "p1", 0): 6}
    assert [p.get("audit_elsewhere") for p in m["pieces"]] == [[["p1", 0, 3]], None]
    assert dict(count_rows([a], count_rows([a, b]), sign=-1)) == {("t", "p1", 0): 4}


def test_a_merged_row_merged_again_keeps_the_first_pieces():
    first = merged([row(0, 5), row(5, 9)], [{"url": "m", "records": 9, "bytes": 150}], "c1")
    again = merged([first, row(9, 12)], [{"url": "n", "records": 12, "bytes": 200}], "c2")
    assert [(p["start"], p["end"]) for p in pieces(again)] == [(0, 5), (5, 9), (9, 12)]


def test_compact_after_and_target_file_size_come_from_the_group_config(tmp_path):
    import pytest

    from kafka_archive.errors import ConfigError
    from tests.support.local_config import local_config

    def table(settings: str):
        return local_config(tmp_path, f"t: {{format: {{kind: parquet}}, table: {{{settings}}}}}\n",
                            iceberg_catalog=True).group("t").table

    assert (table("").compact_after_s, table("").target_file_size) == (3600, 256 << 20)
    assert table("compact_after: 2h, target_file_size: 1000").compact_after_s == 7200
    assert table("compact_after: null").compact_after_s is None  # never compacted
    with pytest.raises(ConfigError, match="compact_after: must be a duration"):
        table("compact_after: soon")
