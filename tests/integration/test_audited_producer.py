"""AuditedProducer against a real broker: headers, counts of acknowledged messages only,
events per window on close, and an idle producer still reporting closed windows."""

from __future__ import annotations

import json
import time

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import KafkaError

from kafka_archive.audit.producer import AuditedProducer

MIN = 60_000


def make_topics(kafka: str, *topics: tuple[str, dict]) -> None:
    admin = KafkaAdminClient(bootstrap_servers=kafka)
    admin.create_topics([NewTopic(name, 1, 1, topic_configs=cfg) for name, cfg in topics])
    admin.close()


def read_all(kafka: str, topic: str, at_least: int = 0, timeout_s: float = 30) -> list:
    """Every message of partition 0, waiting (with a deadline) until there are at_least."""
    consumer = KafkaConsumer(bootstrap_servers=kafka, auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, 0)])
    found, deadline = [], time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for batch in consumer.poll(timeout_ms=500).values():
            found += batch
        if len(found) >= at_least and consumer.position(TopicPartition(topic, 0)) >= \
                consumer.end_offsets([TopicPartition(topic, 0)])[TopicPartition(topic, 0)]:
            break
    consumer.close()
    return found


def test_counts_only_acknowledged_messages_per_window(kafka, unique):
    data, monitoring = f"ap-{unique}", f"_mon-ap-{unique}"
    make_topics(kafka, (data, {"max.message.bytes": "2000"}), (monitoring, {}))
    base = (int(time.time() * 1000) // MIN - 10) * MIN
    producer = AuditedProducer(source="svc-a", monitoring_topic=monitoring,
                               bootstrap_servers=kafka, acks="all", retries=0)
    sent = [producer.send(data, value=b"x", timestamp_ms=base + 1) for _ in range(3)]
    sent += [producer.send(data, value=b"y", timestamp_ms=base + MIN + 1) for _ in range(2)]
    producer.flush()
    too_big = producer.send(data, value=b"z" * 5000, timestamp_ms=base + 2)  # the broker refuses it
    producer.close()
    assert all(f.succeeded() for f in sent)
    with pytest.raises(KafkaError):
        too_big.get()

    events = [json.loads(m.value) for m in read_all(kafka, monitoring)]
    totals = {}
    for e in events:
        assert (e["source"], e["topic"], e["window_ms"]) == ("svc-a", data, MIN)
        totals[e["window_start_ms"]] = totals.get(e["window_start_ms"], 0) + e["count"]
    assert totals == {base: 3, base + MIN: 2}
    # each window opened (count 0, stored before its first message was sent) and counted
    opened = [e["window_start_ms"] for e in events if e["count"] == 0]
    assert opened == [base, base + MIN]
    assert [e["seq"] for e in events if e["count"] == 0] < [e["seq"] for e in events if e["count"]]
    assert len({(e["producer_id"], e["seq"]) for e in events}) == len(events)
    headers = [dict(m.headers) for m in read_all(kafka, data)]
    assert headers == [{"kafka-archive-source": b"svc-a"}] * 5


def test_an_idle_producer_reports_closed_windows_without_flush(kafka, unique):
    data, monitoring = f"idle-{unique}", f"_mon-idle-{unique}"
    make_topics(kafka, (data, {}), (monitoring, {}))
    producer = AuditedProducer(source="svc-b", monitoring_topic=monitoring, window_s=1,
                               bootstrap_servers=kafka, acks="all")
    try:
        producer.send(data, value=b"1").get(timeout=30)
        # no flush, no further send: the reporter thread publishes once the window closes
        opening, event = [json.loads(m.value) for m in read_all(kafka, monitoring, at_least=2)]
        assert (opening["count"], opening["window_start_ms"]) == (0, event["window_start_ms"])
        assert (event["source"], event["topic"], event["count"], event["window_ms"]) == (
            "svc-b", data, 1, 1000)
    finally:
        producer.close()


def test_counts_by_the_timestamp_the_broker_stored_and_heads_a_relayed_message(kafka, unique):
    """What the archive counts each message by, the stored timestamp's window and the
    first source header, is what the producer counted it by: on a LogAppendTime topic
    (the broker replaces the timestamp) and for a relay passing on the original
    message's source header."""
    data, monitoring = f"lat-{unique}", f"_mon-lat-{unique}"
    make_topics(kafka, (data, {"message.timestamp.type": "LogAppendTime"}), (monitoring, {}))
    long_ago = (int(time.time() * 1000) // MIN - 60) * MIN  # an hour before the broker's
    with AuditedProducer(source="relay", monitoring_topic=monitoring, bootstrap_servers=kafka,
                         acks="all") as producer:
        for i in range(5):
            producer.send(data, value=b"v", timestamp_ms=long_ago + i,
                          headers=[("kafka-archive-source", b"origin"), ("trace", b"t")])
    stored = read_all(kafka, data, at_least=5)
    assert all(m.timestamp >= long_ago + 30 * MIN for m in stored)  # the broker's time
    archived: dict[int, int] = {}
    for m in stored:
        archived[m.timestamp // MIN * MIN] = archived.get(m.timestamp // MIN * MIN, 0) + 1
    counted: dict[int, int] = {}
    for e in (json.loads(m.value) for m in read_all(kafka, monitoring)):
        counted[e["window_start_ms"]] = counted.get(e["window_start_ms"], 0) + e["count"]
    assert {w: n for w, n in counted.items() if n} == archived and sum(counted.values()) == 5
    assert counted[long_ago] == 0  # the window opened by the send time, counted by none
    assert [m.headers for m in stored] == [[("kafka-archive-source", b"relay"),
                                            ("kafka-archive-source", b"origin"),
                                            ("trace", b"t")]] * 5
