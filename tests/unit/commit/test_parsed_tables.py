"""An event-time table group (the parsed shape) from slice writer to table, on a local
archive root and a real SQLite Iceberg catalog: each message is in the topic's table as
typed columns or in its dead-letter table with why, never both, never neither; new
fields become columns in the run's own snapshot; a rewind replaces hours whole."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from kafka_archive import config, layout
from kafka_archive.archive import job, slice_writer
from kafka_archive.commit import iceberg, protocol, table_maintenance
from kafka_archive.formats.records import Record
from kafka_archive.plan.planning import Plan, Slice
from kafka_archive.storage import Storage
from kafka_archive.tokens import LocalTokenStore
from kafka_archive.tools import verify

GROUP, TOPIC = "events", "clicks"
NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
HOUR = 3_600_000
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


@pytest.fixture
def env(tmp_path):
    path = tmp_path / "kafka-archive.yaml"
    path.write_text(
        f"kafka: {{bootstrap_servers: 127.0.0.1:1}}\narchive_root: file://{tmp_path}/archive\n"
        f"iceberg_catalogs: {{local: {{type: sql, uri: 'sqlite:///{tmp_path}/catalog.db'}}}}\n"
        f"groups:\n  {GROUP}:\n    layout: {{kind: event_time, granularity: hour}}\n"
        f"    parser: {{kind: json, field: ts, unit: ms}}\n    format: {{kind: parquet}}\n"
        f"    table: {{namespace: archive, columns: {{amount: double}}}}\n")
    cfg = config.load(path)
    return cfg, Storage(), LocalTokenStore(tmp_path / "tokens"), iceberg.Tables(cfg)


def message(offset: int, value) -> Record:
    body = value if isinstance(value, bytes) else json.dumps(value).encode()
    return Record(offset, f"k{offset}".encode(), body, T0 + offset, [("h", b"\x00\xff")])


def archive(env, run_id: str, messages: dict[int, list[Record]], superseded=(),
            created: datetime = NOW) -> Plan:
    """What the job does for a plan of one slice per partition: the slice writer's files
    and the manifest."""
    cfg, storage, tokens, tables = env
    current = tokens.read(GROUP, TOPIC)
    slices = tuple(Slice(TOPIC, p, ms[0].offset, ms[-1].offset + 1, 1 << 30)
                   for p, ms in messages.items())
    plan = Plan(group=GROUP, run_id=run_id, created_at=created.isoformat(), bootstrap="127.0.0.1:1",
                generation=1, format={"kind": "parquet"}, slices=slices,
                token_versions={TOPIC: current.version},
                token_runs={TOPIC: current.token.run_id if current.token else None},
                base_offsets={TOPIC: {str(p): o for p, o in (current.token.offsets.items()
                                                             if current.token else ())}},
                superseded=tuple(superseded), columns={TOPIC: tables.columns(GROUP, TOPIC)})
    rows = []
    for s in slices:
        out = slice_writer.OpenSlice(job.target(cfg, plan, TOPIC), s.partition, s.start, s.end,
                                     s.max_bytes)
        for r in messages[s.partition]:
            out.add(r)
        rows.append(out.finish(storage))
    storage.put_bytes(layout.run_file(cfg.archive_root, GROUP, run_id, "plan.json"),
                      plan.to_json())
    storage.put_bytes(layout.run_file(cfg.archive_root, GROUP, run_id, "manifest.json"),
                      json.dumps({"run_id": run_id, "slices": rows}).encode())
    return plan


def commit(env, plan: Plan) -> dict:
    cfg, storage, tokens, tables = env
    return protocol.commit(cfg, plan, storage, tokens, NOW, tables)


MESSAGES = {
    0: [message(0, {"ts": T0, "amount": 1, "user": "a", "tags": ["x"]}),
        message(1, b"not json"),
        message(2, {"ts": T0 + 2 * HOUR, "amount": "lots"}),       # amount is a double
        message(3, {"ts": T0 - 3 * HOUR, "amount": 2.5, "n": 7})],  # late: its own hour
    1: [message(0, {"ts": T0 + 5, "amount": 3, "n": 8, "user": None}),
        message(1, {"event": "no ts"})]}


def test_fields_become_typed_columns_and_misfits_dead_letters(env):
    cfg, storage, tokens, tables = env
    summary = commit(env, archive(env, "r1", MESSAGES))
    assert summary["records"] == 6 and summary["quarantined"] == 3
    t = tables.find(GROUP, TOPIC)
    assert t.name() == ("archive", TOPIC)
    # the declared column first; the parser's field is a column of its own too
    assert [(f.name, str(f.field_type)) for f in t.schema().fields[2:]] == [
        ("amount", "double"), ("ts", "long"), ("n", "long"), ("user", "string"),
        ("tags", "string")]  # in the order the run's files (by path) bring them
    assert [f.name for f in t.spec().fields] == ["event_time_hour"]
    got = sorted(t.scan().to_arrow().to_pylist(), key=lambda r: (r["kafka"]["partition"],
                                                                 r["kafka"]["offset"]))
    assert [(r["kafka"]["partition"], r["kafka"]["offset"], r["amount"], r["user"], r["tags"],
             r["n"]) for r in got] == [(0, 0, 1.0, "a", '["x"]', None), (0, 3, 2.5, None, None, 7),
                                       (1, 0, 3.0, None, None, 8)]
    assert got[1]["event_time"] == datetime(2025, 12, 31, 21, tzinfo=timezone.utc)
    assert got[0]["kafka"]["timestamp"] == datetime(2026, 1, 1, tzinfo=timezone.utc)
    # one file per (slice, hour): the late message's hour is a partition like any other
    assert sorted(f.partition[0] for f in iceberg.current_files(t, []).values()) == \
        sorted([T0 // HOUR - 3, T0 // HOUR, T0 // HOUR])
    dead = tables.find(GROUP, TOPIC, dead_letters=True)
    assert dead.name() == ("archive", TOPIC + "_dlq")
    letters = sorted(dead.scan().to_arrow().to_pylist(),
                     key=lambda r: (r["kafka"]["partition"], r["kafka"]["offset"]))
    assert [(r["kafka"]["partition"], r["kafka"]["offset"], r["key"], r["value"], r["headers"])
            for r in letters] == [
        (0, 1, b"k1", b"not json", [{"name": "h", "value": b"\x00\xff"}]),
        (0, 2, b"k2", message(2, {"ts": T0 + 2 * HOUR, "amount": "lots"}).value,
         [{"name": "h", "value": b"\x00\xff"}]),
        (1, 1, b"k1", b'{"event": "no ts"}', [{"name": "h", "value": b"\x00\xff"}])]
    assert "not a JSON object" in letters[0]["reason"]
    assert "'amount' = \"lots\" does not fit column type double" in letters[1]["reason"]
    assert "no field 'ts'" in letters[2]["reason"]
    assert [s.summary[iceberg.RUN_ID] for s in t.metadata.snapshots] == ["r1"]
    assert [s.summary[iceberg.RUN_ID] for s in dead.metadata.snapshots] == ["r1"]
    report = verify.verify_group(cfg, GROUP, storage, tokens, files=True, tables=tables)
    assert not report.errors(), report.render()
    # no hour waits for a finalize: a table's reader sees each run whole
    from kafka_archive import catalog

    state = catalog.open_catalog(storage, cfg, GROUP).state
    assert state.topics[TOPIC].open_time == set()
    spec = cfg.group(GROUP).layout
    places = {layout.parse_url(cfg.archive_root, f.file_path, spec).place
              for table in (t, dead) for f in iceberg.current_files(table, []).values()}
    assert places == {"table", "quarantine"}


def test_the_next_run_keeps_the_tables_types_and_adds_new_columns_in_its_snapshot(env):
    cfg, storage, tokens, tables = env
    commit(env, archive(env, "r1", MESSAGES))
    later = {0: [message(4, {"ts": T0, "n": 1.5, "city": "Oslo"}),   # n stays long
                 message(5, {"ts": T0, "n": 2, "city": "Rome"})]}
    commit(env, archive(env, "r2", later))
    t = tables.find(GROUP, TOPIC)
    assert [(f.name, str(f.field_type)) for f in t.schema().fields[2:]] == [
        ("amount", "double"), ("ts", "long"), ("n", "long"), ("user", "string"),
        ("tags", "string"), ("city", "string")]
    by_offset = {(r["kafka"]["partition"], r["kafka"]["offset"]): r
                 for r in t.scan().to_arrow().to_pylist()}
    assert by_offset[(0, 5)]["city"] == "Rome" and by_offset[(0, 5)]["n"] == 2
    assert (0, 4) not in by_offset
    # the snapshot before r2 reads without the column, through the same table
    first = t.metadata.snapshots[0].snapshot_id
    assert len(t.scan(snapshot_id=first).to_arrow()) == 3
    dead = tables.find(GROUP, TOPIC, dead_letters=True)
    assert any("'n' = 1.5 does not fit column type long" in r["reason"]
               for r in dead.scan().to_arrow().to_pylist())


def test_a_rewind_replaces_the_runs_files_in_both_tables_at_once(env):
    cfg, storage, tokens, tables = env
    commit(env, archive(env, "r1", MESSAGES))
    old = [f["url"] for row in json.loads(storage.get_bytes(layout.run_file(
        cfg.archive_root, GROUP, "r1", "manifest.json")))["slices"] for f in row["files"]]
    tokens.delete(GROUP, TOPIC)
    commit(env, archive(env, "r2", MESSAGES, superseded=old))
    t, dead = tables.find(GROUP, TOPIC), tables.find(GROUP, TOPIC, dead_letters=True)
    assert len(t.scan().to_arrow()) == 3 and len(dead.scan().to_arrow()) == 3
    assert [s.summary.operation.value for s in t.metadata.snapshots] == ["append", "overwrite"]
    assert all("/r2/" in path for path in iceberg.current_files(t, []))
    report = verify.verify_group(cfg, GROUP, storage, tokens, files=True, tables=tables)
    assert not report.errors(), report.render()


class KilledBeforeTheRows(iceberg.Tables):
    """A commit killed after the dead letters' snapshot, before the rows'."""

    def table(self, group, topic, dead_letters=False):
        if not dead_letters:
            raise KeyboardInterrupt("killed")
        return super().table(group, topic, dead_letters)


def test_a_commit_killed_between_the_two_tables_is_finished_once(env):
    cfg, storage, tokens, tables = env
    plan = archive(env, "r1", MESSAGES)
    with pytest.raises(KeyboardInterrupt):
        protocol.commit(cfg, plan, storage, tokens, NOW, KilledBeforeTheRows(cfg))
    assert tables.find(GROUP, TOPIC) is None and tokens.read(GROUP, TOPIC).token is None
    assert len(tables.find(GROUP, TOPIC, dead_letters=True).scan().to_arrow()) == 3
    commit(env, plan)  # the plan in flight, committed again
    t, dead = tables.find(GROUP, TOPIC), tables.find(GROUP, TOPIC, dead_letters=True)
    assert (len(t.scan().to_arrow()), len(dead.scan().to_arrow())) == (3, 3)
    assert len(dead.metadata.snapshots) == 1
    assert dict(tokens.read(GROUP, TOPIC).token.offsets) == {0: 4, 1: 2}
    report = verify.verify_group(cfg, GROUP, storage, tokens, files=True, tables=tables)
    assert not report.errors(), report.render()


def test_backfill_refuses_a_table_group(env):
    from kafka_archive.tools.backfill import BackfillError, backfill

    cfg, storage, _, _ = env
    with pytest.raises(BackfillError, match="keeps Iceberg tables: rewind it"):
        backfill(cfg, storage, GROUP, TOPIC, "b1", NOW.isoformat(), from_offset=0, to_offset=1,
                 source=GROUP)


def test_files_of_runs_that_never_committed_go_once_older_than_the_snapshots_kept(env):
    cfg, storage, tokens, tables = env
    from datetime import timedelta

    from kafka_archive.plan import inflight

    def files(run_id: str) -> list[str]:
        return [f["url"] for row in json.loads(storage.get_bytes(layout.run_file(
            cfg.archive_root, GROUP, run_id, "manifest.json")))["slices"] for f in row["files"]]

    later = {0: [message(4, {"ts": T0, "n": 1})]}
    given_up = archive(env, "given-up", later, created=NOW - timedelta(days=9))
    recent = archive(env, "recent", later, created=NOW - timedelta(days=1))
    stuck = archive(env, "stuck", later, created=NOW - timedelta(days=30))
    commit(env, archive(env, "r1", MESSAGES))
    inflight.mark(storage, cfg.archive_root, GROUP, "stuck",  # failed, waiting for a person
                  layout.run_file(cfg.archive_root, GROUP, "stuck", "plan.json"))
    t = tables.find(GROUP, TOPIC)
    week, now_ms = 7 * 86_400_000, int(NOW.timestamp() * 1000)
    assert table_maintenance.remove_orphans(t, storage, cfg.archive_root, GROUP, week, now_ms) == 1
    assert storage.size(files("given-up")[0]) is None
    assert all(storage.size(u) is not None for r in ("recent", "stuck", "r1") for u in files(r)
               if u.startswith(t.location()))
    assert len(t.scan().to_arrow()) == 3
    # once a day: the sweep lists and reads everything
    archive(env, "given-up-too", later, created=NOW - timedelta(days=9))
    assert table_maintenance.remove_orphans(t, storage, cfg.archive_root, GROUP, week, now_ms + 1) == 0
    assert table_maintenance.remove_orphans(t, storage, cfg.archive_root, GROUP, week,
                                  now_ms + table_maintenance.SWEEP_EVERY_MS) == 1
    assert given_up and recent and stuck


def test_an_audit_rescan_refuses_a_parsed_table_group(env):
    from kafka_archive.audit import gather
    from kafka_archive.errors import TerminalError

    cfg, storage, _, _ = env
    with pytest.raises(TerminalError, match="keeps its topics' fields, not their headers"):
        gather.archived_by_rescan(cfg, storage, GROUP)
