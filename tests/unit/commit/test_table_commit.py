"""A table group's commit (commit.protocol with commit.iceberg) on a local archive root,
a real SQLite Iceberg catalog and real token files: the table takes the run before any
token moves, once, whatever the crash; a rewind replaces files in one snapshot and
leaves the old one readable; a run that lost its token race gives its files back."""

from __future__ import annotations

import io
import json
from datetime import datetime, timezone

import pytest

from kafka_archive import config, formats, layout
from kafka_archive.commit import iceberg, protocol
from kafka_archive.errors import TerminalError
from kafka_archive.formats.records import Record
from kafka_archive.plan.planning import Plan, Slice
from kafka_archive.storage import Storage
from kafka_archive.tokens import LocalTokenStore, TokenConflictError

GROUP, TOPIC = "tables", "orders.eu"  # a topic's dot stays in its table's name
NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def table_config(tmp_path, catalogs: str, table: str) -> config.Config:
    path = tmp_path / "kafka-archive.yaml"
    path.write_text(
        f"kafka: {{bootstrap_servers: 127.0.0.1:1}}\narchive_root: file://{tmp_path}/archive\n"
        f"iceberg_catalogs: {catalogs}\n"
        f"groups: {{{GROUP}: {{format: {{kind: parquet}}, table: {table}}}}}\n")
    return config.load(path)


@pytest.fixture
def env(tmp_path):
    cfg = table_config(tmp_path, f"{{local: {{type: sql, uri: 'sqlite:///{tmp_path}/catalog.db'}}}}",
                       "{namespace: archive}")
    return cfg, Storage(), LocalTokenStore(tmp_path / "tokens")


def run(env, run_id: str, ranges: dict[int, tuple[int, int]], superseded=(), versions=None):
    """A plan and its job's output: one Parquet file per partition, in the run's folder."""
    cfg, storage, tokens = env
    rows = []
    for partition, (start, end) in ranges.items():
        url = layout.table_data_file(cfg.archive_root, GROUP, TOPIC, run_id, partition, 1,
                                     start, "parquet")
        buffer = io.BytesIO()
        writer = formats.open_writer(buffer, {"kind": "parquet", "topic": TOPIC},
                                     url.rsplit("/", 1)[-1])
        for o in range(start, end):
            writer.append(Record(o, None, f"{run_id} {o}".encode(), 1_700_000_000_000 + o))
        writer.close()
        storage.put_bytes(url, buffer.getvalue())
        rows.append({"topic": TOPIC, "partition": partition, "start": start, "end": end,
                     "cut": False, "records": end - start, "gaps": [], "audit": [],
                     "bytes": len(buffer.getvalue()), "files": [
                         {"url": url, "records": end - start, "bytes": len(buffer.getvalue())}]})
    current = tokens.read(GROUP, TOPIC)
    plan = Plan(group=GROUP, run_id=run_id, created_at=NOW.isoformat(), bootstrap="127.0.0.1:1",
                generation=1, format={"kind": "parquet"},
                slices=tuple(Slice(TOPIC, p, s, e, 1 << 30) for p, (s, e) in ranges.items()),
                token_versions={TOPIC: current.version if versions is None else versions},
                token_runs={TOPIC: current.token.run_id if current.token else None},
                base_offsets={TOPIC: {str(p): o for p, o in (current.token.offsets.items()
                                                             if current.token else ())}},
                superseded=tuple(superseded))
    storage.put_bytes(layout.run_file(cfg.archive_root, GROUP, run_id, "plan.json"),
                      plan.to_json())
    storage.put_bytes(layout.run_file(cfg.archive_root, GROUP, run_id, "manifest.json"),
                      json.dumps({"run_id": run_id, "slices": rows}).encode())
    return plan


def table(env):
    return iceberg.Tables(env[0]).table(GROUP, TOPIC)


def rows(t, snapshot_id=None) -> list[tuple[int, int, bytes]]:
    return sorted((r["kafka"]["partition"], r["kafka"]["offset"], r["value"])
                  for r in t.scan(snapshot_id=snapshot_id).to_arrow().to_pylist())


def test_a_run_enters_its_table_in_one_snapshot_before_its_token(env):
    cfg, storage, tokens = env
    plan = run(env, "r1", {0: (0, 5), 1: (0, 3)})
    protocol.commit(cfg, plan, storage, tokens, NOW)
    t = table(env)
    assert t.name() == ("archive", TOPIC)
    assert t.location() == layout.table_location(cfg.archive_root, GROUP, TOPIC)
    assert rows(t) == sorted([(0, o, f"r1 {o}".encode()) for o in range(5)]
                             + [(1, o, f"r1 {o}".encode()) for o in range(3)])
    [snapshot] = t.metadata.snapshots
    assert snapshot.summary[iceberg.RUN_ID] == "r1"
    assert snapshot.summary[iceberg.OFFSETS] == "0: [0, 5), 1: [0, 3)"
    assert dict(tokens.read(GROUP, TOPIC).token.offsets) == {0: 5, 1: 3}


