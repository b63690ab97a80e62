"""Finalizing against a catalog another writer changes meanwhile: the entry is made again
from the catalog as it is, so a watermark never moves back (issue 31 §2.6). A local
archive, the real catalog; Kafka is a small in-process stand-in (what finalize asks)."""

import json

import pytest

from kafka_archive import brokers, catalog, layout
from kafka_archive.commit import finalizing
from kafka_archive.errors import VersionConflict
from kafka_archive.storage import Storage, local_path
from kafka_archive.tokens import LocalTokenStore, Token
from tests.support.catalog_race import RivalLandsFirst
from tests.support.local_config import local_config

HOUR = 3_600_000
NOW = 1_767_225_600_000 + 10 * HOUR  # 2026-01-01T10:00Z


class Kafka:
    """kafka-python's consumer as far as finalize asks it: one topic, caught up."""

    def topics(self):
        return {"t"}

    def partitions_for_topic(self, topic):
        return {0}

    def beginning_offsets(self, tps):
        return {tp: 0 for tp in tps}

    def end_offsets(self, tps):
        return {tp: 10 for tp in tps}

    def close(self):
        pass


@pytest.fixture(autouse=True)
def no_open_transaction(monkeypatch):
    """finalize's look past the last stable offset (finalizing.held_back) asks the same
    stand-in, read uncommitted: its end is the same, so no transaction is open."""
    monkeypatch.setattr(brokers, "consumer", lambda cfg, bootstrap=None, isolation=None: Kafka())


def loses_first_race(cfg, later_ms: int) -> RivalLandsFirst:
    """Storage where another finalizer appends its entry (a later watermark, no new
    partitions) just before this one's first log entry."""
    return RivalLandsFirst(cfg, "partitioned", lambda cat: {
        "kind": "finalize", "topics": {"t": {"through_ms": later_ms, "paths": []}}})


@pytest.fixture
def cfg(tmp_path):
    made = local_config(tmp_path, """\
        partitioned:
          layout: {kind: event_time, granularity: hour}
          parser: {kind: json, field: ts}
          lateness: 1h
        """)
    root = made.archive_root
    urls = [layout.event_data_file(root, "partitioned", "t", f"dt=2026-01-01/hr=0{h}", 0, 1, h,
                                   {"kind": "sequencefile"}) for h in (0, 1)]
    row = catalog.catalog_row({"topic": "t", "partition": 0, "start": 0, "end": 10,
                               "records": 10, "bytes": 2, "gaps": [], "audit": [],
                               "files": [{"url": u, "records": 5, "bytes": 1} for u in urls]},
                              catalog.run_folder(root, "partitioned", "r1"), {"generation": 1},
                              made.group("partitioned").layout, root, "partitioned")
    catalog.append(Storage(), made, "partitioned",
                   lambda cat: {"kind": "commit", "run_id": "r1", "at": "x", "add": [row]})
    tokens = LocalTokenStore(tmp_path / "tokens")
    tokens.write(Token("partitioned", "t", "b", {0: 10}, run_id="r1"), None)
    return made, tokens


def test_a_finalize_that_loses_the_race_never_moves_the_watermark_back(cfg):
    made, tokens = cfg
    later = NOW + 5 * HOUR  # the other finalizer saw a later time
    storage = loses_first_race(made, later)
    done = finalizing.finalize(made, made.group("partitioned"), storage, tokens, Kafka(), NOW,
                               "r2")
    assert storage.raced and done == {"paths": {"t": ["dt=2026-01-01/hr=00", "dt=2026-01-01/hr=01"]},
                                      "again": {"t": []}}
    state = catalog.open_catalog(Storage(), made, "partitioned").state.topics["t"]
    assert state.finalized_through_ms == later  # not NOW - 1h, which this run computed
    assert state.open_time == set()
    stored = local_path(layout.finalized_state(made.archive_root, "partitioned", "t"))
    assert json.loads(stored.read_text()) == {"through_ms": later}
    for hour in (0, 1):
        assert local_path(layout.success_marker(made.archive_root, "partitioned", "t",
                                                f"dt=2026-01-01/hr=0{hour}")).exists()


def test_the_race_is_real_without_the_fresh_read(cfg):
    """The stand-in really makes this finalizer's first entry lose its compare-and-swap."""
    made, _ = cfg
    storage = loses_first_race(made, NOW)
    seq = catalog.open_catalog(storage, made, "partitioned").state.seq
    with pytest.raises(VersionConflict):
        storage.put_if(catalog.store.entry_url(made.archive_root, "partitioned", seq + 1),
                       b"{}", None)


def test_a_finalize_killed_before_its_entry_leaves_a_later_recorded_watermark(cfg, monkeypatch):
    """Issue 56 (a suspect, real): another finalizer recorded a later watermark since this
    one read the catalog; this one, killed before its catalog entry, wrote its older one
    over it, and a catalog rebuild would have moved the watermark back."""
    made, tokens = cfg
    later = NOW + 5 * HOUR
    url = layout.finalized_state(made.archive_root, "partitioned", "t")
    Storage().put_bytes(url, json.dumps({"through_ms": later}).encode())

    def killed(*args, **kwargs):
        raise SystemExit("killed before the catalog entry")

    monkeypatch.setattr(catalog, "append", killed)
    with pytest.raises(SystemExit):
        finalizing.finalize(made, made.group("partitioned"), Storage(), tokens, Kafka(), NOW, "r2")
    assert json.loads(local_path(url).read_text()) == {"through_ms": later}
