"""The catalog on a local archive root: entries appended as commits add them give the
same answer as a rebuild from the run folders, across snapshots, rewinds and damage;
an entry that would put an offset in two files is refused; a reader's cost is bounded."""

from __future__ import annotations

import json

import pytest

from kafka_archive import catalog, config, layout
from kafka_archive.catalog import lease, store
from kafka_archive.catalog.state import OverlapError
from kafka_archive.storage import Storage

GROUP = "backup"


class CountingStorage(Storage):
    requests = 0

    def get_bytes(self, url):
        self.requests += 1
        return super().get_bytes(url)

    def list(self, prefix_url, start_after=None):
        self.requests += 1
        return super().list(prefix_url, start_after)


@pytest.fixture
def env(tmp_path):
    path = tmp_path / "kafka-archive.yaml"
    path.write_text(f"kafka: {{bootstrap_servers: 127.0.0.1:1}}\n"
                    f"archive_root: file://{tmp_path}/archive\ngroups: {{backup: {{}}}}\n")
    return Env(config.load(path))


class Env:
    """Runs committed the way commit.protocol does it: run folder, catalog entry, then
    committed.json with the entry's seq."""

    def __init__(self, cfg):
        self.cfg, self.storage = cfg, CountingStorage()
        self.n = 0

    def row(self, topic, partition, start, end):
        url = layout.data_file(self.cfg.archive_root, GROUP, topic, partition, 1, start,
                               "sequencefile")
        return {"topic": topic, "partition": partition, "start": start, "end": end,
                "records": end - start, "bytes": 10 * (end - start), "gaps": [],
                "audit": [["s", 0, end - start]],
                "files": [{"url": url, "records": end - start, "bytes": 10 * (end - start)}]}

    def commit(self, rows, superseded=()):
        self.n += 1
        run_id = f"run{self.n:05d}"
        at = f"2026-01-01T00:00:00+00:00".replace("00:00:00", f"{self.n // 3600 % 24:02d}:"
                                                              f"{self.n // 60 % 60:02d}:"
                                                              f"{self.n % 60:02d}")
        plan = {"run_id": run_id, "created_at": at, "generation": 1,
                "superseded": list(superseded)}
        self.put(run_id, "plan.json", plan)
        self.put(run_id, "manifest.json", {"slices": rows})
        folder = catalog.run_folder(self.cfg.archive_root, GROUP, run_id)
        added = [catalog.catalog_row(r, folder, plan, layout.LayoutSpec(),
                                     self.cfg.archive_root, GROUP) for r in rows]
        seen = catalog.open_catalog(self.storage, self.cfg, GROUP, may_rebuild=True).state.seq
        entry = catalog.append(self.storage, self.cfg, GROUP, lambda cat: {
            "kind": "commit", "run_id": run_id, "at": at,
            "run": catalog.run_summary(plan, {"slices": rows}, {"run_id": run_id,
                                                                "committed_at": at}),
            "add": added,
            "remove": [r for r in cat.rows() if r["files"][0]["url"] in superseded]}).appended
        self.put(run_id, "committed.json", {"run_id": run_id, "committed_at": at,
                                            "after_entry": seen, "entry": entry})

    def put(self, run_id, name, doc):
        Storage.put_bytes(self.storage, layout.run_file(self.cfg.archive_root, GROUP, run_id,
                                                        name), json.dumps(doc).encode())

    def opened(self):
        return catalog.open_catalog(self.storage, self.cfg, GROUP)


def answer(cat):
    """What readers get: every row, every partition's summary, the recent runs."""
    summaries = {(t, k): s.__dict__ for t, topic in cat.state.topics.items()
                 for k, s in topic.summaries.items() if s.rows}
    rows = [{k: v for k, v in r.items()} for r in cat.rows()]
    return rows, summaries, [r["run_id"] for r in cat.state.recent]


def test_appended_and_rebuilt_give_the_same_answer_across_snapshots_and_rewinds(env):
    for i in range(40):  # past two snapshots
        env.commit([env.row("a", 0, 10 * i, 10 * i + 10), env.row("b", i % 3, i, i + 1)])
    superseded = [r["files"][0]["url"] for r in env.opened().rows("a", 0, end_after=250)]
    env.commit([env.row("a", 0, 250, 260)], superseded=superseded)  # a rewind to 250
    cat = env.opened()
    assert cat.snapshot_seq == 32 and len(cat.tail) == 9
    appended = answer(cat)
    assert [(r["start"], r["end"]) for r in cat.rows("a", 0, end_after=240)] == [(240, 250),
                                                                                   (250, 260)]
    assert cat.state.topics["a"].summaries["0:1"].covered == [[0, 260]]
    rebuilt = catalog.rebuild(env.storage, env.cfg, GROUP)
    assert answer(rebuilt) == appended
    assert answer(env.opened()) == appended  # read back after the rebuild's entry