class TokensThatCrash(LocalTokenStore):
    """A commit killed after the table commit, before its token write."""

    def write(self, token, expected_version=None):
        raise KeyboardInterrupt("killed")


def test_a_commit_killed_between_table_and_token_is_finished_once(env, tmp_path):
    cfg, storage, tokens = env
    plan = run(env, "r1", {0: (0, 5)})
    with pytest.raises(KeyboardInterrupt):
        protocol.commit(cfg, plan, storage, TokensThatCrash(tmp_path / "tokens"), NOW)
    assert tokens.read(GROUP, TOPIC).token is None
    assert len(table(env).metadata.snapshots) == 1  # the table has it, no token yet
    # the re-executed plan's commit: the token it was creating stays absent (a person may
    # have deleted it since, issue 41), the table and the catalog keep the run once
    summary = protocol.commit(cfg, plan, storage, tokens, NOW)
    t = table(env)
    assert len(t.metadata.snapshots) == 1 and len(rows(t)) == 5
    assert list(summary["tokens_left_as_found"]) == [TOPIC]
    assert tokens.read(GROUP, TOPIC).token is None


def test_a_rewind_replaces_files_in_one_snapshot_and_the_old_one_stays_readable(env):
    cfg, storage, tokens = env
    first = run(env, "r1", {0: (0, 10)})
    protocol.commit(cfg, first, storage, tokens, NOW)
    old = [f["url"] for f in json.loads(storage.get_bytes(layout.run_file(
        cfg.archive_root, GROUP, "r1", "manifest.json")))["slices"][0]["files"]]
    before = table(env).current_snapshot().snapshot_id
    tokens.delete(GROUP, TOPIC)  # the operator's rewind: the token file deleted
    again = run(env, "r2", {0: (0, 10)}, superseded=old)
    protocol.commit(cfg, again, storage, tokens, NOW)
    t = table(env)
    assert t.current_snapshot().summary.operation.value == "overwrite"
    assert rows(t) == [(0, o, f"r2 {o}".encode()) for o in range(10)]
    assert rows(t, before) == [(0, o, f"r1 {o}".encode()) for o in range(10)]  # time travel
    assert storage.size(old[0]) is not None  # never moved: the old snapshot reads it
    from kafka_archive.tools import verify

    report = verify.verify_group(cfg, GROUP, storage, tokens, full=True)
    assert not report.errors(), report.render()  # the old file is no duplicate: not in the table
    assert f"info: {old[0]}: in the tree, not in the table" in report.render()


def test_a_run_that_lost_its_token_race_gives_its_files_back(env):
    cfg, storage, tokens = env
    stale = run(env, "stale", {0: (0, 5)})
    winner = run(env, "winner", {0: (0, 7)})
    protocol.commit(cfg, winner, storage, tokens, NOW)
    # our catalog would refuse the overlap before the table: the race this is about is
    # the one where both passed that check, so the check is skipped here
    protocol.add_to_catalog, real = (lambda *a, **k: None), protocol.add_to_catalog
    try:
        with pytest.raises(TokenConflictError):
            protocol.commit(cfg, stale, storage, tokens, NOW)
    finally:
        protocol.add_to_catalog = real
    t = table(env)
    assert rows(t) == [(0, o, f"winner {o}".encode()) for o in range(7)]
    assert [s.summary[iceberg.RUN_ID] for s in t.metadata.snapshots] == [
        "winner", "stale", "stale (withdrawn)"]


@pytest.mark.parametrize("exact", [False, True])
def test_verify_finds_a_table_that_differs_from_the_catalog(env, exact):
    from kafka_archive.tools import verify

    cfg, storage, tokens = env
    protocol.commit(cfg, run(env, "r1", {0: (0, 5), 1: (0, 5)}), storage, tokens, NOW)
    report = verify.verify_group(cfg, GROUP, storage, tokens, files=exact, full=exact)
    assert not report.errors(), report.render()
    assert "table archive.orders.eu: 10 records in 2 files" in report.render()
    # a file added to the table behind the archive's back: a reader would see it twice
    run(env, "stray", {1: (0, 5)})
    iceberg.commit_run(table(env), "stray", [f["url"] for f in json.loads(storage.get_bytes(
        layout.run_file(cfg.archive_root, GROUP, "stray", "manifest.json")))["slices"][0]["files"]])
    report = verify.verify_group(cfg, GROUP, storage, tokens, files=exact, full=exact)
    messages = [f.message for f in report.errors()]
    assert "table archive.orders.eu holds 15 records in 3 files, the catalog 10 in 2" in messages
    assert any("data/stray/partition=1/1_1_00000000000000000000.parquet is in the table, not "
               "in the catalog" in m for m in messages) == exact


