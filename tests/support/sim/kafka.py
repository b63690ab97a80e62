"""The simulation's Kafka: partitions that grow, lose their head to retention, lose
messages below their head to the log cleaner (a compacted topic's superseded records),
gain offsets no reader sees (transaction markers, aborted transactions), and topics that
come and go. The plan and the operators' tools see it through kafka-python's consumer API,
the job's slice bodies through librdkafka's (RangeConsumer, read by archive.source).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from types import SimpleNamespace

from kafka import TopicPartition
from kafka.structs import OffsetAndTimestamp

from kafka_archive.errors import TransientError


@dataclass
class Partition:
    earliest: int = 0
    end: int = 0
    # offset -> timestamp ms of each message still held; an offset below `end` not here
    # (and not below `earliest`) is one Kafka never had for a reader (a marker)
    messages: dict[int, int] = field(default_factory=dict)
    produced: set[int] = field(default_factory=set)  # every message offset ever written
    event_ms: dict[int, int] = field(default_factory=dict)  # offset -> its event's time
    created_ms: dict[int, int] = field(default_factory=dict)  # offset -> its timestamp, kept
    # offset -> the audit source its header names (an audited producer's messages), or
    # the whole value (a monitoring event)
    sources: dict[int, str] = field(default_factory=dict)
    values: dict[int, bytes] = field(default_factory=dict)
    # offset -> how many messages held it before the current one (an unclean leader
    # election cut it, and a later message took it again)
    epochs: dict[int, int] = field(default_factory=dict)
    cut: set[int] = field(default_factory=set)  # offsets cut, not taken again yet
    # an open transaction's messages (offset -> timestamp ms): written, but neither they
    # nor anything after them is seen by a read_committed reader until it ends
    open_txn: dict[int, int] = field(default_factory=dict)

    @property
    def stable(self) -> int:
        """The last stable offset: a read_committed reader's end of the log."""
        return min(self.open_txn, default=self.end)

    def append(self, count: int, now_ms: int, marker: bool, late_ms: int = 0,
               source: str | None = None, value: bytes | None = None,
               transaction: bool = False) -> None:
        """late_ms: the messages' events happened this long before they are produced.
        transaction: in a transaction left open (see end_transaction)."""
        for _ in range(count):
            if self.end in self.cut:  # another message at an offset once held
                self.cut.discard(self.end)
                self.epochs[self.end] = self.epochs.get(self.end, 0) + 1
                self.sources.pop(self.end, None)  # (not the cut message's header or value)
                self.values.pop(self.end, None)
            if transaction:
                self.open_txn[self.end] = self.created_ms[self.end] = now_ms
                self.event_ms[self.end] = now_ms - late_ms
                self.end += 1
                continue
            self.messages[self.end] = self.created_ms[self.end] = now_ms
            self.event_ms[self.end] = now_ms - late_ms
            if source is not None:
                self.sources[self.end] = source
            if value is not None:
                self.values[self.end] = value
            self.produced.add(self.end)
            self.end += 1
        if marker:  # a transaction's commit marker takes an offset no reader sees
            self.end += 1

    def end_transaction(self, commit: bool) -> None:
        """The open transaction ends: committed, its messages are seen from now on;
        aborted (or timed out), never. Its marker takes an offset either way."""
        if not self.open_txn:
            return
        if commit:
            self.messages.update(self.open_txn)
            self.produced.update(self.open_txn)
        self.open_txn.clear()
        self.end += 1

    def abort(self, count: int) -> None:
        """A transaction of count messages aborted: their offsets and its abort marker
        are taken, and no read_committed reader sees any of them."""
        self.end += count + 1

    def compact(self, count: int) -> list[int]:
        """The log cleaner removes up to count messages below the active segment (every
        other one from the log's start, as superseded records of a key would be; the last
        two stay): the message offsets it removed. The log's start offset does not move."""
        cleanable = sorted(o for o in self.messages if o < min(self.end - 2, self.stable))
        gone = cleanable[::2][:count]
        for o in gone:
            del self.messages[o]
        return gone

    def truncate(self, count: int) -> list[int]:
        """An unclean leader election: the new leader lacks the log's last `count`
        offsets, which the next messages take again (other messages at offsets a reader
        may have seen). The message offsets it cut."""
        end = max(self.earliest, self.end - count)
        gone = sorted(o for o in self.messages if o >= end)
        for o in gone:  # lost with the old leader: no longer a message to archive
            del self.messages[o]
            self.produced.discard(o)
        for o in [o for o in self.open_txn if o >= end]:  # (its end's marker may come)
            del self.open_txn[o]
        self.cut.update(range(end, self.end))
        self.end = end
        return gone

    def retain_from(self, offset: int) -> list[int]:
        """Retention deletes every offset below offset (never past the last stable
        offset); the message offsets it deleted."""
        offset = min(offset, self.stable)
        gone = [o for o in self.messages if o < offset]
        for o in gone:
            del self.messages[o]
        self.earliest = max(self.earliest, offset)
        return gone


AUDIT_HEADER = "kafka-archive-source"  # config.Audit's default source_header