def test_an_entry_holding_offsets_a_current_file_holds_is_refused(env):
    env.commit([env.row("a", 0, 0, 10)])
    with pytest.raises(OverlapError, match=r"a partition 0: offsets \[5, 10\) of run run00002 "
                                           r"are already in a current file"):
        env.commit([env.row("a", 0, 5, 15)])
    assert [r["end"] for r in env.opened().rows()] == [10]  # nothing written


def test_a_commit_run_again_adds_nothing(env):
    env.commit([env.row("a", 0, 0, 10)])
    cat = env.opened()
    run_id = cat.state.recent[0]["run_id"]
    again = catalog.append(env.storage, env.cfg, GROUP,
                           lambda c: None if c.state.has_run(run_id) else {"kind": "commit"})
    assert again.state.seq == cat.state.seq


@pytest.mark.parametrize("damage", ["snapshot", "chunk", "latest"])
def test_a_damaged_catalog_is_rebuilt_from_the_runs(env, damage):
    for i in range(20):
        env.commit([env.row("a", 0, 10 * i, 10 * i + 10)])
    before = answer(env.opened())
    root = env.cfg.archive_root
    target = {"snapshot": store.snapshot_url(root, GROUP, 16),
              "latest": store.latest_url(root, GROUP),
              "chunk": env.opened().chunks["a"][0].url}[damage]
    Storage.put_bytes(env.storage, target, b"{not json")
    assert answer(env.opened()) == before


def test_a_reader_pays_for_partitions_and_recent_entries_not_history(env):
    for i in range(100):
        env.commit([env.row("a", p, 10 * i, 10 * i + 10) for p in range(3)])
    env.storage.requests = 0
    cat = env.opened()
    assert cat.state.topics["a"].summaries["2:1"].records == 1000
    assert env.storage.requests <= 3 + store.SNAPSHOT_EVERY  # hint, snapshot, log listing
    env.storage.requests = 0
    assert [r["start"] for r in cat.rows("a", 1, end_after=985)] == [980, 990]
    assert env.storage.requests <= 1  # one chunk at most


def test_a_group_that_committed_nothing_has_an_empty_catalog_and_writes_none(env):
    cat = env.opened()
    assert cat.state.seq == 0 and cat.rows() == []
    assert not list(env.storage.list(store.folder(env.cfg.archive_root, GROUP)))


def test_a_row_reaching_the_end_kafka_had_when_planned_marks_the_partition_caught_up(env):
    plan = {"created_at": "2026-01-01T00:15:00+00:00", "latest": {"a": {"0": 10, "1": 50}}}
    rows = [catalog.catalog_row(env.row("a", p, 0, 10), "run", plan, layout.LayoutSpec(),
                                env.cfg.archive_root, GROUP) for p in (0, 1)]
    assert rows[0]["caught_up_at"] == "2026-01-01T00:15:00+00:00"
    assert "caught_up_at" not in rows[1]  # capped at 10 of 50: still behind


def test_a_commit_whose_rows_a_current_file_holds_is_refused_before_any_token_moves(env):
    """commit.protocol checks the catalog before the tokens: a refused run changes nothing."""
    from datetime import datetime, timezone

    from kafka_archive.commit import protocol
    from kafka_archive.plan.planning import Plan, Slice
    from kafka_archive.tokens import LocalTokenStore

    env.commit([env.row("a", 0, 0, 10)])
    row = env.row("a", 0, 5, 15)
    url = row["files"][0]["url"]
    Storage.put_bytes(env.storage, url, b"x" * row["files"][0]["bytes"])
    plan = Plan(group=GROUP, run_id="late", created_at="2026-01-02T00:00:00+00:00", bootstrap="b",
                generation=1, format={}, slices=(Slice("a", 0, 5, 15, 1 << 30),),
                token_versions={"a": None}, base_offsets={"a": {}})
    Storage.put_bytes(env.storage, layout.run_file(env.cfg.archive_root, GROUP, "late",
                                                   "manifest.json"),
                      json.dumps({"run_id": "late", "slices": [
                          {**row, "cut": False, "gaps": []}]}).encode())
    tokens = LocalTokenStore(env.cfg.path.parent / "tokens")
    with pytest.raises(OverlapError, match=r"offsets \[5, 10\) of run late"):
        protocol.commit(env.cfg, plan, env.storage, tokens, datetime.now(timezone.utc))
    assert tokens.read(GROUP, "a").token is None  # no token moved


