"""The catalog rebuilt from the run folders (the truth): supersession by later plans
(even when the new file has the old one's name), backfill replacements, uncommitted runs,
lost ranges."""

from __future__ import annotations

import json

import pytest

from kafka_archive import catalog, layout
from kafka_archive.audit import gather
from kafka_archive.catalog import AcceptedLoss, Contents, lost_ranges
from kafka_archive.manifest import row_files
from kafka_archive.catalog.rebuild import catalog_row, from_run_folders, rebuild, run_folder
from kafka_archive.catalog.state import State
from kafka_archive.storage import Storage

GROUP = "backup"


@pytest.fixture
def archive(tmp_path):
    return Archive(str(tmp_path / "archive"))


class Archive:
    def __init__(self, root: str):
        self.root, self.storage = root, Storage()

    def url(self, partition: int, first: int, generation: int = 1) -> str:
        return layout.data_file(self.root, GROUP, "t", partition, generation, first, "sequencefile")

    def row(self, partition: int, start: int, end: int, window: int = 0, generation: int = 1,
            gaps=()) -> dict:
        return {"topic": "t", "partition": partition, "start": start, "end": end,
                "records": end - start, "url": self.url(partition, start, generation),
                "bytes": 100, "gaps": [list(g) for g in gaps],
                "audit": [["billing", window, end - start]]}

    def run(self, run_id: str, at: str | None, rows: list[dict], superseded=(), generation=1,
            skipped=()) -> None:
        """A run's plan and manifest; committed at `at` (None: still in flight)."""
        put = self._put
        put(run_id, "plan.json", {"run_id": run_id, "generation": generation,
                                  "superseded": list(superseded),
                                  "anomalies": [{"kind": "retention_gap", "topic": "t",
                                                 "partition": p, "lost_from": a, "lost_to": b,
                                                 "action": "skipped"} for p, a, b in skipped]})
        put(run_id, "manifest.json", {"slices": rows})
        if at is not None:
            put(run_id, "committed.json", {"run_id": run_id, "committed_at": at})

    def backfill(self, run_id: str, at: str, rows: list[dict], replaces: str) -> None:
        folder = layout.run_file(self.root, GROUP, replaces, "x").rsplit("/", 1)[0]
        self._put(run_id, "backfill.json",
                  {"at": at, "slices": [{**r, "replaces_run": folder} for r in rows]})

    def _put(self, run_id: str, name: str, doc: dict) -> None:
        self.storage.put_bytes(layout.run_file(self.root, GROUP, run_id, name),
                               json.dumps(doc).encode())

    def current(self):
        state, rows = from_run_folders(self.storage, self.root, GROUP, layout.LayoutSpec())
        return Contents([json.loads(r.text) for r in rows], {}, lost_ranges(state),
                        tuple(AcceptedLoss(**a) for a in state.accepted))

    def spans(self) -> list[tuple[int, int, int, str]]:
        return [(r["partition"], r["start"], r["end"], r["_run"].rsplit("/", 1)[-1])
                for r in self.current().rows]


def test_rows_of_committed_runs_in_order(archive):
    archive.run("r1", "2026-01-01T00:00:00+00:00", [archive.row(0, 0, 10), archive.row(1, 0, 4)])
    archive.run("r2", "2026-01-01T00:10:00+00:00", [archive.row(0, 10, 20)])
    assert archive.spans() == [(0, 0, 10, "r1"), (0, 10, 20, "r2"), (1, 0, 4, "r1")]


def test_a_rewound_slice_rewritten_under_the_same_name_is_current(archive):
    """The audit's false alarm: the re-archived file has the superseded one's name."""
    archive.run("r1", "2026-01-01T00:00:00+00:00", [archive.row(0, 0, 10), archive.row(0, 10, 20)])
    archive.run("r2", "2026-01-01T01:00:00+00:00", [archive.row(0, 10, 20)],
                superseded=[archive.url(0, 10)])
    assert archive.spans() == [(0, 0, 10, "r1"), (0, 10, 20, "r2")]
    counts = gather.count_rows(archive.current().rows)
    assert dict(counts) == {("t", "billing", 0): 20}


def test_a_rewind_to_another_offset_takes_the_old_rows_out(archive):
    archive.run("r1", "2026-01-01T00:00:00+00:00",
                [archive.row(0, 0, 10), archive.row(0, 10, 20), archive.row(0, 20, 30)])
    archive.run("r2", "2026-01-01T01:00:00+00:00", [archive.row(0, 10, 35)],
                superseded=[archive.url(0, 10), archive.url(0, 20)])
    assert archive.spans() == [(0, 0, 10, "r1"), (0, 10, 35, "r2")]


def test_rewound_twice(archive):
    archive.run("r1", "2026-01-01T00:00:00+00:00", [archive.row(0, 0, 10)])
    archive.run("r2", "2026-01-01T01:00:00+00:00", [archive.row(0, 0, 10)],
                superseded=[archive.url(0, 0)])
    archive.run("r3", "2026-01-01T02:00:00+00:00", [archive.row(0, 0, 12)],
                superseded=[archive.url(0, 0)])
    assert archive.spans() == [(0, 0, 12, "r3")]


