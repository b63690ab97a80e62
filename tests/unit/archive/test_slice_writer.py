"""The shared slice writer on a local archive root: event-time files per (slice, time
partition) named by their first offset, quarantine with reasons, late files, determinism,
and what commit and verify make of its manifest rows."""

import io
import json

import pytest

from kafka_archive import formats, layout
from kafka_archive.archive import slice_writer
from kafka_archive.formats import parsers
from kafka_archive.commit import finalizing, protocol
from kafka_archive.manifest import row_files
from kafka_archive.formats.records import Record
from kafka_archive.layout import LayoutSpec
from kafka_archive.plan.planning import Plan, Slice
from kafka_archive.storage import Storage, local_path
from kafka_archive.tools import offset_checks

HOUR = 3_600_000
T0 = 1_795_300_000_000 - 1_795_300_000_000 % HOUR  # an hour boundary


def target(root, fmt=None, finalized_ms=None, spec=LayoutSpec("event_time")):
    return slice_writer.Target(root=root, group="partitioned", topic="t", generation=1,
                          format=fmt or {"kind": "sequencefile", "key": "msgpack",
                                         "compression": "default"},
                          layout=spec, parser=parsers.JsonParser("ts", "ms"),
                          finalized_ms=finalized_ms)


def messages():
    """offset -> value: hours T0, T0+1h interleaved, two unreadable ones, a gap at 5."""
    values = {0: {"ts": T0 + 1}, 1: {"ts": T0 + HOUR + 5}, 2: b"oops", 3: {"ts": T0 + 7},
              4: {"x": 1}, 6: {"ts": T0 + HOUR}}
    return [Record(o, None, v if isinstance(v, bytes) else json.dumps(v).encode(), T0 + o)
            for o, v in values.items()]


def write(root, archived_before=(), **kw):
    out = slice_writer.OpenSlice(target(root, **kw), 3, 0, 8, 1 << 30, archived_before)
    for r in messages():
        out.add(r)
    return out.finish(Storage())


def read(url):
    with open(local_path(url), "rb") as f:
        return list(formats.read(io.BytesIO(f.read()), url))


def test_event_time_files_quarantine_and_row(tmp_path):
    root = f"file://{tmp_path}"
    row = write(root)
    files = {f["url"][len(root) + 1:]: f for f in row["files"]}
    hour0, hour1 = layout.time_partition(T0, LayoutSpec()), layout.time_partition(T0 + HOUR, LayoutSpec())
    assert sorted(files) == sorted([
        f"partitioned/t/{hour0}/1_3_00000000000000000000.seq",
        f"partitioned/t/{hour1}/1_3_00000000000000000001.seq",
        "partitioned/t/_quarantine/partition=3/1_3_00000000000000000002.seq"])
    assert [r.offset for r in read(f"{root}/partitioned/t/{hour0}/1_3_00000000000000000000.seq")] == [0, 3]
    quarantined = read(f"{root}/partitioned/t/_quarantine/partition=3/1_3_00000000000000000002.seq")
    assert [(r.offset, r.value) for r in quarantined] == [(2, b"oops"), (4, b'{"x": 1}')]
    assert "not a JSON object" in quarantined[0].error and "no field 'ts'" in quarantined[1].error
    assert (row["records"], row["quarantined"], row["late"]) == (6, 2, 0)
    assert row["gaps"] == [[5, 6], [7, 8]]
    assert [o for o, _ in row["errors"]] == [2, 4]
    assert row["url"] is None and row["bytes"] == sum(f["bytes"] for f in files.values())


def test_rewriting_gives_identical_bytes_and_late_messages_go_aside(tmp_path):
    a, b = write(f"file://{tmp_path}/a"), write(f"file://{tmp_path}/b")
    assert [f["crc32c"] for f in a["files"]] == [f["crc32c"] for f in b["files"]]
    late = write(f"file://{tmp_path}/c", finalized_ms=T0 + HOUR)  # the first hour is final
    names = [f["url"].split("/partitioned/t/")[1] for f in late["files"]]
    assert f"_late/{layout.time_partition(T0, LayoutSpec())}/1_3_00000000000000000000.seq" in names
    assert late["late"] == 2


def test_a_rewind_puts_messages_back_where_the_run_that_archived_them_did(tmp_path):
    """The first hour is final for the re-archiving run, but the slice was archived before
    any hour was: its messages go back into their hours (byte-identical files), not
    `_late/`."""
    before = write(f"file://{tmp_path}/a")
    again = write(f"file://{tmp_path}/b", finalized_ms=T0 + HOUR, archived_before=((8, None),))
    assert again["late"] == 0
    assert before["placed_by"] == again["placed_by"] == [[8, None]]  # the next rewind's too
    assert [read(f["url"]) for f in again["files"]] == [read(f["url"]) for f in before["files"]]
    # offsets 0-3 came from a run that held the first hour final (0 and 3 were late then);
    # offsets 4 on are archived the first time, by a run that holds nothing final
    both = write(f"file://{tmp_path}/c", finalized_ms=None, archived_before=((4, T0 + HOUR),))
    late = [r.offset for f in both["files"] if "/_late/" in f["url"] for r in read(f["url"])]
    assert both["late"] == 2 and late == [0, 3]