@pytest.mark.parametrize("damage", ["missing", "garbled"])
def test_a_lost_newest_snapshot_is_made_up_from_an_older_one_and_the_log(env, damage):
    """Issue 31 §2.8: `_latest.json` naming a missing snapshot started a full rebuild from
    the run folders; the older snapshot and the log hold everything."""
    for i in range(40):  # snapshots at 16 and 32
        env.commit([env.row("a", 0, 10 * i, 10 * i + 10)])
    before = answer(env.opened())
    newest = store.snapshot_url(env.cfg.archive_root, GROUP, 32)
    if damage == "missing":
        env.storage.delete(newest)
    else:
        Storage.put_bytes(env.storage, newest, b"{not json")
    cat = env.opened()
    assert answer(cat) == before
    assert cat.snapshot_seq == 16 and cat.state.seq == 40  # no rebuild entry was added


def test_a_damaged_chunk_does_not_stop_snapshots_for_good(env):
    """Issue 31 §2.8: a snapshot rewrites the chunks its entries touched; a damaged one
    made every later snapshot fail, and the log's tail (read on every open) grew."""
    for i in range(20):
        env.commit([env.row("a", 0, 10 * i, 10 * i + 10)])
    Storage.put_bytes(env.storage, env.opened().chunks["a"][-1].url, b"{not json")
    for i in range(20, 36):
        env.commit([env.row("a", 0, 10 * i, 10 * i + 10)])
    cat = env.opened()
    assert len(cat.tail) < store.SNAPSHOT_EVERY
    assert [(r["start"], r["end"]) for r in cat.rows("a")] == [(10 * i, 10 * i + 10)
                                                             for i in range(36)]


def test_a_damaged_chunk_is_repaired_from_the_log_in_its_order_not_by_clocks(env):
    """Issue 31 §2.7, §4: the rebuild ordered runs by committed_at (a wall clock, one
    second); a host whose clock ran behind put a rewind before the run it replaced. A
    whole log is the order the compare-and-swap gave; the repair replays it."""
    for i in range(20):
        env.commit([env.row("a", 0, 10 * i, 10 * i + 10)])
    superseded = [r["files"][0]["url"] for r in env.opened().rows("a", 0, end_after=150)]
    env.commit([env.row("a", 0, 150, 200)], superseded=superseded)  # run00021, a rewind
    env.put("run00021", "committed.json", {"run_id": "run00021",
                                           "committed_at": "2025-12-31T00:00:00+00:00"})
    before = answer(env.opened())
    assert [r["_run"].rsplit("/", 1)[-1] for r in env.opened().rows("a", 0, end_after=150)] \
        == ["run00021"]
    Storage.put_bytes(env.storage, env.opened().chunks["a"][0].url, b"{not json")
    assert answer(env.opened()) == before


@pytest.mark.parametrize("cut", [False, True])
def test_a_rebuild_by_hand_from_the_runs_takes_the_log_order_not_clocks(env, cut):
    """Issue 31 §2.7: `catalog --rebuild` ordered run folders by committed_at; a host
    whose clock ran behind put a rewind before the run it replaced, bringing its files
    back. Each commit records its entry's seq (cut: only the entry it saw, the commit
    killed before recording its own)."""
    for i in range(20):
        env.commit([env.row("a", 0, 10 * i, 10 * i + 10)])
    superseded = [r["files"][0]["url"] for r in env.opened().rows("a", 0, end_after=150)]
    env.commit([env.row("a", 0, 150, 200)], superseded=superseded)  # run00021, a rewind
    skewed = {"run_id": "run00021", "committed_at": "2025-12-31T00:00:00+00:00",
              "after_entry": 20, **({} if cut else {"entry": 21})}
    env.put("run00021", "committed.json", skewed)
    before = answer(env.opened())
    assert answer(catalog.rebuild(env.storage, env.cfg, GROUP)) == before


