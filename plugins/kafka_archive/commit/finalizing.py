"""The partition finalizer of the event-time layout: `_SUCCESS` in a time partition that
can receive no more data.

A time partition [start, end) of a topic is final once every Kafka partition of the topic
is archived past `end + lateness`: the first message not yet archived of each partition
(its Kafka timestamp; now, when caught up) is at or after that time. The audit uses the same
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
from kafka_archive.storage import Storage
from kafka_archive.tokens import TokenStore

log = logging.getLogger(__name__)


def watermark(through_ms: int | None, lateness_s: int) -> int | None:
    """Time partitions ending at or before this are final; None: none is."""
    return None if through_ms is None else through_ms - lateness_s * 1000


def finalize(config: Config, group: Group, storage: Storage, tokens: TokenStore, consumer,
             now_ms: int) -> dict[str, list[str]]:
    """Write `_SUCCESS` into every time partition that has become final, and each
    topic's watermark; topic -> the time partitions finalized now. A partition final
    before (below the watermark: a rewind archived its offsets again) is finalized again
    and listed like the others; `again` tells them apart."""
    if group.layout.kind != "event_time":
        return {}
    through = archived_through(config, group, tokens, consumer, now_ms)
    cat = catalog.open_catalog(storage, config, group.name, may_rebuild=True)
    done: dict[str, dict] = {}
    for topic, through_ms in sorted(through.items()):
        mark = watermark(through_ms, group.lateness_s)
        known = cat.state.topics.get(topic)
        if mark is None or known is None:
            continue
        if known.finalized_through_ms is not None:
            mark = max(mark, known.finalized_through_ms)  # never moves back
        new = sorted(path for path in known.open_time
                     if layout.time_partition_range(path, group.layout)[1] <= mark)
        for path in new:
            storage.put_bytes(layout.success_marker(config.archive_root, group.name, topic,
                                                    path), b"")
        if new or mark != known.finalized_through_ms:
            done[topic] = {"through_ms": mark, "paths": new}
        if new:
            log.info("%s/%s: finalized %s", group.name, topic, ", ".join(new))
    if done:  # after the markers: a crash in between only means they are written again
        entry = {}

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
        for topic, state in entry.items():  # the run folders' side, for a rebuild
            storage.put_bytes(layout.finalized_state(config.archive_root, group.name, topic),
                              json.dumps({"through_ms": state["through_ms"]}).encode())
        return {topic: state["paths"] for topic, state in entry.items()}  # what this one did
    return {}


def again(config: Config, group: Group, topic: str, path: str, watermark_ms: int | None
          ) -> bool:
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
    through: dict[str, int | None] = {}
    for topic in topics:
        token = tokens.read(group.name, topic).token
        offsets = dict(token.offsets) if token else {}
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        earliest, ends = consumer.beginning_offsets(tps), consumer.end_offsets(tps)
        through[topic] = now_ms
        for tp in tps:
            done = offsets.get(tp.partition)
            if done is None and ends[tp] > earliest[tp]:
                through[topic] = None
            elif done is not None and done < ends[tp]:
                lagging[tp] = max(done, earliest[tp])
    for tp, timestamp in brokers.timestamps_at(consumer, lagging).items():
        if through[tp.topic] is not None:
            through[tp.topic] = min(through[tp.topic], timestamp)
    return through
