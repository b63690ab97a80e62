"""The archive checks of `kafka-archive verify`, on file summaries: no services."""

import io

from kafka_archive import formats
from kafka_archive.formats import records
from kafka_archive.storage import Storage
from kafka_archive.tools.offset_checks import (ERROR, GAP, INFO, LOST, FileSummary, Finding,
                                               check_partition, summarize)
from kafka_archive.tools.verify import read_summary


def _file(first: int, last: int, name_offset: int | None = None) -> FileSummary:
    name = first if name_offset is None else name_offset
    return FileSummary(f"s3://b/backup/t/partition=0/1_0_{name:020d}.seq", name, first, last,
                       last - first + 1)


def _levels(findings: list[Finding], level: str) -> list[str]:
    return [f.message for f in findings if f.level == level]


def test_clean_sequence_up_to_the_token_has_no_error():
    findings = check_partition([_file(20, 29), _file(0, 9), _file(10, 19)], 30, [])
    assert _levels(findings, ERROR) == []
    assert findings == []


def test_offsets_below_the_first_file_are_only_noted():
    findings = check_partition([_file(100, 109)], 110, [])
    assert _levels(findings, ERROR) == []
    assert _levels(findings, INFO) == ["offsets below 100 are not archived here "
                                       "(retention, start_from or an earlier generation)"]


def test_overlapping_files_are_a_duplicate_naming_both():
    first, second = _file(0, 9), _file(5, 14)
    errors = _levels(check_partition([first, second], 15, []), ERROR)
    assert errors == [f"duplicate offsets [5, 9] are in both {first.url} and {second.url}"]


def test_a_file_inside_another_is_a_duplicate_and_no_hole_after_it():
    outer, inner, after = _file(0, 50), _file(10, 20), _file(51, 60)
    errors = _levels(check_partition([outer, inner, after], 61, []), ERROR)
    assert errors == [f"duplicate offsets [10, 20] are in both {outer.url} and {inner.url}"]


def test_missing_offsets_between_files_are_a_hole():
    first, second = _file(0, 9), _file(15, 19)
    errors = _levels(check_partition([first, second], 20, []), ERROR)
    assert errors == [f"hole: offsets [10, 15) between {first.url} and {second.url} are in no file"]


def test_a_hole_recorded_as_a_kafka_gap_is_not_an_error():
    findings = check_partition([_file(0, 9), _file(15, 19)], 20, [(10, 12), (12, 15)])
    assert _levels(findings, ERROR) == []
    assert len(_levels(findings, GAP)) == 1 and "[10, 15)" in _levels(findings, GAP)[0]


def test_only_the_part_of_a_hole_outside_the_recorded_gaps_is_an_error():
    findings = check_partition([_file(0, 9), _file(20, 29)], 30, [(8, 12), (15, 17)])
    assert [m.split(" between")[0] for m in _levels(findings, ERROR)] == [
        "hole: offsets [12, 15)", "hole: offsets [17, 20)"]
    assert [m.split(" between")[0] for m in _levels(findings, GAP)] == [
        "offsets [10, 12)", "offsets [15, 17)"]


def test_a_range_skipped_after_retention_is_reported_as_lost_not_as_a_hole():
    findings = check_partition([_file(0, 9), _file(50, 59)], 60, [], [(10, 50)])
    assert _levels(findings, ERROR) == []
    assert len(_levels(findings, LOST)) == 1 and "[10, 50)" in _levels(findings, LOST)[0]


def test_offsets_another_generation_holds_are_no_hole():
    """A generation rewound below where it began (a line deleted after a new generation
    was set) fills in up to its first file; the older generation holds what lies between."""
    findings = check_partition([_file(0, 5), _file(9, 10)], 11, [], [], [(0, 9), (12, 20)])
    assert _levels(findings, ERROR) == []
    assert any("[6, 9)" in f and "another generation" in f for f in _levels(findings, INFO))
    findings = check_partition([_file(0, 5), _file(9, 10)], 11, [], [], [(0, 7)])
    assert _levels(findings, ERROR) == [  # the part no generation holds
        f"hole: offsets [7, 9) between {_file(0, 5).url} and {_file(9, 10).url} are in no file"]


def test_missing_tail_below_the_token_is_a_hole():
    last = _file(10, 19)
    errors = _levels(check_partition([_file(0, 9), last], 25, []), ERROR)
    assert errors == [f"hole: offsets [20, 25) after {last.url}, below the token 25 are in no file"]


