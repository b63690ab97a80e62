"""Replay, the Spark side: one task per source partition reads the partition's files in
offset order and produces each message to the target with the same key, value (null
kept null), timestamp and headers, through librdkafka's idempotent producer.

Exactly once across crashes. The idempotent producer removes the duplicates of its own
retries, within one producer session. Across sessions (a task killed and run again),
each source partition keeps a progress file (`_replays/<id>/progress/partition=<n>.json`,
written by compare-and-swap): before the first message, the target partition's end
offset (`target_start`); then, every PROGRESS_EVERY messages, how many were acknowledged.
A non-transactional producer's messages take one offset each, so on resume the target's
end offset minus `target_start` is how many messages of the sequence landed, recorded or
not: the task skips exactly those, after checking that the last one in the target is the
message it expects (key, value, headers and CreateTime timestamp); anything else means
another writer uses the target partition, and the task refuses. With --hash-by-key
several source partitions share a target partition, so a resumed task skips what its
progress file says was acknowledged (recorded every POLL_EVERY messages there): at least
once for what was sent after that, at most POLL_EVERY messages per source partition.

A message the target will refuse (a record timestamp outside its window, a record larger
than its max.message.bytes, a message without a key for a compacted topic: refused_by) is
found before it is sent, so the target holds a prefix of the sequence and the same
command resumes once the setting is changed; the producer's batches are kept within the
target's max.message.bytes, so no batch of messages that fit is refused whole.
"""

from __future__ import annotations

import json
import logging
import time
from datetime import datetime, timezone
from functools import partial
from typing import Iterator

from kafka_archive import layout, retries, spark
from kafka_archive.archive.archived_files import read_archived
from kafka_archive.config import Config
from kafka_archive.errors import ArchiveError, TerminalError
from kafka_archive.formats.records import Record
from kafka_archive.plan.rewinds import format_ms
from kafka_archive.storage import Storage

log = logging.getLogger(__name__)

PROGRESS_EVERY = 20_000  # messages between progress records (each waits for every ack)
POLL_EVERY = 1_000  # messages between looks at the delivery reports (a refusal stops there)
PRODUCER_SETTINGS = {"enable.idempotence": True, "acks": "all", "linger.ms": 20,
                     # by key, as Java clients partition (librdkafka's default differs)
                     "partitioner": "murmur2_random",
                     "batch.size": 1 << 20, "message.max.bytes": 16 << 20,
                     "queue.buffering.max.kbytes": 256 << 10,
                     # a delivery report only for a refused message: one per message
                     # (a Python callback each, run by poll and flush) was a third of the
                     # producing loop's CPU; flush still waits for every acknowledgement
                     "delivery.report.only.error": True}


def producer_settings(settings: dict[str, str]) -> dict:
    """PRODUCER_SETTINGS with batches no larger than the target topic's max.message.bytes:
    a batch of messages that each fit, grown past it, is refused whole."""
    limit = int(settings.get("max.message.bytes", PRODUCER_SETTINGS["batch.size"]))
    return {**PRODUCER_SETTINGS,
            "batch.size": max(1, min(PRODUCER_SETTINGS["batch.size"], limit - BATCH_OVERHEAD))}


class ReplayError(TerminalError):
    """The replay cannot be done as asked; nothing was produced."""


class RefusedForGood(ReplayError):
    """The target refuses a message and will refuse it again on every retry: something
    must change first (the message says what)."""


def run(session, config: Config, replay_url: str, max_rate: int | None = None,
        storage: Storage | None = None) -> list[dict]:
    """Replay every source partition of the plan, one Spark task each, each at most
    max_rate messages per second; their summaries. `storage`: the driver's (its
    environment's by default)."""
    plan = json.loads((storage or Storage.from_environment()).get_bytes(replay_url))
    parts = plan["partitions"]
    if not parts:
        return []
    task = partial(_task, config, plan, max_rate)
    return spark.mapped(session, len(parts), task, "the replay")


def _task(config: Config, plan: dict, max_rate: int | None, i: int) -> Iterator[dict]:
    """Spark task i: source partition i replayed; its summary."""
    part, storage = plan["partitions"][i], Storage.from_environment()
    try:
        yield replay_partition(config, plan, part, storage, max_rate)
    except ArchiveError as exc:  # for the command that started the replay, in its words
        storage.put_bytes(layout.replay_failure(config.archive_root, plan["replay_id"]),
                          json.dumps({"partition": part["partition"], "error": str(exc),
                                      "repeats": isinstance(exc, RefusedForGood)}).encode())
        raise


