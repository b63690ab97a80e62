"""Gathering what the audit compares, from Kafka and the archive.

- expected counts: the monitoring topic, copied into `_audit/_events/` by `ingest`, which
  tracks its progress with its own token (group `_audit`), advanced by compare-and-swap
  after the events file is durable, like any archive run;
- archived counts: the per-(topic, source, window) counts in the group's current
  rows (the catalog), or, when the manifests are in doubt, a
  re-scan of the archived files themselves.

How far each topic is archived in time is commit.finalizing.archived_through, which the
finalizer uses too.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from dataclasses import dataclass


from kafka_archive import brokers, formats, layout
from kafka_archive.audit.reconcile import BadMonitoringEvent, MonitoringEvent
from kafka_archive.config import Config
from kafka_archive.errors import TerminalError
from kafka_archive.formats import audit_counts
from kafka_archive.formats.records import fingerprint
from kafka_archive.progress_bars import Track, untracked
from kafka_archive.storage import Storage, join
from kafka_archive.tokens import Token, TokenStore

log = logging.getLogger(__name__)

TOKEN_GROUP = "_audit"


@dataclass(frozen=True)
class Events:
    events: list[MonitoringEvent]
    bad: list[str]  # one description per unreadable monitoring message (kept, never dropped)


def ingest(config: Config, storage: Storage, tokens: TokenStore, consumer, run_id: str,
           committed_at: str) -> int:
    """Copy the monitoring topic from its token to its current end into the archive;
    the number of messages copied."""
    topic = config.audit.topic
    partitions = consumer.partitions_for_topic(topic)
    if not partitions:
        log.info("monitoring topic %s does not exist (yet): no producer has reported", topic)
        return 0
    read = tokens.read(TOKEN_GROUP, topic)
    offsets = dict(read.token.offsets) if read.token else {}
    from kafka import TopicPartition  # kafka-python: not where a DAG file imports the tasks
    tps = [TopicPartition(topic, p) for p in sorted(partitions)]
    earliest, ends = consumer.beginning_offsets(tps), consumer.end_offsets(tps)
    ranges = {}
    for tp in tps:
        start = offsets.get(tp.partition, earliest[tp])
        if start < earliest[tp]:
            log.warning("monitoring topic %s partition %d: offsets [%d, %d) were deleted by "
                        "retention before the audit read them", topic, tp.partition, start, earliest[tp])
            start = earliest[tp]
        if start < ends[tp]:
            ranges[tp] = (start, ends[tp])
    if not ranges:
        return 0
    copied = 0
    for tp, (start, end) in ranges.items():
        # validated once here and stored compactly: the audit reloads every event each run
        parsed, bad = [], []
        for m in brokers.read_range(consumer, tp, start, end):
            where = f"monitoring topic {topic} partition {tp.partition} offset {m.offset}"
            try:
                parsed.append([m.offset, *MonitoringEvent.from_json(m.value or b"", where)])
            except BadMonitoringEvent as exc:  # kept with its reason, never dropped
                bad.append({"offset": m.offset, "error": str(exc),
                            "value": (m.value or b"").decode("utf-8", "replace")})
        storage.put_bytes(layout.audit_events_file(config.archive_root, topic, tp.partition, start),
                          json.dumps({"fields": ["offset", *MonitoringEvent._fields],
                                      "events": parsed, "bad": bad}).encode())
        offsets[tp.partition] = end
        copied += len(parsed) + len(bad)
    tokens.write(Token(group=TOKEN_GROUP, topic=topic, bootstrap=config.bootstrap_servers,
                       offsets=offsets, committed_at=committed_at, run_id=run_id),
                 expected_version=read.version)
    return copied


def read_events_file(storage: Storage, url: str) -> Events:
    """One file `ingest` wrote."""
    stored = json.loads(storage.get_bytes(url))
    return Events([MonitoringEvent(*row[1:]) for row in stored["events"]],
                  [entry["error"] for entry in stored["bad"]])


def count_rows(rows, counts: dict | None = None, sign: int = 1) -> dict:
    """Add (sign -1: take away) the per-(source, window) audit counts of manifest rows
    to `counts`, keyed (topic, source, archive window start). A message another
    generation's row holds too (`audit_elsewhere`) counts there only."""
    counts = defaultdict(int) if counts is None else counts
    for row in rows:
        for field, weight in (("audit", sign), ("audit_elsewhere", -sign)):
            for source, window, n in row.get(field, ()):
                key = (row["topic"], source, window)
                counts[key] = counts.get(key, 0) + weight * n
                if not counts[key]:
                    del counts[key]
    return counts


def archived_by_rescan(config: Config, storage: Storage, group: str,
                       track: Track = untracked) -> dict:
    """The same counts, read from every archived file of the group (not the manifests)."""
    window_ms, header = config.audit.window_s * 1000, config.audit.source_header
    if config.group(group).parsed_table:
        raise TerminalError(f"group {group} keeps its topics' fields, not their headers (the "
                            "parsed table shape): rescan a key_value or SequenceFile group")
    spec = config.group(group).layout
    counts: dict = defaultdict(int)
    found = [(url, layout.parse_url(config.archive_root, url, spec))
             for url, _ in storage.list(join(config.archive_root, group))]
    # the data files: time partitions or partition folders, not `_late/` or `_quarantine/`
    files = [(url, where.topic, where.name) for url, where in found
             if where is not None and where.place in ("partition", "time")]
    generations: dict = defaultdict(set)  # (topic, partition) -> generations with files
    for _, topic, name in files:
        generations[(topic, name.partition)].add(name.generation)
    # a message that several generations archived counts once: where a partition has
    # files of more than one, its messages are remembered by fingerprint (records.fingerprint,
    # some 100 bytes each) while the rescan reads its files
    seen: dict = defaultdict(set)
    for url, topic, name in track(files, f"rescan {group}"):
        where = (topic, name.partition)
        once = seen[where] if len(generations[where]) > 1 else None
        per_file: dict = {}
        with storage.open(url) as stream:
            for r in formats.read(stream, url):
                if once is not None and r.offset is not None:
                    message = tuple(fingerprint(r.offset, r.key, r.value, r.timestamp_ms))
                    if message in once:
                        continue
                    once.add(message)
                audit_counts.count_archived(per_file, audit_counts.source_of(r.headers, header),
                                            r.timestamp_ms, window_ms)
        for (source, window), n in per_file.items():
            counts[(topic, source, window)] += n
    return counts