class Killed(BaseException):
    """As a SIGKILL would: nothing after it runs (not an Exception: no handler catches it)."""


@pytest.mark.parametrize("step", ["table commit", "token write", "committed.json",
                                  "catalog entry", "in-flight mark cleared"])
def test_a_commit_killed_after_any_step_is_finished_by_the_next_with_the_run_once(
        env, monkeypatch, step):
    from kafka_archive import catalog
    from kafka_archive.plan import inflight

    cfg, storage, tokens = env
    protocol.commit(cfg, run(env, "r0", {0: (0, 4)}), storage, tokens, NOW)
    plan = run(env, "r1", {0: (4, 9), 1: (0, 3)})
    after = {"table commit": (iceberg, "commit_tables"),
             "token write": (type(tokens), "write"),
             "committed.json": (Storage, "put_bytes"),
             "catalog entry": (catalog, "append"),
             "in-flight mark cleared": (inflight, "clear")}[step]
    real = getattr(*after)

    def then_killed(*args, **kwargs):
        real(*args, **kwargs)
        raise Killed(step)
    with monkeypatch.context() as patched:
        patched.setattr(*after, then_killed)
        with pytest.raises(Killed):
            protocol.commit(cfg, plan, storage, tokens, NOW)
    if tokens.read(GROUP, TOPIC).token.run_id == "r1":  # a token never covers what the table lacks
        assert iceberg.run_snapshot(table(env), "r1") is not None
    protocol.commit(cfg, plan, storage, tokens, NOW)  # the re-executed plan's commit
    t = table(env)
    assert [s.summary[iceberg.RUN_ID] for s in t.metadata.snapshots] == ["r0", "r1"]
    assert rows(t) == sorted([(0, o, f"r0 {o}".encode()) for o in range(4)]
                             + [(0, o, f"r1 {o}".encode()) for o in range(4, 9)]
                             + [(1, o, f"r1 {o}".encode()) for o in range(3)])
    assert dict(tokens.read(GROUP, TOPIC).token.offsets) == {0: 9, 1: 3}
    from kafka_archive.tools import verify

    report = verify.verify_group(cfg, GROUP, storage, tokens, full=True)
    assert not report.errors(), report.render()


def test_the_tables_view_shows_snapshots_and_messages_per_hour(env):
    from kafka_archive.tools import tables as views

    cfg, storage, tokens = env
    protocol.commit(cfg, run(env, "r1", {0: (0, 5), 1: (0, 3)}), storage, tokens, NOW)
    view = views.describe(iceberg.Tables(cfg), GROUP, TOPIC, per_hour=True)
    assert (view.name, view.run, view.records, view.files) == ("archive.orders.eu", "r1", 8, 2)
    assert view.history == [("append", "r1")]
    assert view.per_hour == {"2023-11-14T22:00Z": 8}  # 1_700_000_000_000 ms + a few
    assert "archive.orders.eu: 8 records in 2 files, snapshot" in views.render([view])


def test_readers_make_no_table_and_credentials_are_looked_up_only_when_a_table_is_opened(env):
    from kafka_archive.tools import tables as views

    cfg, storage, tokens = env
    looked_up = []
    tables = iceberg.Tables(cfg, lambda: looked_up.append(1) or {})
    assert looked_up == []  # a commit of a group without tables never gets this far
    assert tables.find(GROUP, TOPIC) is None and views.describe(tables, GROUP, TOPIC) is None
    assert looked_up == [1]
    protocol.commit(cfg, run(env, "r1", {0: (0, 5)}), storage, tokens, NOW, tables)
    assert tables.find(GROUP, TOPIC).current_snapshot().summary[iceberg.RUN_ID] == "r1"
    assert looked_up == [1]  # once per catalog


def test_a_catalog_s_conn_id_brings_its_properties_from_the_connection(tmp_path):
    cfg = table_config(tmp_path, "{prod: {type: sql, conn_id: iceberg_prod}}", "{catalog: prod}")
    asked = []
    tables = iceberg.Tables(cfg, dict, lambda conn_id: asked.append(conn_id) or {
        "uri": f"sqlite:///{tmp_path}/from-connection.db"})
    assert tables.table(GROUP, TOPIC).location() == f"file://{tmp_path}/archive/{GROUP}/{TOPIC}"
    assert asked == ["iceberg_prod"] and (tmp_path / "from-connection.db").exists()
    with pytest.raises(TerminalError, match="iceberg_catalogs.prod.conn_id iceberg_prod"):
        iceberg.Tables(cfg).find(GROUP, TOPIC)  # where no Airflow connection can be had