def test_a_rewind_changes_only_its_partitions_and_names_that_do_not_parse_still_count(archive):
    """The rebuild folds each partition on its own (Spill): a file moved aside reaches
    its partition's rows by its name, and one whose name is not the layout's by trying
    every partition."""
    odd = {**archive.row(1, 5, 10), "url": "elsewhere/odd-name"}
    archive.run("r1", "2026-01-01T00:00:00+00:00",
                [archive.row(0, 0, 10), archive.row(1, 0, 5), odd, archive.row(2, 0, 10)])
    archive.run("r2", "2026-01-01T01:00:00+00:00",
                [archive.row(0, 5, 12), archive.row(1, 0, 12)],
                superseded=[archive.url(0, 0), archive.url(1, 0), "elsewhere/odd-name"])
    assert archive.spans() == [(0, 5, 12, "r2"), (1, 0, 12, "r2"), (2, 0, 10, "r1")]
    state, _ = from_run_folders(archive.storage, archive.root, GROUP, layout.LayoutSpec())
    covered = {k: s.covered for k, s in state.topics["t"].summaries.items()}
    assert covered == {"0:1": [[5, 12]], "1:1": [[0, 12]], "2:1": [[0, 10]]}


def test_a_run_still_in_flight_counts_for_nothing(archive):
    archive.run("r1", "2026-01-01T00:00:00+00:00", [archive.row(0, 0, 10)])
    archive.run("r2", None, [archive.row(0, 0, 10)], superseded=[archive.url(0, 0)])
    assert archive.spans() == [(0, 0, 10, "r1")]


def test_a_backfill_replaces_the_rows_it_rebuilt(archive):
    archive.run("r1", "2026-01-01T00:00:00+00:00", [archive.row(0, 0, 10), archive.row(0, 10, 20)])
    rebuilt = {**archive.row(0, 0, 10), "files": [{"url": "new", "records": 10, "bytes": 1}]}
    archive.backfill("b1", "2026-01-02T00:00:00+00:00", [rebuilt], replaces="r1")
    rows = archive.current().rows
    assert archive.spans() == [(0, 0, 10, "r1"), (0, 10, 20, "r1")]  # planned by r1
    assert [f["url"] for f in row_files(rows[0])] == ["new"]


def test_generations_are_kept_apart(archive):
    archive.run("r1", "2026-01-01T00:00:00+00:00", [archive.row(0, 0, 10)])
    archive.run("r2", "2026-01-01T01:00:00+00:00", [archive.row(0, 0, 10, generation=2)],
                generation=2)
    assert [(r["_generation"], r["url"]) for r in archive.current().rows] == [
        (1, archive.url(0, 0)), (2, archive.url(0, 0, 2))]


def test_gaps_and_lost_ranges(archive):
    archive.run("r1", "2026-01-01T00:00:00+00:00", [archive.row(0, 5, 10, gaps=[(7, 8)])],
                skipped=[(0, 0, 5)])
    contents = archive.current()
    assert contents.gaps()[("t", 0)] == [(7, 8)]
    assert contents.lost == {("t", 0): [(0, 5)]}


def test_an_empty_group_has_no_rows(archive):
    assert archive.current().rows == []


def test_a_rows_format_is_its_plans_for_its_topic():
    plans = {"r1": {"format": {"kind": "sequencefile"},
                    "topic_formats": {"u": {"kind": "text"}}}}
    c = Contents(rows=[], plans=plans, lost={})
    assert c.format_of({"_run": "r1", "topic": "t"}) == {"kind": "sequencefile"}
    assert c.format_of({"_run": "r1", "topic": "u"}) == {"kind": "text"}


class CommitDuringScan(Storage):
    """Storage where a commit (its committed.json, then its catalog entry, in the order
    commit.protocol writes them) lands right after a rebuild has listed the run folders."""

    def __init__(self, archive: Archive, commit):
        super().__init__()
        self.archive, self.commit, self.done = archive, commit, False

    def list(self, prefix_url, start_after=None):
        yield from super().list(prefix_url, start_after)
        if "/_runs/" in prefix_url and not self.done:
            self.done = True
            self.commit()


def test_a_commit_landing_while_the_catalog_is_rebuilt_is_kept(archive):
    """Issue 31 §2.1: the rebuild scanned the runs, a commit landed, the rebuild then
    claimed the next entry as replacing everything: the commit was gone from the catalog
    while its token had moved."""
    archive.run("r1", "2026-01-01T00:00:00+00:00", [archive.row(0, 0, 10)])
    spec = layout.LayoutSpec()

    def commit_r2():
        row = archive.row(0, 10, 20)
        archive.run("r2", "2026-01-01T00:10:00+00:00", [row])
        catalog.store.append(lambda: catalog.store.read(archive.storage, archive.root, GROUP)
                             or catalog.Catalog(archive.storage, archive.root, GROUP, State()),
                             lambda cat: {"kind": "commit", "run_id": "r2", "at": "x",
                                          "run": {"run_id": "r2"},
                                          "add": [catalog_row(row, run_folder(
                                              archive.root, GROUP, "r2"), {}, spec,
                                              archive.root, GROUP)]})

    rebuilt = rebuild(CommitDuringScan(archive, commit_r2), archive.root, GROUP, spec)
    assert [(r["start"], r["end"]) for r in rebuilt.rows("t")] == [(0, 10), (10, 20)]
    stored = catalog.store.read(archive.storage, archive.root, GROUP)
    assert [(r["start"], r["end"]) for r in stored.rows("t")] == [(0, 10), (10, 20)]
    assert stored.state.has_run("r2")
