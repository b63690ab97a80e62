"""A token that cannot be applied holds its topic, not the whole group."""

from dataclasses import replace

from kafka_archive.config import FormatSpec, Group, Policy, TableSpec
from kafka_archive.layout import LayoutSpec
from kafka_archive.plan import runs
from kafka_archive.tokens import LocalTokenStore, Token

GROUP = Group(name="backup", schedule=None, include=(".*",), exclude=("_.*",),
              start_from="earliest", on_retention_gap="fail", format=FormatSpec(),
              policy=Policy(), topic_policies=())


class Kafka:
    def __init__(self, topics):
        self._topics = set(topics)

    def topics(self):
        return self._topics


def test_a_malformed_token_is_its_topics_anomaly(tmp_path):
    tokens = LocalTokenStore(tmp_path)
    tokens.write(Token("backup", "good", "b:9092", {0: 3}), expected_version=None)
    (tmp_path / "backup" / "bad.token").write_text("b:9092 bad 0 seven\n")
    reads, unreadable = runs._read_tokens(tokens, "backup", ["bad", "good"])
    assert list(reads) == ["good"]
    assert [(a.kind, a.topic, a.action) for a in unreadable] == [("malformed_token", "bad", "failed")]
    assert unreadable[0].describe().startswith(f"bad: malformed token {tmp_path}/backup/bad.token, "
                                               "line 1")


def test_a_topic_gone_from_kafka_with_a_token_is_vanished(tmp_path):
    tokens = LocalTokenStore(tmp_path)
    for topic in ("gone", "kept", "_excluded"):
        tokens.write(Token("backup", topic, "b:9092", {0: 3}), expected_version=None)
    reads, _ = runs._read_tokens(tokens, "backup", ["gone", "kept", "_excluded"])
    found = runs._vanished(GROUP, Kafka({"kept"}), reads, {"kept"})
    assert [(a.kind, a.topic) for a in found] == [("vanished", "gone")]
    assert "Kafka has no such topic" in found[0].describe()


def test_a_topic_named_like_a_dead_letter_table_is_held():
    """Issue 41: topic X_dlq and topic X's dead-letter table would be one table, and every
    plan of the group failed; now X_dlq alone is held, named."""
    parsed = replace(GROUP, format=FormatSpec("parquet"), layout=LayoutSpec("event_time"),
                     table=TableSpec())
    found = runs._names_taken(parsed, {"clicks", "clicks_dlq", "orders_dlq"}, set())
    assert [(a.kind, a.topic, a.action) for a in found] == [("name_taken", "clicks_dlq", "failed")]
    assert "the dead-letter table of topic clicks" in found[0].describe()
    assert "exclude clicks_dlq from group backup" in found[0].remedy("backup")
    # the simulation found X_dlq archived before X appeared: X's dead letters went to X_dlq's
    # table and every commit failed; the one archived first keeps the name
    [later] = runs._names_taken(parsed, {"clicks", "clicks_dlq"}, {"clicks_dlq"})
    assert later.topic == "clicks" and "table of topic clicks_dlq" in later.describe()
    assert runs._names_taken(GROUP, {"clicks", "clicks_dlq"}, set()) == []  # no dead-letter tables
