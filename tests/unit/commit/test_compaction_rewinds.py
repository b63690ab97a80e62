"""Rewinds into a compacted row, on the simulation's world (the real library on local
storage and a SQLite Iceberg catalog): each rewind kind keeps what lies before the
rewound piece, copy-on-write, and replaces the rest in one snapshot; pyiceberg reads each
offset once, and time travel to before the rewind still reads the compacted file."""

import pytest

from kafka_archive import catalog
from kafka_archive.storage import Storage

from tests.support.sim.explore import run_steps

RUNS = [("produce", "t", 0, 5, False, 0), ("run", "scheduled__2026-01-01T00:05:00+00:00", 0, 0, 0),
        ("produce", "t", 0, 4, False, 0), ("run", "scheduled__2026-01-01T00:06:00+00:00", 0, 0, 0),
        ("produce", "t", 0, 3, False, 0), ("run", "scheduled__2026-01-01T00:07:00+00:00", 0, 0, 0),
        ("compact", 2, 0)]  # one row [0, 12) of pieces [0, 5) [5, 9) [9, 12)
AGAIN = ("run", "scheduled__2026-01-01T03:00:00+00:00", 0, 0, 0)

# each rewind kind -> the rows of t/0 after the next run: (start, end, pieces, by whom)
KINDS = {
    "--to-offset inside a piece": ([("rewind", "t", 0, 7)],
                                   [(0, 5, 1, "kept"), (5, 12, 0, "archived")]),
    "line deleted, Kafka keeps from inside a piece": (
        [("retention", "t", 0, 7), ("delete_line", "t", 0)],
        [(0, 9, 2, "kept"), (9, 12, 0, "archived")]),
    "token deleted": ([("delete_token", "t")], [(0, 12, 0, "archived")]),
    "--to-time before the first message": ([("rewind_time", "t", 0, 200)],
                                           [(0, 12, 0, "archived")]),
}


@pytest.mark.parametrize("kind", KINDS, ids=KINDS)
def test_a_rewind_into_a_compacted_row_keeps_what_is_before_it(kind, tmp_path, shape="tables"):
    steps, expected = KINDS[kind]
    result = run_steps(RUNS + steps + [AGAIN], tmp_path / "world", shape=shape)
    assert result.violation is None, "\n".join(result.trace)
    config = _config(tmp_path, shape)  # the world the steps left, as a reader opens it
    cat = catalog.open_catalog(Storage(), config, shape)
    rows = cat.rows("t", 0)
    assert [(r["start"], r["end"], len(r.get("pieces", ())),
             "kept" if r.get("pieces") else "archived") for r in rows] == expected
    assert all(r["_run"].endswith("scheduled__2026-01-01T03_00_00_00_00") for r in rows)
    table = _tables(config).find(shape, "t")
    offsets = sorted(table.scan(row_filter="kafka.partition == 0").to_arrow()
                     .column("kafka").combine_chunks().field("offset").to_pylist())
    assert offsets == list(range(12))
    compacted = next(s for s in table.metadata.snapshots if s.summary.operation.value == "replace")
    before = sorted(table.scan(snapshot_id=compacted.snapshot_id).to_arrow()
                    .column("kafka").combine_chunks().field("offset").to_pylist())
    assert before == list(range(12))  # time travel reads the compacted file, kept
    assert compacted.summary["kafka-archive.offsets"] == "0: [0, 12)"


def test_a_parsed_tables_rewind_keeps_its_dead_letters_before_the_cut(tmp_path):
    """The parsed shape: the kept part of each hour's file and of the dead-letter file."""
    steps, expected = KINDS["--to-offset inside a piece"]
    result = run_steps(RUNS + steps + [AGAIN], tmp_path / "world", shape="parsed")
    assert result.violation is None, "\n".join(result.trace)
    config = _config(tmp_path, "parsed")
    rows = catalog.open_catalog(Storage(), config, "parsed").rows("t", 0)
    assert [(r["start"], r["end"]) for r in rows] == [(0, 5), (5, 12)]
    dead = _tables(config).find("parsed", "t", dead_letters=True)
    held = sorted(dead.scan().to_arrow().column("kafka").combine_chunks().field("offset")
                  .to_pylist())
    table = _tables(config).find("parsed", "t")
    parsed = sorted(table.scan().to_arrow().column("kafka").combine_chunks().field("offset")
                    .to_pylist())
    assert sorted(held + parsed) == list(range(12)) and held  # each once, in one of the two


def _config(tmp_path, shape):
    from tests.support.local_config import local_config
    from tests.support.sim.world import SHAPES

    group, layout_of = SHAPES[shape]
    return local_config(tmp_path / "world", f"{group}: {{{layout_of}, "
                        "policy: {max_records: 6, max_delay: 1m}}\n", iceberg_catalog=True)


def _tables(config):
    from kafka_archive.commit import iceberg

    return iceberg.Tables(config)
