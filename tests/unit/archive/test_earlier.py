"""A rewind's slice keeps what only the files it replaces hold (archive.earlier): the
offsets Kafka's log cleaner, retention or a truncation removed since they were archived."""
import pickle

import numpy as np
import pytest

from kafka_archive import formats, layout
from kafka_archive.archive import earlier, job
from kafka_archive.formats.batch import Batch
from kafka_archive.formats.records import Record, fingerprint
from kafka_archive.plan.planning import Slice
from kafka_archive.storage import Storage

from tests.unit.archive.test_job import _batch, _task


def _records(offsets, value=b"v%d") -> list[Record]:
    """The messages _batch makes, as an earlier file keeps them (with a header, to tell
    where each came from)."""
    return [Record(o, None, value % o, 1_795_300_000_000 + o, [("h", b"%d" % o)])
            for o in offsets]


def _merged(kafka: list[list[int]], held: list[int], start: int, end: int, value=b"v%d"):
    opened = []

    def earlier_records():
        opened.append(True)
        return iter(_records(held, value))
    out = list(earlier.with_earlier(iter([_batch(b) for b in kafka]), earlier_records, start, end,
                                    "t partition 0"))
    return out, bool(opened)


def test_the_offsets_kafka_skips_come_from_the_earlier_files_in_their_place():
    out, opened = _merged([[1, 3], [5, 6, 7, 8]], held=list(range(0, 6)), start=0, end=9)
    assert opened
    assert [int(o) for b in out for o in b.offset] == list(range(9))
    assert [v for b in out for v in b.value.to_pylist()] == [b"v%d" % o for o in range(9)]
    headers = [h for b in out for h in b.headers.to_pylist()]  # each whole, from its source
    assert [bool(h) for h in headers] == [True, False, True, False, True] + [False] * 4
    assert headers[2] == [{"key": "h", "value": b"2"}]


def test_a_read_without_a_skipped_offset_never_opens_the_earlier_files():
    batches = [[0, 1, 2], [3, 4]]
    out, opened = _merged(batches, held=list(range(5)), start=0, end=5)
    assert not opened
    assert [list(b.offset) for b in out] == batches


def test_a_head_retention_deleted_and_a_tail_kafka_lost_come_from_the_earlier_files():
    out, _ = _merged([[3, 4]], held=list(range(0, 7)), start=0, end=7)
    assert [int(o) for b in out for o in b.offset] == list(range(7))
    out, _ = _merged([], held=[0, 1], start=0, end=4)  # Kafka holds none of it any more
    assert [int(o) for b in out for o in b.offset] == [0, 1]


def test_an_offset_neither_holds_stays_a_gap():
    # 2: a transaction marker (never a message); 9-10: beyond what was archived
    out, _ = _merged([[1, 3], [11]], held=[0, 1, 3, 4, 5, 6, 7, 8], start=0, end=12)
    assert [int(o) for b in out for o in b.offset] == [0, 1, 3, 4, 5, 6, 7, 8, 11]


def test_another_message_at_an_archived_offset_is_not_mixed_with_the_archive():
    """A topic deleted and re-created (or truncated and written again): Kafka's offsets
    0-3 are other messages than the archived 0-9. Mixing them would be neither, and
    keeping only Kafka's would replace archived messages: the look fails, naming the
    offset, wherever it finds one (the job's slice then archives nothing)."""
    for kafka, first in (([[0, 1, 2, 3]], 3), ([[0, 2], [3]], 0)):  # the tail's; a gap's
        with pytest.raises(earlier.OffsetsReused, match=f"offset {first}: Kafka holds") as e:
            _merged(kafka, held=list(range(10)), start=0, end=10, value=b"old%d")
        assert e.value.offset == first and "generation" in str(e.value)
    # found only after earlier records went out
    held = [Record(o, None, b"v%d" % o if o < 4 else b"old", 1_795_300_000_000 + o, [])
            for o in range(10)]
    batches = iter([_batch([1, 2, 3]), _batch([5, 6])])
    with pytest.raises(earlier.OffsetsReused, match="offset 5"):
        list(earlier.with_earlier(batches, lambda: iter(held), 0, 10, "t partition 0"))
    assert pickle.loads(pickle.dumps(e.value)).offset == 0  # whole across Spark's processes