def records(storage: Storage, files: list[dict], since_ms: int | None, until_ms: int | None
            ) -> Iterator[Record]:
    """The source partition's messages to replay, in offset order: each file's within its
    [start, end), and in the time range when there is one."""
    for f in files:
        for r in read_archived(storage, f["url"]):
            if r.offset >= f["end"]:
                break
            if r.offset >= f["start"] and (since_ms is None or r.timestamp_ms >= since_ms) \
                    and (until_ms is None or r.timestamp_ms < until_ms):
                yield r


def same_message(expected: Record, found) -> bool:
    """An archived record and a consumed message (kafka-python's ConsumerRecord) are the
    same message; the timestamp counts only when the target keeps CreateTime."""
    return (found.key == expected.key and found.value == expected.value
            and list(found.headers or ()) == list(expected.headers)
            and (found.timestamp_type != 0 or found.timestamp == expected.timestamp_ms))


class Progress:
    """A source partition's progress file, written only by compare-and-swap."""

    def __init__(self, storage: Storage, url: str):
        self.storage, self.url = storage, url
        data, self.version = storage.get_versioned(url)
        self.state = json.loads(data) if data is not None else None

    def save(self, **changes) -> None:
        self.state = {**(self.state or {}), **changes,
                      "updated_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        self.version = self.storage.put_if(self.url, json.dumps(self.state, sort_keys=True).encode(),
                                           self.version)


def replay_partition(config: Config, plan: dict, part: dict, storage: Storage,
                     rate: int | None = None) -> dict:
    from kafka import TopicPartition

    from kafka_archive import brokers

    request = plan["request"]
    topic, source = request["to_topic"], part["partition"]
    target = part["target_partition"]
    where = f"{request['topic']} partition {source} -> {topic} " + (
        "by key" if target is None else f"partition {target}")
    progress = Progress(storage, layout.replay_progress(config.archive_root, plan["replay_id"], source))
    started = time.monotonic()
    consumer = brokers.consumer(config, plan["target_bootstrap"])
    try:
        landed = last = None
        if target is not None:
            tp = TopicPartition(topic, target)
            end = consumer.end_offsets([tp])[tp]
            if progress.state is None:
                progress.save(source_partition=source, target_partition=target, target_start=end,
                              acked=0, done=False)
            landed = end - progress.state["target_start"]
            if landed < progress.state["acked"]:
                raise ReplayError(f"{where}: the target holds {landed} messages of this replay, "
                                  f"but {progress.state['acked']} were acknowledged: it was "
                                  "truncated or made anew; replay into a new topic")
            if landed:
                last = next(brokers.read_range(consumer, tp, end - 1, end), None)
        elif progress.state is None:
            progress.save(source_partition=source, target_partition=None, acked=0, done=False)
    finally:
        consumer.close()
    skip = progress.state["acked"] if landed is None else landed
    if progress.state["done"] and skip == progress.state["acked"]:  # finished before
        return {"partition": source, "target_partition": target, "messages": skip, "sent": 0,
                "skipped": skip, "bytes": 0, "seconds": round(time.monotonic() - started, 3)}
    try:
        settings = target_settings(config, plan["target_bootstrap"], topic)
    except Exception as exc:  # not allowed to describe configs: the broker judges alone
        log.warning("%s: the target topic's settings are not readable (%r); a refused message "
                    "stops the partition at the next look at the delivery reports", where, exc)
        settings = {}
    producer = brokers.producer(config, plan["target_bootstrap"],
                                **producer_settings(settings))
    sent = index = size = 0
    deliveries = Deliveries()
    first = None  # the first archived offset of this replay's sequence
    for r in records(storage, part["files"], request["since_ms"], request["until_ms"]):
        index += 1
        first = r.offset if first is None else first
        if index <= skip:
            if index == skip and last is not None and not same_message(r, last):
                raise ReplayError(
                    f"{where}: the target's last message (offset {last.offset}) is not "
                    f"archived offset {r.offset}, the message this replay sent there: "
                    "another producer writes to the target partition; stop it, or replay "
                    "into a new topic")
            continue
        if (why := refused_by(settings, r, int(time.time() * 1000))) is not None:
            # stopped before it: the target holds a prefix of the sequence, and the same
            # command resumes here once the setting is changed
            _acknowledged(producer, deliveries, where, config, plan["target_bootstrap"], topic)
            progress.save(acked=index - 1, last_offset=r.offset - 1)
            landed_note = (f"{index - 1} messages of this replay are in the target (archived "
                           f"offsets {first} up to the one before {r.offset})" if index > 1
                           else "nothing of this replay is in the target")
            raise RefusedForGood(f"{where}: stopped before archived offset {r.offset}: {why}; "
                                 f"{landed_note}. This refusal repeats on every retry: change "
                                 "the setting, then run the same command again: it resumes at "
                                 f"offset {r.offset}")
        _send(producer, topic, target, r, deliveries)
        sent += 1
        size += len(r.key or b"") + len(r.value or b"")
        if sent % POLL_EVERY == 0:
            producer.poll(0)  # serve delivery reports: a refusal stops the partition now
            if deliveries.refused is not None:
                _acknowledged(producer, deliveries, where, config, plan["target_bootstrap"],
                              topic)
        if deliveries.pending >= (PROGRESS_EVERY if target is not None else POLL_EVERY):
            _acknowledged(producer, deliveries, where, config, plan["target_bootstrap"], topic)
            progress.save(acked=index, last_offset=r.offset)
        if rate:
            ahead = sent / rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)  # the rate limit asked for
    if index < skip:
        raise ReplayError(f"{where}: the target holds {skip} messages since the replay "
                          f"started, more than the {index} it replays: another producer "
                          "writes to the target partition")
    _acknowledged(producer, deliveries, where, config, plan["target_bootstrap"], topic)
    progress.save(acked=index, done=True)
    return {"partition": source, "target_partition": target, "messages": index, "sent": sent,
            "skipped": min(skip, index), "bytes": size,
            "seconds": round(time.monotonic() - started, 3)}