class Kafka:
    """event_time: message values are JSON with the event's time (`ts`, ms), for a group
    that lays files out by event time; registry: Avro in the Confluent wire format
    instead, of the schema versions sim.registry gives by offset."""

    def __init__(self, event_time: bool = False, registry: bool = False):
        self.event_time, self.registry = event_time, registry
        self.topics: dict[str, list[Partition]] = {}
        # topics no group archives (names starting with _: the audit's monitoring topic),
        # out of the steps' choices
        self.internal: dict[str, list[Partition]] = {}
        # deleted topics: gone for every reader; their history stays for the invariants
        self.deleted: set[str] = set()
        self.down = False  # unreachable: every client fails as brokers.consumer's does
        # partitions without a leader (their broker down): a look-up or read of one fails,
        # as kafka-python's and librdkafka's do once their retries and timeouts are spent
        self.offline: set[tuple[str, int]] = set()
        # (topic, partition, offset) -> values of messages an unclean election cut there
        self.cut_values: dict[tuple[str, int, int], set[bytes]] = {}
        # a replay's target world: some messages have no key (every 5th offset from 4),
        # and values of three sizes (a padding of 0, 10 or 20 bytes by the offset)
        self.keyless = False

    def reachable(self) -> None:
        if self.down:
            raise TransientError("Kafka at sim:9092 is unreachable: NoBrokersAvailable")

    def led(self, tps) -> None:
        """Each partition has a leader, or the look-up fails as LookupRetrying's does."""
        self.reachable()
        if offline := sorted({(tp.topic, tp.partition) for tp in tps} & self.offline):
            raise TransientError(f"Kafka at sim:9092: no leader for {offline[0][0]}/"
                                 f"{offline[0][1]}: KafkaTimeoutError (simulated)")

    def create(self, topic: str, partitions: int) -> None:
        self.topics.setdefault(topic, [Partition() for _ in range(partitions)])

    def key(self, offset: int) -> bytes | None:
        return None if self.keyless and offset % 5 == 4 else b"k"

    def partitions(self, topic: str) -> list[Partition]:
        return self.topics.get(topic) or self.internal[topic]

    def headers(self, topic: str, partition: int, offset: int) -> list | None:
        source = self.partitions(topic)[partition].sources.get(offset)
        return None if source is None else [(AUDIT_HEADER, source.encode())]

    def values_ever(self, topic: str, partition: int, offset: int) -> set[bytes]:
        """The values of every message that has held the offset (see Partition.epochs)."""
        return {self.value(topic, partition, offset, epoch) for epoch in range(
            self.partitions(topic)[partition].epochs.get(offset, 0) + 1)} | self.cut_values.get(
            (topic, partition, offset), set())

    def truncate(self, topic: str, partition: int, count: int) -> list[int]:
        """Partition.truncate, keeping the values of the messages it cuts (an event's
        value names its time, which the next message at the offset replaces)."""
        p = self.topics[topic][partition]
        # (every message the cut offsets held: one the log cleaner removed before the cut
        # may be archived too)
        for o in [o for o in p.produced if o >= max(p.earliest, p.end - count)]:
            self.cut_values.setdefault((topic, partition, o), set()).add(
                self.value(topic, partition, o))
        return p.truncate(count)

    def value(self, topic: str, partition: int, offset: int, epoch: int | None = None) -> bytes:
        """epoch: of the offset's messages, which (default: the one Kafka holds now)."""
        if (stored := self.partitions(topic)[partition].values.get(offset)) is not None:
            return stored
        if self.registry:
            from tests.support.sim import registry

            return registry.value(topic, partition, offset,
                                  self.topics[topic][partition].event_ms[offset])
        if self.event_time and offset % 7 == 3:
            return b"not json"  # a parser's dead letter
        if self.event_time:
            return json.dumps({"ts": self.topics[topic][partition].event_ms[offset],
                               "id": f"{topic}/{partition}/{offset}"}).encode()
        if epoch is None:
            epoch = self.partitions(topic)[partition].epochs.get(offset, 0)
        return f"{topic}/{partition}/{offset}".encode() + (
            b"." * (offset % 3 * 10) if self.keyless else b"") + (
            f"~{epoch}".encode() if epoch else b"")

    def consumer_topics(self) -> set[str]:
        """The topics a client sees (whether Kafka is reachable or not)."""
        return (set(self.topics) | set(self.internal)) - self.deleted

    def consumer(self, isolation: str | None = None) -> Consumer:
        self.reachable()
        return Consumer(self, committed=isolation != "read_uncommitted")

    def range_consumer(self) -> RangeConsumer:
        """What brokers.range_consumer gives the job: librdkafka's consumer."""
        self.reachable()
        return RangeConsumer(self)


class _Message:
    """A confluent_kafka Message as archive.source reads one: a record or an error event."""

    def __init__(self, offset=None, key=None, value=None, timestamp=0, error=None,
                 headers=None):
        self._offset, self._key, self._value = offset, key, value
        self._timestamp, self._error, self._headers = timestamp, error, headers

    def error(self):
        return self._error

    def offset(self):
        return self._offset

    def key(self):
        return self._key

    def value(self):
        return self._value

    def timestamp(self):
        return (1, self._timestamp)  # TIMESTAMP_CREATE_TIME

    def headers(self):
        return self._headers