def test_tail_covered_by_a_recorded_gap_is_fine():
    findings = check_partition([_file(0, 9)], 12, [(10, 12)])  # e.g. a transaction marker
    assert _levels(findings, ERROR) == []
    assert _levels(findings, GAP)


def test_offsets_kafka_holds_no_message_at_are_a_gap_and_the_rest_a_hole():
    """No row records them (a token a person put past a transaction's marker): Kafka's
    word, its first message from each such range on, tells a gap from a hole."""
    asked = []

    def first_message(start, end):  # Kafka: markers at 10 and 11, a message at 12
        asked.append((start, end))
        return min(end, 12)
    last = _file(0, 9)
    findings = check_partition([last], 12, [], first_message=first_message)
    assert _levels(findings, ERROR) == [] and asked == [(10, 12)]
    assert _levels(findings, GAP) == [f"offsets [10, 12) after {last.url}, below the token 12: "
                                      "gap (Kafka holds no message there: a transaction's "
                                      "marker or an aborted transaction)"]
    errors = _levels(check_partition([last], 15, [], first_message=first_message), ERROR)
    assert errors == [f"hole: offsets [12, 15) after {last.url}, below the token 15 are in no file"]
    asked.clear()  # what the manifests record as Kafka's gaps is not asked about again
    assert _levels(check_partition([last], 15, [(10, 12)], first_message=first_message), ERROR)
    assert asked == [(12, 15)]


def test_files_beyond_the_token_are_noted_as_uncommitted():
    findings = check_partition([_file(0, 9), _file(10, 19)], 10, [])
    assert _levels(findings, ERROR) == []
    assert _levels(findings, INFO) == ["offsets [10, 20) are archived beyond the token: a run "
                                       "wrote them but has not committed yet"]


def test_offsets_between_files_at_or_past_the_token_are_no_hole_yet():
    """A capped rewind below where start_from: latest began (seed 43198): its first slice
    [0, 6) is archived, the token is at 6, the old files start at 10. [6, 10) was never
    archived and the next run archives it; below the token it would be a hole."""
    rewound, old = _file(0, 5), _file(10, 19)
    findings = check_partition([rewound, old], 6, [])
    assert _levels(findings, ERROR) == []
    assert f"offsets [6, 10) between {rewound.url} and {old.url}: not archived yet (at or past " \
           "the token 6: the next runs archive them)" in _levels(findings, INFO)
    errors = _levels(check_partition([rewound, old], 8, []), ERROR)
    assert errors == [f"hole: offsets [6, 8) between {rewound.url} and {old.url} are in no file"]


def test_without_a_token_the_tail_is_not_checked():
    assert check_partition([_file(0, 9)], None, []) == []


def test_first_offset_differing_from_the_name_is_an_error():
    wrong = _file(3, 9, name_offset=0)
    errors = _levels(check_partition([wrong], 10, []), ERROR)
    assert errors == [f"{wrong.url}: first record has offset 3, but the file name says 0"]


def test_unusable_files_are_errors_and_left_out_of_the_arithmetic():
    broken = FileSummary("s3://b/x/1_0_00000000000000000010.seq", 10, problem="unreadable: boom")
    errors = _levels(check_partition([_file(0, 9), broken, _file(10, 19)], 20, []), ERROR)
    assert errors == [f"{broken.url}: unreadable: boom"]


def test_summarize_counts_and_requires_increasing_offsets():
    assert summarize("u", 5, [5, 6, 9]) == FileSummary("u", 5, 5, 9, 3)
    unordered = summarize("u", 5, [5, 7, 7])
    assert unordered.problem == "offset 7 follows offset 7: offsets must increase"
    assert summarize("u", 5, []).problem == "holds no record"


def test_read_summary_of_a_real_and_of_a_damaged_file(tmp_path):
    path = tmp_path / "1_0_00000000000000000004.seq"
    buffer = io.BytesIO()
    writer = formats.open_writer(buffer, {"kind": "sequencefile", "key": "msgpack",
                                          "compression": "default"}, path.name)
    for offset in (4, 5, 8):
        writer.append(records.Record(offset, b"k", None if offset == 5 else b"v", 1000))
    writer.close()
    path.write_bytes(buffer.getvalue())
    url = f"file://{path}"
    assert read_summary(Storage(), url, 4) == FileSummary(url, 4, 4, 8, 3)

    path.write_bytes(buffer.getvalue()[:-7])
    damaged = read_summary(Storage(), str(path), 4)
    assert damaged.problem.startswith("unreadable: ") and damaged.first_offset is None