class Deliveries:
    """What the producer reports back: messages sent since the last check, and the first
    refused one with its error."""

    def __init__(self):
        self.pending, self.refused = 0, None

    def report(self, r: Record, error, message) -> None:
        if error is not None and self.refused is None:
            self.refused = (r, error)


def _send(producer, topic: str, partition: int | None, r: Record, deliveries: Deliveries) -> None:
    kwargs = {"key": r.key, "timestamp": r.timestamp_ms, "headers": list(r.headers) or None,
              "on_delivery": partial(deliveries.report, r)}
    if partition is not None:
        kwargs["partition"] = partition
    while True:
        try:
            producer.produce(topic, r.value, **kwargs)
            break
        except BufferError:  # the local queue is full: let deliveries drain it
            producer.poll(0.05)
    deliveries.pending += 1


def _acknowledged(producer, deliveries: Deliveries, where: str, config: Config, bootstrap: str,
                  topic: str) -> None:
    """Wait until every message sent is acknowledged; a refused one fails the task,
    naming the message, and whether the refusal will repeat."""
    while producer.flush(30):
        pass  # still unacknowledged: librdkafka retries until message.timeout.ms
    if deliveries.refused is not None:
        r, error = deliveries.refused
        raise refusal(where, r, error, lambda: target_settings(config, bootstrap, topic))
    deliveries.pending = 0


TIMESTAMP_SETTINGS = ("message.timestamp.type", "message.timestamp.after.max.ms",
                      "message.timestamp.before.max.ms")
# the target topic's settings a broker refuses a message by (refused_by)
REFUSING_SETTINGS = (*TIMESTAMP_SETTINGS, "max.message.bytes", "cleanup.policy")
BATCH_OVERHEAD = 61  # bytes of a v2 record batch's header


def record_size(r: Record) -> int:
    """The record's size in a batch of its own, uncompressed (this producer does not
    compress), as the broker measures it against max.message.bytes (Kafka's v2 format)."""
    def varint(n: int) -> int:
        zigzag, size = (n << 1) ^ (n >> 63), 1
        while zigzag >= 0x80:
            zigzag, size = zigzag >> 7, size + 1
        return size

    def field(data: bytes | None) -> int:
        return varint(-1) if data is None else varint(len(data)) + len(data)

    body = (3 + field(r.key) + field(r.value) + varint(len(r.headers))  # attributes, deltas
            + sum(field(name.encode()) + field(value) for name, value in r.headers))
    return BATCH_OVERHEAD + varint(body) + body


def refused_by(settings: dict[str, str], r: Record, now_ms: int) -> str | None:
    """Why the target topic (its settings, target_settings') will refuse this message,
    as its broker checks it: a message without a key for a compacted topic, a record
    larger than max.message.bytes, a CreateTime timestamp too far ahead of or behind the
    clock; None when it will not. Checked before the message is sent, so that a refusal
    leaves the target a prefix of the sequence (other refusals stop the partition at the
    next look at the delivery reports)."""
    if r.key is None and "compact" in settings.get("cleanup.policy", ""):
        return (f"it has no key, and the target topic is compacted (cleanup.policy "
                f"{settings['cleanup.policy']}): Kafka refuses a message without a key there "
                "(replay into a topic with cleanup.policy delete)")
    limit = settings.get("max.message.bytes")
    if limit is not None and record_size(r) > int(limit):
        return (f"its record is {record_size(r)} bytes, beyond the target topic's "
                f"max.message.bytes {limit} (raise max.message.bytes above {record_size(r)})")
    if settings.get("message.timestamp.type", "CreateTime") == "CreateTime":
        for name, off_by in (("message.timestamp.after.max.ms", r.timestamp_ms - now_ms),
                             ("message.timestamp.before.max.ms", now_ms - r.timestamp_ms)):
            if name in settings and off_by > int(settings[name]):
                when = format_ms(r.timestamp_ms)
                return (f"its record timestamp {when} is {off_by // 1000} s "
                        f"{'ahead of' if name.endswith('after.max.ms') else 'behind'} the clock, "
                        f"beyond the target topic's {name} {settings[name]} (message.timestamp"
                        f".type CreateTime; raise {name} above {off_by}, or set the type to "
                        "LogAppendTime: the messages then get the time they land)")
    return None