class _EndOfPartition:
    def code(self):
        from confluent_kafka import KafkaError
        return KafkaError._PARTITION_EOF

    def fatal(self):
        return False


class RangeConsumer:
    """librdkafka's consumer as archive.source.read drives it (assign at an offset,
    consume, unassign), as the broker answers: from the earliest offset left where
    retention deleted the assigned one (auto.offset.reset earliest), messages in offset
    order past the slice's end too (the reader must stop at it), offsets no reader sees
    skipped, an end-of-partition event at the log's end (its last stable offset: it reads
    committed messages only), nothing of a deleted topic but
    that event."""

    def __init__(self, kafka: Kafka):
        self.kafka, self.at = kafka, None

    def assign(self, tps) -> None:
        [tp] = tps
        self.at = (tp.topic, tp.partition, tp.offset)

    def consume(self, count: int, timeout: float = 0) -> list:
        self.kafka.reachable()
        topic, partition, position = self.at
        self.kafka.led([TopicPartition(topic, partition)])
        if topic in self.kafka.deleted:
            return [_Message(error=_EndOfPartition())]
        p = self.kafka.topics[topic][partition]
        position = max(position, p.earliest)
        offsets = sorted(o for o in p.messages if position <= o < p.stable)[:count]
        found = [_Message(o, self.kafka.key(o), self.kafka.value(topic, partition, o),
                          p.messages[o], headers=self.kafka.headers(topic, partition, o))
                 for o in offsets]
        self.at = (topic, partition, (offsets[-1] + 1) if offsets else p.stable)
        if len(found) < count:  # the rest of the log read: its (last stable) end
            found.append(_Message(error=_EndOfPartition()))
        return found

    def unassign(self) -> None:
        self.at = None

    def close(self) -> None:
        pass


class Consumer:
    """The kafka-python KafkaConsumer calls the plan, the job's driver, rewind and
    accept-loss make; committed: read_committed (the config's level), else an open
    transaction's messages are seen too, and the log's end is its high watermark."""

    def __init__(self, kafka: Kafka, committed: bool = True):
        self.kafka, self.committed = kafka, committed
        self.positions: dict[TopicPartition, int] = {}
        self.paused: set[TopicPartition] = set()

    def topics(self) -> set[str]:
        return self.kafka.consumer_topics()

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        parts = None if topic in self.kafka.deleted else (
            self.kafka.topics.get(topic) or self.kafka.internal.get(topic))
        return None if parts is None else set(range(len(parts)))

    def _part(self, tp: TopicPartition) -> Partition:
        return self.kafka.partitions(tp.topic)[tp.partition]

    def _end(self, p: Partition) -> int:
        return p.stable if self.committed else p.end

    def _seen(self, p: Partition) -> dict[int, int]:
        """offset -> timestamp of each message this reader sees."""
        return {o: t for o, t in (p.messages.items() if self.committed else
                                  [*p.messages.items(), *p.open_txn.items()])
                if o < self._end(p)}

    def beginning_offsets(self, tps) -> dict:
        self.kafka.led(tps)
        return {tp: self._part(tp).earliest for tp in tps}

    def end_offsets(self, tps) -> dict:  # (read_committed: the last stable offset)
        self.kafka.led(tps)
        return {tp: self._end(self._part(tp)) for tp in tps}

    def offsets_for_times(self, wanted: dict) -> dict:
        self.kafka.led(wanted)
        found = {}
        for tp, ms in wanted.items():
            seen = self._seen(self._part(tp))
            hits = sorted(o for o, t in seen.items() if t >= ms)
            found[tp] = OffsetAndTimestamp(hits[0], seen[hits[0]], None) if hits else None
        return found

    # reading messages, as far as brokers.timestamps_at reads them (the finalizer)
    def assign(self, tps) -> None:
        self.positions = {tp: 0 for tp in tps}

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.positions[tp] = offset

    def position(self, tp: TopicPartition) -> int:
        return self.positions[tp]

    def pause(self, *tps) -> None:
        self.paused.update(tps)

    def resume(self, *tps) -> None:
        self.paused.difference_update(tps)

    def poll(self, timeout_ms: int = 0) -> dict:
        """Each assigned partition's next message (one at a time is as much as its
        callers need)."""
        self.kafka.led(self.positions)
        polled = {}
        for tp, position in self.positions.items():
            p = self._part(tp)
            seen = self._seen(p)
            held = [o for o in seen if o >= max(position, p.earliest)]
            if tp in self.paused:
                continue
            if held:
                first = min(held)
                polled[tp] = [SimpleNamespace(offset=first, timestamp=seen[first],
                                              key=self.kafka.key(first),
                                              value=self.kafka.value(tp.topic, tp.partition,
                                                                     first))]
                self.positions[tp] = first + 1
            else:
                self.positions[tp] = self._end(p)
        return polled

    def close(self) -> None:
        pass
