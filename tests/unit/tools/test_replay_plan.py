"""Which current files a replay reads, and the errors for what the archive does not hold."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafka_archive.catalog import Contents
from kafka_archive.config import Config, Group, Policy, FormatSpec
from kafka_archive.tools import replay
from kafka_archive.tools.replay import MissingRangeError, ReplayError, Request, Span

SEQ = {"kind": "sequencefile", "key": "msgpack", "compression": "default"}
RUN = "s3://b/r/_runs/backup/run-1"


def row(partition, start, end, records=None, min_ts=0, max_ts=0, run=RUN):
    records = end - start if records is None else records
    url = f"s3://b/r/backup/t/partition={partition}/1_{partition}_{start:020d}.seq"
    return {"topic": "t", "partition": partition, "start": start, "end": end, "records": records,
            "files": [{"url": url, "records": records, "bytes": 1, "sha256": "x"}] if records else [],
            "min_timestamp_ms": min_ts, "max_timestamp_ms": max_ts, "gaps": [],
            "_run": run, "_generation": 1}


def contents(*rows, lost=None, plans=None):
    return Contents(rows=list(rows), plans=plans or {RUN: {"format": SEQ}}, lost=lost or {})


def spans(c, partition=None, **range_):
    return replay.spans(c, "t", partition, **range_)


def ranges(found):
    return {s.partition: [(f.start, f.end) for f in s.files] for s in found}


def test_the_whole_archive_by_default_and_an_offset_range_cut_to_its_files():
    c = contents(row(0, 0, 10), row(0, 10, 25), row(1, 3, 8))
    assert ranges(spans(c)) == {0: [(0, 10), (10, 25)], 1: [(3, 8)]}
    assert ranges(spans(c, from_offset=5, to_offset=8)) == {0: [(5, 8)], 1: [(5, 8)]}
    assert ranges(spans(c, 0, from_offset=5, to_offset=12)) == {0: [(5, 10), (10, 12)]}
    assert ranges(spans(c, partition=1)) == {1: [(3, 8)]}


def test_a_partition_archived_below_the_start_has_nothing_to_replay():
    c = contents(row(0, 0, 10), row(1, 0, 3))
    assert ranges(spans(c, from_offset=5)) == {0: [(5, 10)]}


def test_a_hole_names_its_first_missing_offset():
    c = contents(row(0, 0, 10), row(0, 14, 20))
    with pytest.raises(MissingRangeError, match=r"offsets \[10, 14\) .* first missing offset is 10") as e:
        spans(c, from_offset=2)
    assert (e.value.partition, e.value.first_missing) == (0, 10)
    assert ranges(spans(c, from_offset=14)) == {0: [(14, 20)]}  # after the hole: fine


def test_beyond_what_is_archived_and_before_it_are_missing_too():
    c = contents(row(0, 5, 10))
    with pytest.raises(MissingRangeError, match="first missing offset is 10"):
        spans(c, to_offset=12)
    with pytest.raises(MissingRangeError, match="first missing offset is 2"):
        spans(c, from_offset=2)
    with pytest.raises(MissingRangeError, match="no offset of t partition 3"):
        spans(c, partition=3)


def test_an_accepted_loss_inside_the_range_is_its_own_error():
    c = contents(row(0, 0, 10), row(0, 30, 40), lost={("t", 0): [(10, 30)]})
    with pytest.raises(MissingRangeError, match=r"\[10, 30\) were deleted by retention .* "
                                                "loss accepted") as e:
        spans(c)
    assert e.value.first_missing == 10
    assert ranges(spans(c, from_offset=30)) == {0: [(30, 40)]}


def test_kafka_gaps_and_empty_slices_are_no_hole():
    c = contents(row(0, 0, 10, records=7), row(0, 10, 12, records=0), row(0, 12, 20))
    assert ranges(spans(c)) == {0: [(0, 10), (12, 20)]}


def test_a_time_range_reads_the_files_whose_times_meet_it_and_needs_no_hole_between():
    c = contents(row(0, 0, 10, min_ts=100, max_ts=199), row(0, 10, 20, min_ts=200, max_ts=299),
                 row(0, 20, 30, min_ts=300, max_ts=399), row(1, 0, 5, min_ts=500, max_ts=600))
    assert ranges(spans(c, since_ms=250, until_ms=300)) == {0: [(10, 20)]}
    assert ranges(spans(c, since_ms=150, until_ms=350)) == {0: [(0, 10), (10, 20), (20, 30)]}
    holey = contents(row(0, 0, 10, min_ts=100, max_ts=199), row(0, 20, 30, min_ts=300, max_ts=399))
    with pytest.raises(MissingRangeError, match="first missing offset is 10"):
        spans(holey, since_ms=150, until_ms=350)
    assert ranges(spans(holey, since_ms=300)) == {0: [(20, 30)]}


def test_files_that_keep_no_key_or_timestamp_cannot_be_replayed():
    text = contents(row(0, 0, 10), plans={RUN: {"format": SEQ, "topic_formats": {
        "t": {"kind": "text", "compression": "gzip"}}}})
    with pytest.raises(ReplayError, match="archived as text"):
        spans(text)
    legacy = contents(row(0, 0, 10), plans={RUN: {"format": {**SEQ, "key": "offset"}}})
    with pytest.raises(ReplayError, match="key offset"):
        spans(legacy)


def config(include=("src-.*",)):
    group = Group(name="backup", schedule=None, include=include, exclude=(), start_from="earliest",
                  on_retention_gap="fail", format=FormatSpec(), policy=Policy(), topic_policies=())
    return Config(path=Path("c.yaml"), bootstrap_servers="k:9092", kafka_properties={},
                  archive_root="s3://b/r", token_root="/t", s3_conn_id="s3", generation=1,
                  groups={"backup": group})


def test_the_target_must_exist_have_the_partitions_and_not_be_archived():
    sources = [Span(0, 0), Span(3, 3)]
    ok = Request("backup", "src-a", "copy")
    replay.check_target(config(), ok, 4, sources)
    with pytest.raises(ReplayError, match="does not exist .* at least 4 partitions"):
        replay.check_target(config(), ok, None, sources)
    with pytest.raises(ReplayError, match="has 2 partitions, the replay needs partition 3"):
        replay.check_target(config(), ok, 2, sources)
    replay.check_target(config(), Request("backup", "src-a", "copy", hash_by_key=True), 2, sources)
    looping = Request("backup", "src-a", "src-b")
    with pytest.raises(ReplayError, match="archived by group backup:.* --allow-archived-target"):
        replay.check_target(config(), looping, 4, sources)
    replay.check_target(config(), Request("backup", "src-a", "src-b", allow_archived_target=True),
                        4, sources)
    # another cluster is not archived here
    replay.check_target(config(), Request("backup", "src-a", "src-b", bootstrap="other:9092"),
                        4, sources)


def test_requests_are_checked_and_the_same_replay_has_the_same_id():
    with pytest.raises(ReplayError, match="not both"):
        Request("backup", "a", "b", from_offset=1, since_ms=5).check()
    with pytest.raises(ReplayError, match=r"offset range \[5, 5\) is empty"):
        Request("backup", "a", "b", from_offset=5, to_offset=5).check()
    with pytest.raises(ReplayError, match="is the topic replayed"):
        Request("backup", "a", "a").check()
    a = Request("backup", "a", "b", from_offset=3)
    assert a.replay_id() == Request("backup", "a", "b", from_offset=3,
                                    allow_archived_target=True).replay_id()
    assert a.replay_id() != Request("backup", "a", "b", from_offset=4).replay_id()
    assert a.replay_id().startswith("a-to-b-")
