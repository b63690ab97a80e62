"""The simulation's Kafka: partitions that grow, lose their head to retention, gain
offsets no reader sees (transaction markers, compacted records), and topics that come
and go. The plan and the operators' tools see it through kafka-python's consumer API,
the job's slice bodies through the Batches librdkafka's reader (archive.source) yields.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from kafka import TopicPartition
from kafka.structs import OffsetAndTimestamp

from kafka_archive.errors import TransientError
from kafka_archive.formats.batch import Batch, binary_array, headers_array


@dataclass
class Partition:
    earliest: int = 0
    end: int = 0
    # offset -> timestamp ms of each message still held; an offset below `end` not here
    # (and not below `earliest`) is one Kafka never had for a reader (a marker)
    messages: dict[int, int] = field(default_factory=dict)
    produced: set[int] = field(default_factory=set)  # every message offset ever written

    def append(self, count: int, now_ms: int, marker: bool) -> None:
        for _ in range(count):
            self.messages[self.end] = now_ms
            self.produced.add(self.end)
            self.end += 1
        if marker:  # a transaction's commit marker takes an offset no reader sees
            self.end += 1

    def retain_from(self, offset: int) -> list[int]:
        """Retention deletes every offset below offset; the message offsets it deleted."""
        offset = min(offset, self.end)
        gone = [o for o in self.messages if o < offset]
        for o in gone:
            del self.messages[o]
        self.earliest = max(self.earliest, offset)
        return gone


class Kafka:
    def __init__(self):
        self.topics: dict[str, list[Partition]] = {}
        # deleted topics: gone for every reader; their history stays for the invariants
        self.deleted: set[str] = set()
        self.down = False  # unreachable: every client fails as brokers.consumer's does

    def reachable(self) -> None:
        if self.down:
            raise TransientError("Kafka at sim:9092 is unreachable: NoBrokersAvailable")

    def create(self, topic: str, partitions: int) -> None:
        self.topics.setdefault(topic, [Partition() for _ in range(partitions)])

    def value(self, topic: str, partition: int, offset: int) -> bytes:
        return f"{topic}/{partition}/{offset}".encode()

    def consumer(self) -> Consumer:
        self.reachable()
        return Consumer(self)

    def batches(self, topic: str, partition: int, start: int, end: int):
        """What archive.source.read yields for [start, end): from the earliest offset
        left where retention deleted the head since the plan; nothing of a deleted topic."""
        self.reachable()
        if topic in self.deleted:
            return
        p = self.topics[topic][partition]
        offsets = [o for o in range(max(start, p.earliest), min(end, p.end)) if o in p.messages]
        if offsets:
            yield Batch(np.array(offsets, np.int64), binary_array([b"k"] * len(offsets)),
                        binary_array([self.value(topic, partition, o) for o in offsets]),
                        np.array([p.messages[o] for o in offsets], np.int64),
                        headers_array([None] * len(offsets)))


class Consumer:
    """The kafka-python KafkaConsumer calls the plan, the job's driver, rewind and
    accept-loss make."""

    def __init__(self, kafka: Kafka):
        self.kafka = kafka

    def topics(self) -> set[str]:
        return set(self.kafka.topics) - self.kafka.deleted

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        parts = None if topic in self.kafka.deleted else self.kafka.topics.get(topic)
        return None if parts is None else set(range(len(parts)))

    def _part(self, tp: TopicPartition) -> Partition:
        return self.kafka.topics[tp.topic][tp.partition]

    def beginning_offsets(self, tps) -> dict:
        return {tp: self._part(tp).earliest for tp in tps}

    def end_offsets(self, tps) -> dict:
        return {tp: self._part(tp).end for tp in tps}

    def offsets_for_times(self, wanted: dict) -> dict:
        found = {}
        for tp, ms in wanted.items():
            hits = sorted(o for o, t in self._part(tp).messages.items() if t >= ms)
            found[tp] = OffsetAndTimestamp(hits[0], self._part(tp).messages[hits[0]], None) \
                if hits else None
        return found

    def close(self) -> None:
        pass
