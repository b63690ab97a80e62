"""Rewinds: where a token goes, and which archived files the next plan moves aside, from
the catalog's rows, in both layouts. The archive is a real local directory; the catalog
holds each file as a commit would add it."""


import pytest

from kafka_archive import catalog, formats, layout
from kafka_archive.formats import records
from kafka_archive.plan import rewinds
from kafka_archive.plan.planning import Slice
from kafka_archive.plan.rewinds import RewindError, Straddler, place
from kafka_archive.storage import Storage, local_path
from tests.support.local_config import local_config

FORMAT = {"kind": "sequencefile", "key": "msgpack", "compression": "none"}


def test_place_keeps_an_offset_on_a_file_boundary():
    assert place("t/0", 50, 20, 0, Straddler("f", 10, 19)) == (20, "rewound to 20")
    assert place("t/0", 50, 20, 0, None) == (20, "rewound to 20")
    assert place("t/0", 50, 50, 0, Straddler("f", 40, 49)) == (50, "rewound to 50")


def test_place_moves_an_offset_inside_a_file_back_to_the_file_start():
    offset, why = place("t/0", 50, 25, 0, Straddler("s3://b/f", 20, 29))
    assert offset == 20
    assert "offset 25 is inside archived file s3://b/f (offsets 20..29)" in why


def test_place_keeps_a_file_kafka_no_longer_fully_holds():
    offset, why = place("t/0", 50, 25, 22, Straddler("s3://b/f", 20, 29))
    assert offset == 30 and "stays, as Kafka no longer holds its first offsets" in why


def test_place_refuses_forward_and_lost_offsets():
    with pytest.raises(RewindError, match=r"t/0: offset 51 is past the token 50; a rewind only "
                                          r"moves back"):
        place("t/0", 50, 51, 0, None)
    with pytest.raises(RewindError, match=r"t/0: offset 3 is no longer in Kafka, which keeps "
                                          r"offsets from 10; rewind to 10 or later"):
        place("t/0", 50, 3, 10, None)


@pytest.fixture
def archive(tmp_path):
    return local_config(tmp_path, """\
        backup: {}
        partitioned:
          layout: {kind: event_time, granularity: hour}
          parser: {kind: json, field: ts}
        """)


def commit_row(config, group, partition, start, end, urls, generation=1):
    """A run's row in the catalog, as commit.protocol adds it."""
    run = catalog.run_folder(config.archive_root, group, f"run-{start}-{end}-{generation}")
    row = {"topic": "t", "partition": partition, "start": start, "end": end,
           "records": end - start, "bytes": 1, "gaps": [], "audit": [],
           "files": [{"url": u, "records": 1, "bytes": 1} for u in urls]}
    row = catalog.catalog_row(row, run, {"generation": generation},
                              config.group(group).layout, config.archive_root, group)
    catalog.append(Storage(), config, group, lambda cat: {
        "kind": "commit", "run_id": run, "at": "2026-01-01T00:00:00+00:00", "add": [row]})


def write_file(config, partition, offsets, generation=1):
    url = layout.data_file(config.archive_root, "backup", "t", partition, generation,
                           offsets[0], FORMAT)
    path = local_path(url)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as out:
        writer = formats.open_writer(out, FORMAT, path.name)
        for offset in offsets:
            writer.append(records.Record(offset, None, b"v", 0))
        writer.close()
    commit_row(config, "backup", partition, offsets[0], offsets[-1] + 1, [url], generation)
    return url


def supersede(config, slices, group="backup"):
    """rewinds.supersede without cuts: no row of these groups is compacted."""
    adjusted, superseded, cuts = rewinds.supersede(catalog.open_catalog(Storage(), config, group),
                                                   config, slices)
    assert cuts == []
    return adjusted, superseded


def test_plan_moves_aside_files_beyond_a_rewound_token_line_of_its_generation(archive):
    urls = [write_file(archive, 0, range(a, a + 10)) for a in (0, 10, 20)]
    write_file(archive, 0, range(10, 30), generation=2)  # another archive of the same data
    slices = [Slice("t", 0, 10, 40, 1000), Slice("t", 1, 5, 9, 1000)]  # partition 1: no file
    adjusted, superseded = supersede(archive, slices)
    assert superseded == urls[1:]
    # the slice names the files it replaces: what Kafka no longer has is kept from them
    assert adjusted == [Slice("t", 0, 10, 40, 1000, ((20, None), (30, None)), tuple(urls[1:])),
                        slices[1]]


def test_plan_touches_nothing_when_the_token_is_where_the_files_end(archive):
    write_file(archive, 0, range(0, 10))
    slices = [Slice("t", 0, 10, 40, 1000)]
    assert supersede(archive, slices) == (slices, [])


