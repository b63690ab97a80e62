from kafka import TopicPartition

from kafka_archive.commit import mirror


def test_the_consumer_group_gets_every_token_offset():
    offsets = mirror.offsets_to_commit({"b": {1: 7, 0: 3}, "a": {0: 0}}, "run-1")
    assert {tp: (o.offset, o.metadata) for tp, o in offsets.items()} == {
        TopicPartition("a", 0): (0, "run-1"), TopicPartition("b", 0): (3, "run-1"),
        TopicPartition("b", 1): (7, "run-1")}
    assert mirror.consumer_group("backup") == "kafka-archive.backup"


def test_nothing_to_mirror_needs_no_broker():
    assert mirror.mirror(None, "backup", {}, "r") is True