def test_old_entries_snapshots_and_chunks_are_cleaned_up(env):
    """Issue 31 §4: nothing was ever deleted (a year: GBs of log). Two snapshots and the
    entries after the older stay; every answer stays the same, a rebuild agrees."""
    for i in range(100):
        env.commit([env.row("a", p, 10 * i, 10 * i + 10) for p in range(3)]
                   + [env.row("b", 0, i, i + 1)])
    base = store.folder(env.cfg.archive_root, GROUP)
    listed = lambda what: [u for u, _ in env.storage.list(f"{base}/{what}")]  # noqa: E731
    assert [store.seq_of(u) for u in listed("snapshots")] == [80, 96]
    assert [store.seq_of(u) for u in listed("log")] == list(range(81, 101))
    named = {c["url"] for seq in (80, 96) for chunks in json.loads(env.storage.get_bytes(
        store.snapshot_url(env.cfg.archive_root, GROUP, seq)))["chunks"].values()
        for c in chunks}
    assert set(listed("rows")) == named
    cat = env.opened()
    assert [(r["start"], r["end"]) for r in cat.rows("a", 2)][-2:] == [(980, 990), (990, 1000)]
    assert answer(catalog.rebuild(env.storage, env.cfg, GROUP)) == answer(cat)


def damage_every_snapshot(env) -> None:
    """After a cleanup (the log starts after the older snapshot), every kept snapshot's
    chunks garbled: nothing in the catalog holds the rows any more."""
    for i in range(40):  # snapshots at 16 and 32, log from 17
        env.commit([env.row("a", 0, 10 * i, 10 * i + 10)])
    root = env.cfg.archive_root
    for seq in (16, 32):
        for c in json.loads(env.storage.get_bytes(store.snapshot_url(root, GROUP, seq))
                            )["chunks"]["a"]:
            Storage.put_bytes(env.storage, c["url"], b"{not json")


def test_a_reader_never_rebuilds_it_fails_at_once_naming_the_damage_a_writer_rebuilds(env):
    """Issue 31 §4: any reader meeting damage started a rebuild (at a year of runs, a
    status call hanging for minutes). A reader answers from an older snapshot when one
    holds the rows, else fails at once naming the damage and the remedy, writing nothing;
    a writer (the next run, an operator's command) rebuilds."""
    damage_every_snapshot(env)
    entries = lambda: [u for u, _ in env.storage.list(  # noqa: E731
        store.folder(env.cfg.archive_root, GROUP) + "/log")]
    before = entries()
    with pytest.raises(catalog.CatalogUnreadable, match=r"rows/a/.*not a readable row chunk"
                                                        r".*`kafka-archive catalog --group "
                                                        r"backup --rebuild`"):
        env.opened().rows("a")
    assert entries() == before  # no rebuild entry
    writer = catalog.open_catalog(env.storage, env.cfg, GROUP, may_rebuild=True)
    assert [r["end"] for r in writer.rows("a")][-2:] == [390, 400]
    assert json.loads(env.storage.get_bytes(entries()[-1]))["kind"] == "rebuild"
    assert [r["end"] for r in env.opened().rows("a")][-1] == 400  # readers see it now


def test_a_group_with_committed_runs_and_no_catalog_is_built_by_a_writer_only(env):
    for i in range(3):
        env.commit([env.row("a", 0, 10 * i, 10 * i + 10)])
    for url, _ in list(env.storage.list(store.folder(env.cfg.archive_root, GROUP))):
        env.storage.delete(url)
    with pytest.raises(catalog.CatalogUnreadable, match="it has none, though runs were "
                                                        "committed"):
        env.opened()
    assert [r["end"] for r in catalog.open_catalog(
        env.storage, env.cfg, GROUP, may_rebuild=True).rows()] == [10, 20, 30]


def put_lease(env, **fields) -> None:
    import socket
    import time
    held = {"host": socket.gethostname(), "pid": 1, "since": time.time() - 60,
            "until": time.time() + 600, **fields}
    Storage.put_bytes(env.storage, lease.lease_url(env.cfg.archive_root, GROUP),
                      json.dumps(held).encode())


def test_one_rebuild_at_a_time_a_second_fails_fast_naming_the_first(env):
    from kafka_archive.errors import TransientError
    damage_every_snapshot(env)
    put_lease(env, host="worker-7", pid=4242)  # a rebuild running on another host
    with pytest.raises(TransientError, match=r"being rebuilt by process 4242 on worker-7 since "
                                             r"\S+ \S+ UTC; try again when it ends \(its "
                                             r"claim, \S+/_rebuilding.json, expires at"):
        catalog.open_catalog(env.storage, env.cfg, GROUP, may_rebuild=True).rows("a")


@pytest.mark.parametrize("left", ["expired", "holder gone"])
def test_a_lease_left_by_a_killed_or_expired_rebuild_is_taken_over(env, left):
    import time
    damage_every_snapshot(env)
    if left == "expired":
        put_lease(env, host="worker-7", until=time.time() - 1)
    else:  # this host, a pid that is not running (killed)
        put_lease(env, pid=2 ** 22 + 12345)
    rebuilt = catalog.rebuild(env.storage, env.cfg, GROUP)
    assert [r["end"] for r in rebuilt.rows("a")][-1] == 400
    assert lease.released(env.storage.get_or_none(lease.lease_url(env.cfg.archive_root, GROUP)))


