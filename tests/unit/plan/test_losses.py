"""Accepting data lost to retention: the record comes first, the token moves by
compare-and-swap, and the catalog reads the range back as lost."""

import json

import pytest

from kafka_archive import config, layout
from kafka_archive.plan import losses
from kafka_archive import catalog
from kafka_archive.plan.losses import AcceptedLoss, AcceptLossError
from kafka_archive.storage import Storage
from kafka_archive.tokens import LocalTokenStore, Token


class Kafka:
    """kafka-python's consumer, as far as accept() asks it: the earliest offsets."""

    def __init__(self, earliest: dict[int, int]):
        self.earliest = earliest

    def beginning_offsets(self, tps):
        return {tp: self.earliest[tp.partition] for tp in tps}


@pytest.fixture
def setup(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text(f"kafka: {{bootstrap_servers: 'b:9092'}}\narchive_root: file://{tmp_path}/a\n"
                    f"token_root: {tmp_path}/t\n")
    cfg = config.load(path)
    tokens = LocalTokenStore(tmp_path / "t")
    tokens.write(Token("backup", "orders", "b:9092", {0: 5, 1: 40}), expected_version=None)
    return cfg, tokens, Storage()


def test_accept_records_then_moves_only_the_partitions_with_a_gap(setup):
    cfg, tokens, storage = setup
    accepted = losses.accept(cfg, tokens, Kafka({0: 12, 1: 30}), storage, "backup", "orders",
                             "outage", "oncall", "2026-11-23T12:00:00+00:00")
    assert accepted == [AcceptedLoss("backup", "orders", 0, 5, 12, "oncall",
                                     "2026-11-23T12:00:00+00:00", "outage")]
    assert dict(tokens.read("backup", "orders").token.offsets) == {0: 12, 1: 40}
    record = json.loads(storage.get_bytes(layout.accepted_loss(cfg.archive_root, "backup",
                                                               "orders", 0, 5)))
    assert record["by"] == "oncall" and record["reason"] == "outage"
    assert losses.accepted(storage, cfg.archive_root, "backup") == accepted
    contents = catalog.contents(storage, cfg, "backup")
    assert contents.lost == {("orders", 0): [(5, 12)]} and contents.accepted == tuple(accepted)


def test_nothing_to_accept_changes_nothing(setup):
    cfg, tokens, storage = setup
    before = tokens.read("backup", "orders").version
    with pytest.raises(AcceptLossError, match=r"backup/orders: no retention gap in partition 1 "
                                              r"\(token 1: 40; Kafka's earliest 1: 30\)"):
        losses.accept(cfg, tokens, Kafka({0: 12, 1: 30}), storage, "backup", "orders", "x",
                      "me", "now", partition=1)
    with pytest.raises(AcceptLossError, match="no token for backup/clicks"):
        losses.accept(cfg, tokens, Kafka({0: 12}), storage, "backup", "clicks", "x", "me", "now")
    with pytest.raises(AcceptLossError, match="say why"):
        losses.accept(cfg, tokens, Kafka({0: 12}), storage, "backup", "orders", " ", "me", "now")
    assert tokens.read("backup", "orders").version == before
    assert losses.accepted(storage, cfg.archive_root, "backup") == []


def test_a_plan_in_flight_with_the_topic_is_refused(setup):
    cfg, tokens, storage = setup
    plan_url = layout.run_file(cfg.archive_root, "backup", "r1", "plan.json")
    storage.put_bytes(plan_url, json.dumps({"token_versions": {"orders": "v1"}}).encode())
    storage.put_bytes(layout.inflight_marker(cfg.archive_root, "backup"),
                      json.dumps({"run_id": "r1", "plan": plan_url}).encode())
    with pytest.raises(AcceptLossError, match="run r1 of group backup is in flight with topic "
                                              "orders"):
        losses.accept(cfg, tokens, Kafka({0: 12, 1: 30}), storage, "backup", "orders", "x",
                      "me", "now")


class Rows:
    """A catalog as lost_spans reads it: current rows of one partition, no loss yet."""

    def __init__(self, *spans):
        self.spans, self.state = spans, catalog.State()

    def rows(self, topic, partition, generation=None, end_after=None):
        return [{"start": a, "end": b} for a, b in self.spans if b > end_after]


@pytest.mark.parametrize("spans, lost", [
    ((), [(0, 500)]),                    # nothing archived: all of [0, 500) is lost
    (((0, 300), (300, 1000)), []),       # a rewind to 0: the archive holds it all, no loss
    (((0, 200), (300, 1000)), [(200, 300)]),  # in neither Kafka nor the archive
    (((100, 200), (300, 400)), [(0, 100), (200, 300), (400, 500)]),
    (((600, 700),), [(0, 500)]),         # the archive starts above Kafka's earliest
])
def test_a_loss_is_what_neither_kafka_nor_the_archive_holds(spans, lost):
    assert losses.lost_spans(Rows(*spans), "orders", 0, 0, 500) == lost
