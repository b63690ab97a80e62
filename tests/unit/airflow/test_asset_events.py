"""What a commit's asset events say: one per topic the run advanced with something new,
the table and its snapshot for a table group."""

from __future__ import annotations

from kafka_archive import config
from kafka_archive.airflow import assets


def load(tmp_path, group: str):
    path = tmp_path / "kafka-archive.yaml"
    path.write_text(f"kafka: {{bootstrap_servers: 'b:9092'}}\narchive_root: s3://bucket/archive\n"
                    f"groups: {{g: {group}}}\n")
    return config.load(path)


SUMMARY = {"run_id": "r1", "tokens": {"orders": {"0": 5}, "idle": {"0": 7}, "rewound": {"0": 9}},
           "by_topic": {"orders": {"records": 5, "files": 1, "replaced": 0},
                        "idle": {"records": 0, "files": 0, "replaced": 0},
                        "rewound": {"records": 0, "files": 0, "replaced": 2}},
           "table_snapshots": {"orders": 42}}


def test_an_event_per_topic_that_received_or_lost_files(tmp_path):
    events = assets.commit_events(load(tmp_path, "{}"), "g", SUMMARY)
    assert [(a.uri, a.name) for a, _ in events] == [
        ("s3://bucket/archive/g/orders", "kafka_archive/g/orders"),
        ("s3://bucket/archive/g/rewound", "kafka_archive/g/rewound")]  # idle: nothing new
    assert events[0][1] == {"group": "g", "topic": "orders", "run_id": "r1",
                            "offsets": {"0": 5}, "records": 5, "files": 1, "replaced": 0,
                            "replaces": False}


def test_a_commit_announced_again_says_it_replaces_the_first(tmp_path):
    events = assets.commit_events(load(tmp_path, "{}"), "g", SUMMARY, replaces=True)
    assert [extra["replaces"] for _, extra in events] == [True, True]


def test_a_table_groups_event_names_its_table_and_snapshot(tmp_path):
    cfg = load(tmp_path, "{format: {kind: parquet}, table: {namespace: raw}}")
    [(asset, extra), _] = assets.commit_events(cfg, "g", SUMMARY)
    assert (extra["table"], extra["catalog"], extra["snapshot_id"]) == ("raw.orders", "local", 42)
    assert assets.alias("g").name == "kafka_archive_g"


def test_a_finalize_adds_an_event_per_time_partition_with_its_range(tmp_path):
    cfg = load(tmp_path, "{layout: {kind: event_time, granularity: hour}}")
    events = assets.finalize_events(cfg, "g", "run-7", {
        "orders": ["dt=2026-11-25/hr=09", "dt=2026-11-25/hr=10"], "idle": []})
    assert [(a.uri, a.name) for a, _ in events] == [
        ("s3://bucket/archive/g/orders/_SUCCESS", "kafka_archive/g/orders/finalized")] * 2
    assert events[1][1] == {
        "group": "g", "topic": "orders", "run_id": "run-7", "partition": "dt=2026-11-25/hr=10",
        "url": "s3://bucket/archive/g/orders/dt=2026-11-25/hr=10",
        "start_ms": 1795600800000, "end_ms": 1795604400000,
        "start": "2026-11-25T10:00:00Z", "end": "2026-11-25T11:00:00Z", "replaces": False}


def test_an_hour_finalized_again_says_it_replaces_the_first(tmp_path):
    """Issue 41: a rewind's re-archive finalized the hour again with nothing telling a
    loader that it replaced what it had loaded (which hours do: commit.finalizing, checked
    by the simulation's loader)."""
    cfg = load(tmp_path, "{layout: {kind: event_time, granularity: hour}}")
    hours = ["dt=2026-11-25/hr=09", "dt=2026-11-25/hr=10"]
    events = assets.finalize_events(cfg, "g", "run-8", {"orders": hours},
                                    {"orders": ["dt=2026-11-25/hr=09"]})
    assert [extra["replaces"] for _, extra in events] == [True, False]
