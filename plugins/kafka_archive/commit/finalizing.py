"""The partition finalizer of the event-time layout: `_SUCCESS` in a time partition that
can receive no more data.

A time partition [start, end) of a topic is final once every Kafka partition of the topic
is archived past `end + lateness`: the first message not yet archived of each partition
(its Kafka timestamp; now, when caught up, unless an open transaction holds messages
back: its first message's) is at or after that time. The audit uses the same
computation (archived_through), so both agree on how far a topic is archived.
Until then late events are still written into the partition (new files, named by their
first offset). The topic's watermark, `end` of the newest final partition, is kept in
`<topic>/_finalized.json`; every plan records it, and a message for a partition final
when the run was planned goes to `_late/<time partition>/` instead (kafka_archive.archive.slice_writer):
once `_SUCCESS` is there, a partition's files never change. The time partitions to look
at come from the catalog (those that received files and are not final yet), so finalize
costs what is open, not every file of the topic.
"""

from __future__ import annotations

import json
import logging

from kafka import TopicPartition

from kafka_archive import brokers, catalog, layout
from kafka_archive.config import Config, Group
from kafka_archive.errors import TransientError
from kafka_archive.plan import inflight
from kafka_archive.storage import Storage
from kafka_archive.tokens import MalformedTokenError, TokenStore

log = logging.getLogger(__name__)


def watermark(through_ms: int | None, lateness_s: int) -> int | None:
    """Time partitions ending at or before this are final; None: none is."""
    return None if through_ms is None else through_ms - lateness_s * 1000


def finalize(config: Config, group: Group, storage: Storage, tokens: TokenStore, consumer,
             now_ms: int, run_id: str) -> dict[str, dict[str, list[str]]]:
    """Write `_SUCCESS` into every time partition that has become final, and each
    topic's watermark. `paths`: topic -> the time partitions run `run_id`'s finalize has
    finalized (now, or an earlier attempt of it: a task killed after its catalog entry
    added no Asset event, so its retry announces them again); `again`: those of them a
    reader may have loaded already, to be replaced: final before (a rewind archived their
    offsets again) or finalized by an earlier attempt."""
    if group.layout.kind != "event_time":
        return {"paths": {}, "again": {}}
    cat = catalog.open_catalog(storage, config, group.name, may_rebuild=True)
    record_url = layout.run_file(config.archive_root, group.name, run_id, "finalized.json")
    earlier = json.loads(storage.get_or_none(record_url) or b"{}")
    # a plan in flight took the watermark when it was made: its job files a message by
    # that, so an hour finalized now could still receive files; its run finalizes after
    # its commit (this one is a re-execution of an earlier run's, a Clear)
    holder = inflight.holding(storage, config.archive_root, group.name)
    if holder is not None:
        log.warning("%s: run %s is in flight: nothing is finalized until its commit",
                    group.name, holder)
    through = {} if holder is not None else archived_through(config, group, tokens,
                                                            consumer, now_ms)
    done: dict[str, dict] = {}
    # the catalog's topics too: a final hour a rewind archived again is final again at
    # once, though a partition was never archived since or the topic left Kafka
    for topic in sorted(set(through) | set(cat.state.topics)) if holder is None else ():
        known = cat.state.topics.get(topic)
        if known is None:
            continue
        marks = [watermark(through.get(topic), group.lateness_s), known.finalized_through_ms]
        mark = max((m for m in marks if m is not None), default=None)  # never moves back
        if mark is None:
            continue
        new = sorted(path for path in known.open_time
                     if layout.time_partition_range(path, group.layout)[1] <= mark)
        for path in new:
            storage.put_bytes(layout.success_marker(config.archive_root, group.name, topic,
                                                    path), b"")
        if new or mark != known.finalized_through_ms:
            done[topic] = {"through_ms": mark, "paths": new}
        if new:
            log.info("%s/%s: finalized %s", group.name, topic, ", ".join(new))
    entry = {}
    if done:  # after the markers: a crash in between only means they are written again
        # before the catalog's entry: what this run finalizes, for its retry's events, and
        # each topic's watermark, for a rebuild (one may run inside the append itself)
        record = {t: sorted(set(earlier.get(t, ())) | set(done.get(t, {}).get("paths", ())))
                  for t in sorted(set(earlier) | set(done))}
        if record != earlier:
            storage.put_bytes(record_url, json.dumps(record).encode())
        _record_watermarks(config, group, storage, done)

        def made(fresh: catalog.Catalog) -> dict | None:
            """The entry against the catalog as it is now (a lost compare-and-swap reads
            again): a watermark never moves back, a partition is finalized once."""
            entry.clear()
            for topic, state in done.items():
                known = fresh.state.topics[topic]
                mark = max(state["through_ms"], known.finalized_through_ms or state["through_ms"])
                paths = [path for path in state["paths"] if path in known.open_time]
                if paths or mark != known.finalized_through_ms:
                    entry[topic] = {"through_ms": mark, "paths": paths}
            return {"kind": "finalize", "topics": dict(entry)} if entry else None

        catalog.append(storage, config, group.name, made)
        _record_watermarks(config, group, storage, entry)
    paths, again = {}, {}
    for topic in sorted(set(entry) | set(earlier)):
        known = cat.state.topics.get(topic)
        before = known and known.finalized_through_ms
        now = entry.get(topic, {}).get("paths", [])
        # an earlier attempt's, final still (not opened again by a rewind since)
        announced = [p for p in earlier.get(topic, ()) if p not in now and known
                     and p not in known.open_time and before is not None
                     and layout.time_partition_range(p, group.layout)[1] <= before]
        if now or announced:
            paths[topic] = sorted(now + announced)
            again[topic] = sorted([p for p in now if _final_before(group, p, before)]
                                  + announced)
    return {"paths": paths, "again": again}