def test_plain_verify_reads_the_catalogs_summaries_not_the_files(tmp_path):
    """Issue 31 §4: plain verify read every current file (35.7 s at a year of runs). It
    now checks the offsets the catalog's summaries cover against the tokens: a hole and
    an accepted loss are found, no row chunk and no archived file is read."""
    import json as json_module

    from kafka_archive import catalog, config, layout
    from kafka_archive.tokens import LocalTokenStore, Token
    from kafka_archive.tools.verify import verify_group
    from tests.support.counting_storage import CountingStorage

    path = tmp_path / "kafka-archive.yaml"
    path.write_text(f"kafka: {{bootstrap_servers: b}}\narchive_root: file://{tmp_path}/a\n"
                    f"token_root: {tmp_path}/t\n")
    cfg, storage = config.load(path), CountingStorage()
    for n, (start, end) in enumerate([(0, 10), (10, 20), (30, 40)]):  # [20, 30) in no file
        url = layout.data_file(cfg.archive_root, "backup", "t", 0, 1, start, "sequencefile")
        row = catalog.catalog_row({"topic": "t", "partition": 0, "start": start, "end": end,
                                   "records": end - start, "bytes": 1, "gaps": [],
                                   "audit": [], "url": url},
                                  catalog.run_folder(cfg.archive_root, "backup", f"r{n}"),
                                  {"generation": 1}, layout.LayoutSpec(), cfg.archive_root,
                                  "backup")
        catalog.append(storage, cfg, "backup", lambda cat, row=row, n=n: {
            "kind": "commit", "run_id": f"r{n}", "at": "x", "run": {"run_id": f"r{n}"},
            "add": [row]})
    tokens = LocalTokenStore(tmp_path / "t")
    tokens.write(Token("backup", "t", "b", {0: 45}, run_id="r2"), None)
    storage.reads = 0
    report = verify_group(cfg, "backup", storage, tokens)
    assert [f.message for f in report.errors()] == [
        "hole: offsets [20, 30) between offsets [0, 20) and offsets [30, 40) are in no file",
        "hole: offsets [40, 45) after offsets [30, 40), below the token 45 are in no file"]
    assert report.partitions[0].title() == (
        "t partition=0 generation 1: 3 files, 30 records, offsets 0..39, token 45")
    assert storage.reads <= 4  # the hint and the log's 3 entries: no chunk, no file
    catalog.append(storage, cfg, "backup", lambda cat: {"kind": "loss", "loss": {
        "group": "backup", "topic": "t", "partition": 0, "lost_from": 20, "lost_to": 30,
        "by": "ana", "at": "then", "reason": "retention"}})
    report = verify_group(cfg, "backup", storage, tokens)
    assert len(report.errors()) == 1 and "known loss: t partition 0: offsets [20, 30)" in \
        report.render()
    assert json_module.loads(json_module.dumps(report.to_json()))["files"] == 3


def test_a_slice_starting_at_a_transaction_marker_names_its_file_by_the_slice():
    """Found by the protocol simulation (issue 41): a slice whose first offset is a marker
    holds its first record one later; verify --full called every such file misnamed."""
    named_at_marker = _file(7, 12, name_offset=6)
    assert _levels(check_partition([_file(0, 5), named_at_marker], 13, [(6, 7)]), ERROR) == []
    url = named_at_marker.url
    assert (f"{url}: first record has offset 7, but the file name says 6"
            in _levels(check_partition([_file(0, 5), named_at_marker], 13, []), ERROR))
    assert _levels(check_partition([_file(5, 12, name_offset=6)], 13, [(6, 7)]), ERROR)[0] == (
        f"{url}: first record has offset 5, but the file name says 6")


def test_a_malformed_token_is_an_error_of_its_topic_and_verify_goes_on(tmp_path):
    """Found by the protocol simulation (a person's edit leaves a malformed line): verify
    stopped at the token with a traceback. It names the file and line, checks the topic's
    files without it, and goes on with the other topics."""
    from kafka_archive.tools import verify
    from tests.support.sim.world import World

    world = World(tmp_path / "world")
    for step in (("produce", "t", 0, 3, False), ("produce", "u", 0, 2, False),
                 ("run", "r1", 0, 0, 0), ("break_token", "u")):
        world.step(step)
    for files in (False, True):
        report = verify.verify_group(world.config, "backup", Storage(), world.tokens,
                                     files=files)
        [error] = [e.message for e in report.errors()]
        assert "u.token, line 6: offset 'twelve'" in error, error
        assert {(p.topic, p.token_offset) for p in report.partitions} == {
            ("t", 3), ("u", None)}