def test_plan_starts_after_a_file_straddling_the_start(archive):
    urls = [write_file(archive, 0, range(a, a + 10)) for a in (0, 10, 20)]
    # no token line (deleted), start_from earliest = 15 after retention: file 10..19 stays
    adjusted, superseded = supersede(archive, [Slice("t", 0, 15, 40, 1000)])
    assert adjusted == [Slice("t", 0, 20, 40, 1000, ((30, None),), (urls[2],))]
    assert superseded == [urls[2]]
    # a slice capped below the straddler's end: no offsets, the token moves past the file
    adjusted, _ = supersede(archive, [Slice("t", 0, 15, 17, 1000)])
    assert adjusted == [Slice("t", 0, 20, 20, 1000)]


def test_a_capped_rewind_moves_aside_only_the_rows_it_archives_again(archive):
    """Issue 31 §2.4: max_records cut the slice at 15, but every row from 0 on was moved
    aside; with retention before the next run, archived messages sat only under
    `_superseded/` and were reported lost. Now the slice takes the row it starts in whole
    and leaves the later rows current for a later run."""
    urls = [write_file(archive, 0, range(a, a + 10)) for a in (0, 10, 20)]
    adjusted, superseded = supersede(archive, [Slice("t", 0, 0, 5, 1000)])
    assert adjusted == [Slice("t", 0, 0, 10, 1000, ((10, None),), tuple(urls[:1]))]
    assert superseded == urls[:1]
    adjusted, superseded = supersede(archive, [Slice("t", 0, 0, 15, 1000)])
    assert adjusted == [Slice("t", 0, 0, 20, 1000, ((10, None), (20, None)), tuple(urls[:2]))]
    assert superseded == urls[:2]


def test_an_event_time_rewind_moves_aside_every_file_of_each_later_slice(archive):
    """The duplicate bug: files in time partitions and `_late/` are found by offset."""
    root = archive.archive_root

    def files(first, hours):
        return [layout.event_data_file(root, "partitioned", "t", f"dt=2026-11-23/hr={h:02d}", 0,
                                       1, first + i, FORMAT) for i, h in enumerate(hours)] + [
            layout.late_file(root, "partitioned", "t", "dt=2026-11-22/hr=05", 0, 1, first + 5,
                             FORMAT)]

    first, second = files(0, (19, 20)), files(10, (20, 21))
    commit_row(archive, "partitioned", 0, 0, 10, first)
    commit_row(archive, "partitioned", 0, 10, 20, second)
    # the token deleted: start_from earliest = 0 -> every file of both slices moves aside
    # (each slice's offsets archived again where its run put them: no watermark then)
    adjusted, superseded = supersede(archive, [Slice("t", 0, 0, 25, 1000)], "partitioned")
    assert adjusted == [Slice("t", 0, 0, 25, 1000, ((10, None), (20, None)),
                              tuple(first + second))]
    assert superseded == first + second
    # earliest 4 (retention): the straddling slice keeps its messages, the next moves
    adjusted, superseded = supersede(archive, [Slice("t", 0, 4, 25, 1000)], "partitioned")
    assert adjusted == [Slice("t", 0, 10, 25, 1000, ((20, None),), tuple(second))]
    assert superseded == second


class FakeConsumer:
    """Kafka's answers for one topic: retained range per partition, message times."""

    def __init__(self, ranges: dict[int, tuple[int, int]], times: dict[int, list[int]]):
        self.ranges, self.times = ranges, times  # times: partition -> timestamp per offset

    def partitions_for_topic(self, topic):
        return set(self.ranges)

    def beginning_offsets(self, tps):
        return {tp: self.ranges[tp.partition][0] for tp in tps}

    def end_offsets(self, tps):
        return {tp: self.ranges[tp.partition][1] for tp in tps}

    def offsets_for_times(self, wanted):
        from kafka.structs import OffsetAndTimestamp
        out = {}
        for tp, ms in wanted.items():
            hits = [(o, t) for o, t in enumerate(self.times[tp.partition]) if t >= ms]
            out[tp] = OffsetAndTimestamp(hits[0][0], hits[0][1], None) if hits else None
        return out


@pytest.fixture
def tokens(archive):
    from kafka_archive.tokens import LocalTokenStore, Token
    store = LocalTokenStore(local_path(archive.token_root))
    store.write(Token("backup", "t", archive.bootstrap_servers, {0: 30, 1: 30}), None)
    return store


