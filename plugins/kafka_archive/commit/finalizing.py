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
once `_SUCCESS` is there, a partition's files never change. The time partitions to look
at come from the catalog (those that received files and are not final yet), so finalize
costs what is open, not every file of the topic.
"""

from __future__ import annotations

import json
import logging

from kafka_archive import catalog, layout
from kafka_archive.audit import gather
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
    topic's watermark; topic -> the time partitions finalized now."""
    if group.layout.kind != "event_time":
        return {}
    through = gather.archived_through(config, group, tokens, consumer, now_ms)
    cat = catalog.open_catalog(storage, config, group.name)
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
        catalog.append(storage, config, group.name,
                       lambda _: {"kind": "finalize", "topics": done})
        for topic, state in done.items():  # the run folders' side, for a rebuild
            storage.put_bytes(layout.finalized_state(config.archive_root, group.name, topic),
                              json.dumps({"through_ms": state["through_ms"]}).encode())
    return {topic: state["paths"] for topic, state in done.items()}