def _record_watermarks(config: Config, group: Group, storage: Storage,
                       done: dict[str, dict]) -> None:
    """The run folders' side of each topic's watermark, which a catalog rebuild reads;
    never moved back (another finalizer may have recorded a later one since this one read
    the catalog, and this one may die before its entry)."""
    for topic, state in done.items():
        url = layout.finalized_state(config.archive_root, group.name, topic)
        stored = json.loads(storage.get_or_none(url) or b"{}").get("through_ms")
        if stored is None or state["through_ms"] > stored:
            storage.put_bytes(url, json.dumps({"through_ms": state["through_ms"]}).encode())


def _final_before(group: Group, path: str, watermark_ms: int | None) -> bool:
    """Whether a time partition finalized now had been final before: a rewind archived
    its offsets again and it replaces what readers loaded (watermark_ms: the topic's
    watermark before this finalize)."""
    return (watermark_ms is not None
            and layout.time_partition_range(path, group.layout)[1] <= watermark_ms)


def archived_through(config: Config, group: Group, tokens: TokenStore, consumer,
                     now_ms: int) -> dict[str, int | None]:
    """Topic -> time up to which every partition is archived (None: a partition never was)."""
    topics = sorted(t for t in consumer.topics() if group.selects(t))
    lagging: dict[TopicPartition, int] = {}
    caught_up: dict[TopicPartition, int] = {}  # at their last stable offset
    stable: dict[TopicPartition, int] = {}  # a read_committed reader's end
    through: dict[str, int | None] = {}
    for topic in topics:
        try:
            token = tokens.read(group.name, topic).token
        except MalformedTokenError as exc:  # held by the plan, mailed there; the others go on
            log.warning("%s: not finalized while its token is malformed: %s", topic, exc)
            through[topic] = None
            continue
        offsets = dict(token.offsets) if token else {}
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        try:
            earliest, ends = consumer.beginning_offsets(tps), consumer.end_offsets(tps)
        except TransientError as exc:  # a partition without a leader: this topic waits
            log.warning("%s: not finalized while Kafka gives no offsets of it: %s", topic, exc)
            through[topic] = None
            continue
        through[topic] = now_ms
        stable.update(ends)
        for tp in tps:
            done = offsets.get(tp.partition)
            if done is None and ends[tp] > earliest[tp]:
                through[topic] = None
            elif done is not None and max(done, earliest[tp]) < ends[tp]:
                lagging[tp] = max(done, earliest[tp])
            else:  # (a token below Kafka's earliest offset, with nothing left to read up
                # to the last stable offset, is caught up too: retention took the rest)
                caught_up[tp] = ends[tp]
    behind = brokers.timestamps_at(consumer, lagging)
    # (a lagging partition holding no committed message up to its last stable offset,
    # only aborted ones or markers, is caught up too)
    caught_up.update({tp: stable[tp] for tp in lagging if tp not in behind})
    for tp, timestamp in [*behind.items(), *held_back(config, caught_up).items()]:
        if through[tp.topic] is not None:
            through[tp.topic] = min(through[tp.topic], timestamp)
    return through


def held_back(config: Config, stable: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
    """Per partition archived up to its last stable offset, the time of the first message
    an open transaction holds back there, if one is open: neither that message nor any
    after it is archived yet, and a reader of committed messages cannot see them (only
    that its end, the last stable offset, is below the log's). Read past it, uncommitted,
    for its time alone. Without this, an hour would be final and an audit window judged
    while an open transaction (a producer hung, up to its transaction timeout) holds
    back their messages: late files, a false MISSING."""
    if not stable or brokers.isolation_level(config) != "read_committed":
        return {}
    uncommitted = brokers.consumer(config, isolation="read_uncommitted")
    try:
        return brokers.timestamps_at(uncommitted, stable)
    finally:
        uncommitted.close()