def test_a_lease_released_and_claimed_again_while_we_looked_is_busy_not_a_conflict(env):
    """Two commits in one process at once, each opening the catalog: the first's lease
    was there, then gone when the second looked, then the first's next claim was there
    before the second created its own. The second is told the lease is busy (transient,
    retried), never a raw VersionConflict."""
    from kafka_archive.errors import TransientError
    url = lease.lease_url(env.cfg.archive_root, GROUP)
    put_lease(env, host="worker-7", pid=4242)
    real_get = env.storage.get_versioned
    looked = []

    def get_versioned(u):
        if u == url and not looked:  # released as we look; claimed again right after
            looked.append(u)
            env.storage.delete(url)
            found = real_get(u)
            put_lease(env, host="worker-7", pid=4243)
            return found
        return real_get(u)

    env.storage.get_versioned = get_versioned
    with pytest.raises(TransientError, match="process 4243 on worker-7"):
        with lease.one_at_a_time(env.storage, env.cfg.archive_root, GROUP):
            pass
    assert json.loads(env.storage.get_bytes(url))["pid"] == 4243  # theirs, untouched


def test_an_expired_holder_leaves_its_successors_lease_alone(env, monkeypatch):
    """Issue 56, defect 3: a holder whose claim expired and was taken over released (deleted)
    its successor's lease on the way out."""
    import time
    url = lease.lease_url(env.cfg.archive_root, GROUP)
    with lease.claimed(env.storage, url, {"id": "first"}, busy=RuntimeError):
        first = json.loads(env.storage.get_bytes(url))
        # it expires (renewals failed); another host takes it over
        put_lease(env, host="worker-7", pid=4242, token="theirs", until=time.time() + 600)
    assert json.loads(env.storage.get_bytes(url))["token"] == "theirs"
    assert first["token"] != "theirs"


def test_two_claims_in_one_process_do_not_take_each_other_over(env):
    """Issue 56, defect 3: `airflow dags test` runs every task in one process; a second
    claim there took a live first one over as if its holder were gone."""
    from kafka_archive.errors import TransientError
    url = lease.lease_url(env.cfg.archive_root, GROUP)
    with lease.claimed(env.storage, url, {"id": "first"}, busy=lambda h: TransientError(h["id"])):
        with pytest.raises(TransientError, match="first"):
            with lease.claimed(env.storage, url, {"id": "second"},
                               busy=lambda h: TransientError(h["id"])):
                pass
        assert json.loads(env.storage.get_bytes(url))["id"] == "first"
    assert lease.released(env.storage.get_or_none(url))


def test_a_claim_left_by_a_block_that_raised_in_this_process_is_taken_over(env):
    url = lease.lease_url(env.cfg.archive_root, GROUP)
    with pytest.raises(ValueError):
        with lease.claimed(env.storage, url, {"id": "killed"}, busy=RuntimeError,
                           release_on_error=False):
            raise ValueError("a compaction that failed half-way")
    assert json.loads(env.storage.get_bytes(url))["id"] == "killed"  # left for a successor
    settled = []
    with lease.claimed(env.storage, url, {"id": "next"}, busy=RuntimeError,
                       take_over=lambda held: settled.append(held["id"])):
        assert json.loads(env.storage.get_bytes(url))["id"] == "next"
    assert settled == ["killed"]


def test_a_held_lease_is_renewed_past_its_first_expiry(env, monkeypatch):
    """Issue 56, defect 3: the 30-minute lease was never renewed, so a compaction or rebuild
    longer than that could meet a second one."""
    import time
    from kafka_archive.errors import TransientError
    monkeypatch.setattr(lease, "LEASE_S", 0.6)
    monkeypatch.setattr(lease, "RENEW_S", 0.1)
    url = lease.lease_url(env.cfg.archive_root, GROUP)
    with lease.claimed(env.storage, url, {"id": "long"}, busy=RuntimeError):
        first_until = json.loads(env.storage.get_bytes(url))["until"]
        deadline = time.monotonic() + 10
        while json.loads(env.storage.get_bytes(url))["until"] < first_until + 0.5:
            assert time.monotonic() < deadline, "never renewed"
            time.sleep(0.05)
        assert lease.alive(json.loads(env.storage.get_bytes(url)))
        with pytest.raises(TransientError):
            with lease.one_at_a_time(env.storage, env.cfg.archive_root, GROUP):
                pass
