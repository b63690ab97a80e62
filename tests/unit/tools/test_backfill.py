"""A backfill racing a commit that changed its rows (issue 31 §2.6): its entry was built
once, so after losing the log's compare-and-swap it brought back rows a rewind had taken
out. Now it is made against the catalog as it is, and refused. A local archive, the real
catalog, backup files written by the real writer."""

import json

import pytest

from kafka_archive import catalog, formats, layout
from kafka_archive.formats import records
from kafka_archive.storage import Storage, local_path
from kafka_archive.tools.backfill import BackfillError, backfill
from tests.support.catalog_race import RivalLandsFirst
from tests.support.local_config import local_config

T0 = 1_767_225_600_000  # 2026-01-01T00:00Z
FORMAT = {"kind": "sequencefile", "key": "msgpack", "compression": "none"}


def rewind_lands_first(cfg) -> RivalLandsFirst:
    """Storage where a commit taking the partitioned group's row out (a rewind's) lands
    just before the backfill's catalog entry."""
    return RivalLandsFirst(cfg, "partitioned", lambda cat: {
        "kind": "commit", "run_id": "rewind", "at": "x", "run": {"run_id": "rewind"},
        "remove": cat.rows("t")})


@pytest.fixture
def cfg(tmp_path):
    made = local_config(tmp_path, f"""\
        backup: {{format: {json.dumps(FORMAT)}}}
        partitioned:
          format: {json.dumps(FORMAT)}
          layout: {{kind: event_time, granularity: hour}}
          parser: {{kind: json, field: ts}}
        """)
    root, storage = made.archive_root, Storage()
    backup = layout.data_file(root, "backup", "t", 0, 1, 0, FORMAT)
    local_path(backup).parent.mkdir(parents=True)
    with open(local_path(backup), "wb") as out:
        writer = formats.open_writer(out, FORMAT, local_path(backup).name)
        for i in range(10):
            writer.append(records.Record(i, None, json.dumps({"ts": T0 + i}).encode(), T0 + i))
        writer.close()
    for group, url in (("backup", backup),
                       ("partitioned", layout.event_data_file(root, "partitioned", "t",
                                                              "dt=2026-01-01/hr=00", 0, 1, 0,
                                                              FORMAT))):
        run = catalog.run_folder(root, group, "r1")
        plan = {"run_id": "r1", "created_at": "2026-01-01T01:00:00+00:00", "bootstrap": "b",
                "generation": 1, "finalized": {}}
        storage.put_bytes(f"{run}/plan.json", json.dumps(plan).encode())
        row = catalog.catalog_row({"topic": "t", "partition": 0, "start": 0, "end": 10,
                                   "records": 10, "bytes": 1, "gaps": [], "audit": [],
                                   "min_timestamp_ms": T0, "max_timestamp_ms": T0 + 9,
                                   "files": [{"url": url, "records": 10, "bytes": 1}]},
                                  run, plan, made.group(group).layout, root, group)
        catalog.append(storage, made, group, lambda cat, row=row: {
            "kind": "commit", "run_id": "r1", "at": "x", "run": {"run_id": "r1"},
            "add": [row]})
    return made


def test_a_backfill_whose_rows_a_run_changed_meanwhile_is_refused(cfg):
    storage = rewind_lands_first(cfg)
    with pytest.raises(BackfillError, match=r"t partition 0 \[0, 10\): a run changed it "
                                            r"while the backfill ran"):
        backfill(cfg, storage, "partitioned", "t", "bf-1", "2026-01-02T00:00:00+00:00",
                 from_offset=0)
    assert storage.raced
    assert catalog.open_catalog(Storage(), cfg, "partitioned").rows("t") == []  # not back


def test_the_same_backfill_without_a_race_replaces_the_row(cfg):
    summary = backfill(cfg, Storage(), "partitioned", "t", "bf-1", "2026-01-02T00:00:00+00:00",
                       from_offset=0)
    assert len(summary["slices"]) == 1
    [row] = catalog.open_catalog(Storage(), cfg, "partitioned").rows("t")
    assert (row["start"], row["end"], row["records"]) == (0, 10, 10)