def test_another_message_at_a_replaced_rows_last_offset_is_found_in_a_whole_read():
    """Kafka returns every offset (nothing to take from the earlier files), yet a topic
    re-created after the plan's look holds other messages: the last message of each
    replaced row (Slice.earlier_last) tells, wherever its batch falls."""
    def last(offset, value):
        return tuple(fingerprint(offset, None, value, 1_795_300_000_000 + offset))
    kafka = [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
    same = [last(4, b"v4"), last(9, b"v9"), last(12, b"v12")]  # 12: past what Kafka gave
    out = list(earlier.agreeing_with_last(iter([_batch(b) for b in kafka]), same, "t partition 0"))
    assert [int(o) for b in out for o in b.offset] == list(range(10))
    for lasts, differs in (([last(4, b"old4"), last(9, b"v9")], 4),
                           ([last(4, b"v4"), last(9, b"old9")], 9)):
        with pytest.raises(earlier.OffsetsReused, match=f"t partition 0 offset {differs}:"):
            list(earlier.agreeing_with_last(iter([_batch(b) for b in kafka]), lasts,
                                            "t partition 0"))
    # the log cleaner removed Kafka's message at the row's last offset: nothing to judge
    assert len(list(earlier.agreeing_with_last(iter([_batch([0, 1, 2, 3])]), [last(4, b"old4")],
                                               "t partition 0"))) == 1


def test_earlier_records_outside_the_slice_are_not_taken():
    out, _ = _merged([[12]], held=list(range(5, 15)), start=10, end=13)
    assert [int(o) for b in out for o in b.offset] == [10, 11, 12]


def test_merged_batches_keep_offset_order_and_every_column():
    a = _batch(range(0, 6, 2))
    b = Batch.of_records(_records([1, 5], b"old%d"))
    m = a.merged(b)
    assert list(m.offset) == [0, 1, 2, 4, 5]
    assert m.value.to_pylist() == [b"v0", b"old1", b"v2", b"v4", b"old5"]
    assert list(m.timestamp_ms) == [1_795_300_000_000 + o for o in [0, 1, 2, 4, 5]]
    assert isinstance(m.offset, np.ndarray) and len(m) == 5


def test_records_of_reads_files_whose_offsets_interleave_in_offset_order(tmp_path):
    """An event-time row's files (one per hour) hold interleaved offsets; a file that
    cannot be read is passed over (what only it held is lost already)."""
    storage = Storage.from_environment()
    fmt = {"kind": "sequencefile", "key": "msgpack", "compression": "default"}
    urls = []
    for name, offsets in (("a", [0, 2, 4]), ("b", [1, 3, 5])):
        url = f"file://{tmp_path}/{name}.seq"
        with open(tmp_path / f"{name}.seq", "wb") as f:
            w = formats.open_writer(f, fmt, url)
            for r in _records(offsets):
                w.append(r)
            w.close()
        urls.append(url)
    (tmp_path / "damaged.seq").write_bytes(b"not a sequence file")
    urls.append(f"file://{tmp_path}/damaged.seq")
    found = list(earlier.records_of(storage, urls, 1, 5))
    assert [r.offset for r in found] == [1, 2, 3, 4]
    assert found[0].value == b"v1" and found[0].headers == [("h", b"1")]


def test_a_rewind_slice_of_a_file_group_reads_the_files_the_plan_moved_aside(tmp_path):
    task, plan = _task(tmp_path)
    root = task.config.archive_root
    moved = f"{root}/backup/t/0/1_0_00000000000000000000.seq"
    s = Slice("t", 0, 0, 3, 1 << 20, archived_before=((3, None),), earlier=(moved,))
    assert job.kafka_from(s) == 3
    assert job.kafka_from(Slice("t", 0, 0, 3, 1 << 20)) == 0
    text = Slice("t", 0, 0, 3, 1 << 20, archived_before=((3, None),),
                 earlier=(moved.replace(".seq", ".txt.gz"),))
    assert job.kafka_from(text) == 0  # values only: no offsets to keep by

    wanted = []
    with pytest.MonkeyPatch.context() as m:
        m.setattr(earlier, "records_of", lambda storage, urls, a, b: wanted.append(urls) or iter(()))
        m.setattr(job.source, "read", lambda *args, **kwargs: iter(()))  # Kafka has none
        assert list(task.messages(None, s, Storage.from_environment())) == []
    assert wanted == [[layout.superseded(root, plan.run_id, moved)]]


class _Kafka:
    """kafka-python's consumer as brokers.read_range drives it, over messages by offset."""

    def __init__(self, messages: dict[int, bytes], earliest: int = 0):
        self.messages, self.at, self.tp, self.earliest = messages, 0, None, earliest
        self.read_at: list[int] = []  # the offsets sought

    def assign(self, tps):
        [self.tp] = tps

    def seek(self, tp, offset):
        self.at = offset
        self.read_at.append(offset)

    def position(self, tp):
        return self.at

    def end_offsets(self, tps):
        return {tp: max(self.messages, default=-1) + 1 for tp in tps}

    def beginning_offsets(self, tps):
        return {tp: self.earliest for tp in tps}

    def poll(self, timeout_ms=0):
        held = sorted(o for o in self.messages if o >= self.at)
        if not held:
            self.at = 1 << 30
            return {}
        o = held[0]
        self.at = o + 1
        from types import SimpleNamespace
        return {self.tp: [SimpleNamespace(offset=o, key=None, value=self.messages[o],
                                       timestamp=1_795_300_000_000 + o)]}


def test_the_plan_finds_other_messages_at_the_offsets_a_rewind_would_replace(tmp_path):
    """The plan's look before a rewind moves anything aside (first_reused): the last file
    it replaces against Kafka over the same offsets, matched offset by offset."""
    storage = Storage.from_environment()
    fmt = {"kind": "sequencefile", "key": "msgpack", "compression": "default"}
    url = f"file://{tmp_path}/1_0_00000000000000000004.seq"
    with open(tmp_path / "1_0_00000000000000000004.seq", "wb") as f:
        w = formats.open_writer(f, fmt, url)
        for r in _records(range(4, 10)):
            w.append(r)
        w.close()
    s = Slice("t", 0, 0, 10, 1 << 20, earlier=(f"file://{tmp_path}/first.seq", url))
    same = {o: b"v%d" % o for o in range(10)}
    assert earlier.first_reused(storage, _Kafka(same), s) is None
    # the log cleaner removed some since: what is left still agrees
    assert earlier.first_reused(storage, _Kafka({o: same[o] for o in (5, 9)}), s) is None
    # truncated at 7 by an unclean election, and written again
    assert earlier.first_reused(storage, _Kafka({**same, 7: b"x", 8: b"y"}), s) == 7
    assert earlier.first_reused(storage, _Kafka({o: b"new" for o in range(12)}), s) == 4
    with pytest.MonkeyPatch.context() as m:  # the tail of a long file: where a cut falls
        m.setattr(earlier, "TAIL", 3)
        assert earlier.first_reused(storage, _Kafka({**same, 4: b"x"}), s) is None
        assert earlier.first_reused(storage, _Kafka({**same, 8: b"x"}), s) == 8
    text = Slice("t", 0, 0, 10, 1 << 20, earlier=(url.replace(".seq", ".txt.gz"),))
    assert earlier.first_reused(storage, _Kafka({}), text) is None  # no offsets to match


def test_the_plan_compares_the_last_message_of_every_row_a_rewind_would_replace():
    """An election cut the log's tail inside a row before the last, and the archive went
    on past it with the new messages: the last file agrees with Kafka, the earlier row's
    last message (its manifest's fingerprint) does not. No file is read for it."""
    def last(o, value=b"v%d"):
        return tuple(fingerprint(o, None, value % o, 1_795_300_000_000 + o))

    # (text files keep no offsets: the tail look has nothing to compare, only the rows do)
    s = Slice("t", 0, 0, 10, 1 << 20, earlier=("file:///gone/1_0_0.txt.gz", "file:///gone/1_0_4.txt.gz"),
              earlier_last=(last(3), last(9)))
    same = {o: b"v%d" % o for o in range(10)}
    storage = Storage.from_environment()
    assert earlier.first_reused(storage, _Kafka(same), s) is None
    assert earlier.first_reused(storage, _Kafka({**same, 2: b"x", 3: b"y"}), s) == 3
    assert earlier.first_reused(storage, _Kafka({**same, 9: b"x"}), s) == 9
    # the log cleaner removed 3 since: that row goes unjudged, the next one agrees
    assert earlier.first_reused(storage, _Kafka({o: same[o] for o in same if o != 3}), s) is None
    # Kafka's log ends before the last row's message (an archive ahead, held elsewhere):
    # not waited for
    assert earlier.first_reused(storage, _Kafka({o: same[o] for o in range(5)}), s) is None
    # retention took the first row's offsets: only the rows Kafka still holds are read
    kafka = _Kafka({o: same[o] for o in range(5, 10)}, earliest=5)
    assert earlier.first_reused(storage, kafka, s) is None and kafka.read_at == [9]
