"""The partition finalizer of the event-time layout: `_SUCCESS` in a time partition that
can receive no more data.

A time partition [start, end) of a topic is final once every Kafka partition of the topic
is archived past `end + lateness`: the first message not yet archived of each partition
(its Kafka timestamp; now, when caught up) is at or after that time. This is the audit's
computation (gather.archived_through), so both agree on how far a topic is archived.
Until then late events are still written into the partition (new files, named by their
first offset). The topic's watermark, `end` of the newest final partition, is kept in
`<topic>/_finalized.json`; every plan records it, and a message for a partition final
when the run was planned goes to `_late/<time partition>/` instead (kafka_archive.archive.slice_writer):
once `_SUCCESS` is there, a partition's files never change.
"""

from __future__ import annotations

import json
import logging

from kafka_archive import layout
from kafka_archive.audit import gather
from kafka_archive.config import Config, Group
from kafka_archive.storage import Storage, join
from kafka_archive.tokens import TokenStore

log = logging.getLogger(__name__)


def watermark(through_ms: int | None, lateness_s: int) -> int | None:
    """Time partitions ending at or before this are final; None: none is."""
    return None if through_ms is None else through_ms - lateness_s * 1000


def watermarks(storage: Storage, config: Config, group: Group, topics) -> dict[str, int]:
    """The stored watermark of each topic that has one (event-time groups only)."""
    if group.layout.kind != "event_time":
        return {}
    found = {}
    for topic in topics:
        data = storage.get_or_none(layout.finalized_state(config.archive_root, group.name, topic))
        if data is not None:
            found[topic] = json.loads(data)["through_ms"]
    return found


def time_partitions(storage: Storage, root: str, group: Group, topic: str) -> dict[str, bool]:
    """The time partitions of a topic holding files -> whether `_SUCCESS` is there."""
    top = join(root, group.name, topic)
    found: dict[str, bool] = {}
    for url, _ in storage.list(top):
        relative = url[len(top) + 1:]
        folder, _, name = relative.rpartition("/")
        if not folder or any(part.startswith("_") for part in folder.split("/")):
            continue
        found[folder] = found.get(folder, False) or name == "_SUCCESS"
    return found


def finalize(config: Config, group: Group, storage: Storage, tokens: TokenStore, consumer,
             now_ms: int) -> dict[str, list[str]]:
    """Write `_SUCCESS` into every time partition that has become final, and each
    topic's watermark; topic -> the time partitions finalized now."""
    if group.layout.kind != "event_time":
        return {}
    through = gather.archived_through(config, group, tokens, consumer, now_ms)
    done: dict[str, list[str]] = {}
    for topic, through_ms in sorted(through.items()):
        mark = watermark(through_ms, group.lateness_s)
        if mark is None:
            continue
        state = layout.finalized_state(config.archive_root, group.name, topic)
        previous = storage.get_or_none(state)
        if previous is not None and json.loads(previous)["through_ms"] >= mark:
            mark = json.loads(previous)["through_ms"]  # never moves back
        new = []
        for path, has_marker in sorted(time_partitions(storage, config.archive_root, group,
                                                       topic).items()):
            try:
                end = layout.time_partition_range(path, group.layout)[1]
            except ValueError:
                log.warning("%s/%s: %s is not a time partition of the layout; left alone",
                            group.name, topic, path)
                continue
            if end <= mark and not has_marker:
                storage.put_bytes(layout.success_marker(config.archive_root, group.name, topic,
                                                        path), b"")
                new.append(path)
        # after the markers: a crash in between only means the next run writes them again
        storage.put_bytes(state, json.dumps({"through_ms": mark}).encode())
        if new:
            log.info("%s/%s: finalized %s", group.name, topic, ", ".join(new))
        done[topic] = new
    return done