def target_settings(config: Config, bootstrap: str, topic: str) -> dict[str, str]:
    """The target topic's settings a broker refuses messages by, as it applies them."""
    from kafka.admin import ConfigResource, ConfigResourceType

    from kafka_archive import brokers

    admin = brokers.admin_client(brokers.python_client_settings(config, bootstrap), 30000)
    try:  # kafka-python 3: {"topic": {name: {config: {"value": ...}}}}; its default
        # filter returns only settings changed from the broker's defaults: "all" here
        entries = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)],
                                         config_filter="all")
        return {name: entry["value"] for name, entry in entries["topic"][topic].items()
                if name in REFUSING_SETTINGS}
    finally:
        admin.close()


def refusal(where: str, r: Record, error, settings) -> ArchiveError:
    """The error for a message the target refused (found in the delivery reports, past the
    checks of refused_by), classified as librdkafka says (retries.librdkafka_error: a
    leader moving is worth a retry). A refusal that repeats on every retry (Kafka answers
    INVALID_RECORD, INVALID_TIMESTAMP, MSG_SIZE_TOO_LARGE or RECORD_LIST_TOO_LARGE) is
    RefusedForGood naming the offset, the cause as the target's settings show it, and
    what to change. settings: a function reading the target's settings. error: the
    KafkaError librdkafka reported."""
    from confluent_kafka import KafkaError

    for_good = (KafkaError.INVALID_RECORD, KafkaError.INVALID_TIMESTAMP,
                KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE)
    if error.code() not in for_good:
        return retries.librdkafka_error(error, f"{where}: the target refused archived offset "
                                               f"{r.offset}")
    try:
        found = settings()
    except Exception as exc:  # the advice without the figures
        found = {"unknown": repr(exc)}
    # the cause as the settings show it; for a timestamp, the window of the broker's clock
    # (the checks of refused_by, with this machine's clock, let it through)
    why = refused_by(found, r, int(time.time() * 1000))
    if why is None and error.code() in (KafkaError.INVALID_TIMESTAMP, KafkaError.INVALID_RECORD):
        ahead_ms = r.timestamp_ms - int(time.time() * 1000)
        name = ("message.timestamp.after.max.ms" if ahead_ms > 0
                else "message.timestamp.before.max.ms")
        if error.code() == KafkaError.INVALID_TIMESTAMP or name in found:
            why = (f"its record timestamp {format_ms(r.timestamp_ms)} is {abs(ahead_ms) // 1000}"
                   f" s {'ahead of' if ahead_ms > 0 else 'behind'} this machine's clock; the "
                   f"topic's {name} is {found.get(name, '?')} (message.timestamp.type "
                   f"{found.get('message.timestamp.type', '?')}; raise {name} of the target "
                   f"topic above {abs(ahead_ms)}, or set its message.timestamp.type to "
                   "LogAppendTime: the messages then get the time they land)")
    return RefusedForGood(
        f"{where}: the target refuses archived offset {r.offset}: "
        f"{why or 'Kafka says ' + error.str()}. This refusal repeats on every retry: change "
        f"the target topic (kafka-configs.sh --alter --entity-type topics --entity-name "
        f"<topic> --add-config ...), then run the replay again ({error.str()})")


def summary_lines(rows: list[dict], seconds: float) -> list[str]:
    """The job's log: a line per source partition, then the totals."""
    lines = [f"partition {r['partition']} -> {r['target_partition'] if r['target_partition'] is not None else 'by key'}: "
             f"{r['sent']} sent, {r['skipped']} already in the target, {r['bytes']} bytes, "
             f"{r['seconds']} s" for r in sorted(rows, key=lambda r: r["partition"])]
    sent, size = sum(r["sent"] for r in rows), sum(r["bytes"] for r in rows)
    lines.append(f"replayed {sent} messages, {size} bytes in {seconds:.1f} s "
                 f"({size / (1 << 20) / max(seconds, 1e-9):.1f} MiB/s)")
    return lines