def test_a_rewind_of_two_rows_gives_back_each_rows_files_byte_for_byte(tmp_path):
    """Issue 56 (the soak's seed 304134): two runs archived [0, 4) and [4, 8); a rewind
    re-archives both in one slice. Each hour gets back the files it had, cut where the
    rows ended, with the same names and bytes (one file where two runs wrote two changed
    a final hour that loaders had loaded file by file)."""
    first, second = (slice_writer.OpenSlice(target(f"file://{tmp_path}/a"), 3, start, end,
                                            1 << 30) for start, end in ((0, 4), (4, 8)))
    for r in messages():
        (first if r.offset < 4 else second).add(r)
    before = first.finish(Storage())["files"] + second.finish(Storage())["files"]
    again = write(f"file://{tmp_path}/b", archived_before=((4, None), (8, None)))["files"]
    name = lambda f: f["url"].split("/partitioned/t/")[1]  # noqa: E731
    assert sorted((name(f), f["crc32c"]) for f in again) == sorted(
        (name(f), f["crc32c"]) for f in before)
    assert len(again) == 5  # hour 0: [0, 3], hour 1: [1] and [6], quarantine: [2] and [4]


def test_backup_layout_keeps_one_file_named_by_the_slice_start(tmp_path):
    root = f"file://{tmp_path}"
    out = slice_writer.OpenSlice(target(root, spec=LayoutSpec()), 3, 0, 8, 1 << 30)
    for r in messages():
        out.add(r)
    row = out.finish(Storage())
    assert row["url"] == f"{root}/partitioned/t/partition=3/1_3_00000000000000000000.seq"
    assert row_files(row)[0]["records"] == row["records"] == 6


def test_a_rewind_never_cuts_inside_the_rows_it_archives_again(tmp_path):
    """max_bytes would cut after the first message; a re-archive of rows ending at 4 runs
    to their end and may cut only after it (issue 31 §2.4: the rows were moved aside)."""
    for before, end in (((), 1), (((4, None),), 4)):
        out = slice_writer.OpenSlice(target(f"file://{tmp_path}/{end}", spec=LayoutSpec()), 3,
                                     0, 8, 1, before)
        for r in messages():
            out.add(r)
        row = out.finish(Storage())
        assert (row["cut"], row["end"]) == (True, end)


def plan():
    return Plan(group="partitioned", run_id="r1", created_at="", bootstrap="b", generation=1,
                format={}, slices=(Slice("t", 3, 0, 8, 1 << 30),), token_versions={},
                base_offsets={})


def test_commit_checks_every_file_of_a_row(tmp_path):
    row = write(f"file://{tmp_path}")
    row = {**row, "gaps": row["gaps"], "files": row["files"]}
    sizes = {f["url"]: f["bytes"] for f in row["files"]}
    assert protocol.verify(plan(), {"run_id": "r1", "slices": [row]}, sizes.get) == {("t", 3): 8}
    wrong = dict(sizes, **{row["files"][1]["url"]: 1})
    with pytest.raises(protocol.ManifestMismatchError, match="is 1 bytes"):
        protocol.verify(plan(), {"run_id": "r1", "slices": [row]}, wrong.get)


def test_verify_scattered_offsets_finds_duplicates_and_holes():
    def summary(url, offsets):
        return offset_checks.summarize(url, offsets[0], offsets), offsets
    clean = [summary("a", [0, 3]), summary("b", [1, 2, 4])]
    assert not [f for f in offset_checks.check_scattered(clean, 5, []) if f.level == offset_checks.ERROR]
    twice = offset_checks.check_scattered([summary("a", [0, 3]), summary("b", [1, 3])], 4, [])
    assert any("duplicate offsets 3" in f.message and f.level == offset_checks.ERROR for f in twice)
    hole = offset_checks.check_scattered([summary("a", [0, 3]), summary("b", [1])], 4, [])
    assert any("hole: offsets [2, 3)" in f.message for f in hole)
    gap = offset_checks.check_scattered([summary("a", [0, 3]), summary("b", [1])], 4, [(2, 3)])
    assert not [f for f in gap if f.level == offset_checks.ERROR]


def test_watermark_subtracts_lateness():
    assert finalizing.watermark(10 * HOUR, 3600) == 9 * HOUR
    assert finalizing.watermark(None, 3600) is None