def do_rewind(archive, tokens, consumer, **kwargs):
    return rewinds.rewind(archive, tokens, consumer, "backup", "t", storage=Storage(), **kwargs)


def test_rewind_by_time_resolves_each_partition_and_writes_one_token(archive, tokens):
    consumer = FakeConsumer({0: (0, 30), 1: (0, 30)}, {0: list(range(1000, 31000, 1000)),
                                                       1: list(range(500, 30500, 1000))})
    changes = do_rewind(archive, tokens, consumer, to_time_ms=10_000)
    assert tokens.read("backup", "t").token.offsets == {0: 9, 1: 10}
    assert "partition 0 (the first message at or after 1970-01-01T00:00:10.000Z is offset 9)" \
           ": token 30 -> 9" in changes[0]
    # past the newest message: the end offset, where the token of partition 1 is not
    tokens_before = tokens.read("backup", "t")
    with pytest.raises(RewindError, match=r"no message at or after .*: the end offset 30\): "
                                          r"offset 30 is past the token 9"):
        do_rewind(archive, tokens, consumer, to_time_ms=99_000)
    assert tokens.read("backup", "t") == tokens_before  # all partitions or none


def test_rewind_refusals_change_nothing(archive, tokens):
    consumer = FakeConsumer({0: (5, 30), 1: (0, 30)}, {})
    before = tokens.read("backup", "t")
    with pytest.raises(RewindError, match="no longer in Kafka, which keeps offsets from 5"):
        do_rewind(archive, tokens, consumer, to_offset=2)
    with pytest.raises(RewindError, match="has no token line for partition 7"):
        do_rewind(archive, tokens, consumer, partition=7, to_offset=2)
    with pytest.raises(RewindError, match="exactly one of to_offset and to_time_ms"):
        do_rewind(archive, tokens, consumer, to_offset=2, to_time_ms=5)
    Storage().put_bytes(layout.inflight_marker(archive.archive_root, "backup"),
                        b'{"run_id": "stuck", "plan": "x"}')
    with pytest.raises(RewindError, match="run stuck of group backup is in flight"):
        do_rewind(archive, tokens, consumer, to_offset=10)
    assert tokens.read("backup", "t") == before


def test_rewind_to_the_start_of_a_file_counts_the_files_the_next_run_moves(archive, tokens):
    for first in (0, 10, 20):
        write_file(archive, 1, range(first, first + 10))
    consumer = FakeConsumer({0: (0, 30), 1: (0, 30)}, {})
    changes = do_rewind(archive, tokens, consumer, partition=1, to_offset=13)
    assert tokens.read("backup", "t").token.offsets == {0: 30, 1: 10}
    assert changes == [f"backup/t partition 1: token 30 -> 10 (rewound to 10: offset 13 is inside "
                       f"archived file {archive.archive_root}/backup/t/partition=1/"
                       f"1_1_{10:020d}.seq (offsets 10..19), which is archived again whole); "
                       "the next run moves 2 archived files aside and archives from 10"]


@pytest.mark.parametrize("start_from, judged", [("earliest", {}), ("latest", {"t": {0: 20}})])
def test_a_deleted_line_goes_on_from_the_archive_under_start_from_latest(archive, start_from,
                                                                         judged):
    """Deleting a line means "archive again from start_from". Under `latest` there is no
    earlier spot to go back to, and Kafka's latest offset (30) would skip [20, 30), which
    no file holds: the line is the archive's end, and a slice of no offsets writes it
    where nothing else is planned (the simulation found the skip: seed 40172)."""
    from dataclasses import replace

    from kafka_archive.plan import runs
    from kafka_archive.plan.planning import PartitionState

    write_file(archive, 0, range(0, 20))
    group = replace(archive.group("backup"), start_from=start_from)
    config = replace(archive, groups={**archive.groups, "backup": group})
    cat = catalog.open_catalog(Storage(), config, "backup")
    states = [PartitionState("t", 0, 0, 30), PartitionState("t", 1, 0, 30)]  # 1: never archived
    assert runs._judged(cat, config, states, {"t": {}}) == ({"t": {}} | judged, {})
    caught_up = runs._lines_caught_up(group, {"t": {}}, {"t": {}} | judged, [], [])
    assert [(s.partition, s.start, s.end) for s in caught_up] == [
        (p, at, at) for p, at in judged.get("t", {}).items()]
    # an earlier generation's archive beyond Kafka's latest offset (an unclean election,
    # then a new generation): nothing to skip up to Kafka's latest offset, which it is then
    short = [PartitionState("t", 0, 0, 12)]
    assert runs._judged(cat, config, short, {})[0] == ({"t": {0: 12}} if judged else {})
