"""Rewinds: archiving a Kafka partition again from an earlier offset.

There is one mechanism, whichever way a rewind is asked for. The token line moves back
(deleting it means "back to start_from"; `rewind` writes an earlier offset by
compare-and-swap), and nothing else changes then. The next run's plan (`supersede`)
finds the partition's archived files at or beyond its start and records them in the
plan, which moves them aside to `_superseded/<run id>/` before any data is written. So a
crash at any point loses nothing and duplicates nothing: the token is the only write of a
rewind, and the plan that acts on it is re-executed unchanged until it commits.

A file's messages stay in exactly one file. The start of a run must therefore fall on a
file boundary: `rewind` moves an offset inside an archived file back to that file's
first offset (the whole file is archived again), or, when Kafka no longer holds that
offset, forward to just after the file (its messages stay where they are); the plan
treats a deleted or hand-edited token line the same second way.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from datetime import datetime, timezone

from kafka import TopicPartition

from kafka_archive import formats, layout
from kafka_archive.config import Config
from kafka_archive.errors import TerminalError
from kafka_archive.plan.planning import Slice
from kafka_archive.storage import Storage, join
from kafka_archive.tokens import TokenConflictError, TokenStore

log = logging.getLogger(__name__)


class RewindError(TerminalError):
    """A rewind that cannot be done as asked; nothing was written."""


@dataclass(frozen=True)
class Straddler:
    """The archived file with the highest first offset below an offset, and its last."""
    url: str
    first: int
    last: int


def place(where: str, current: int, requested: int, earliest: int,
          below: Straddler | None) -> tuple[int, str]:
    """Where the token of one partition goes for a rewind to `requested`, and why.

    current: the token's offset; earliest: Kafka's first retained offset; below: the file
    that may hold `requested` (see Straddler). Pure.
    """
    if requested > current:
        raise RewindError(f"{where}: offset {requested} is past the token {current}; a rewind "
                          "only moves back (archiving from a later offset would skip messages)")
    if requested < earliest:
        raise RewindError(f"{where}: offset {requested} is no longer in Kafka, which keeps "
                          f"offsets from {earliest}; rewind to {earliest} or later")
    if below is None or below.last < requested:
        return requested, f"rewound to {requested}"
    if below.first >= earliest:
        return below.first, (f"rewound to {below.first}: offset {requested} is inside archived "
                             f"file {below.url} (offsets {below.first}..{below.last}), which "
                             "is archived again whole")
    return below.last + 1, (f"rewound to {below.last + 1}: offset {requested} is inside archived "
                            f"file {below.url} (offsets {below.first}..{below.last}), which "
                            f"stays, as Kafka no longer holds its first offsets")


def rewind(config: Config, tokens: TokenStore, consumer, group: str, topic: str,
           partition: int | None = None, to_offset: int | None = None,
           to_time_ms: int | None = None, *, storage: Storage) -> list[str]:
    """Move the token of topic (one partition, or every partition it has a line for)
    back to to_offset, or to the first message at or after to_time_ms (Kafka's
    offsets_for_times; a time past the newest message means the end offset). One
    compare-and-swap write, all partitions or none. Returns what changed, per partition."""
    if (to_offset is None) == (to_time_ms is None):
        raise RewindError("give exactly one of to_offset and to_time_ms")
    config.group(group)  # an unknown group is a config error
    read = tokens.read(group, topic)
    token = read.token
    if token is None or not token.offsets:
        raise RewindError(f"no token for {group}/{topic}: nothing to rewind; its next run starts "
                          "every partition from start_from")
    if token.bootstrap != config.bootstrap_servers:
        raise RewindError(f"token {group}/{topic} was written for Kafka at {token.bootstrap}, "
                          f"but the config says {config.bootstrap_servers}")
    if partition is not None and partition not in token.offsets:
        raise RewindError(f"{group}/{topic} has no token line for partition {partition} (it "
                          f"has {', '.join(map(str, token.offsets))}); its next run starts it "
                          "from start_from")
    _refuse_in_flight(storage, config, group)

    chosen = [partition] if partition is not None else sorted(token.offsets)
    tps = [TopicPartition(topic, p) for p in chosen]
    missing = [p for p in chosen if p not in (consumer.partitions_for_topic(topic) or ())]
    if missing:
        raise RewindError(f"Kafka has no partition {', '.join(map(str, missing))} of topic {topic}")
    earliest = consumer.beginning_offsets(tps)
    if to_time_ms is not None:
        ends = consumer.end_offsets(tps)
        found = consumer.offsets_for_times({tp: to_time_ms for tp in tps})
        requested = {tp.partition: found[tp].offset if found.get(tp) else ends[tp] for tp in tps}
        why_offset = {tp.partition: (f"the first message at or after {format_ms(to_time_ms)} "
                                     f"is offset {requested[tp.partition]}" if found.get(tp) else
                                     f"no message at or after {format_ms(to_time_ms)}: the end "
                                     f"offset {requested[tp.partition]}") for tp in tps}
    else:
        requested = {p: to_offset for p in chosen}

    offsets, changes = dict(token.offsets), []
    for tp in tps:
        p, current = tp.partition, token.offsets[tp.partition]
        where = f"{group}/{topic} partition {p}"
        if to_time_ms is not None:
            where += f" ({why_offset[p]})"
        below = _straddler(storage, config, group, topic, p, requested[p])
        offsets[p], why = place(where, current, requested[p], earliest[tp], below)
        if offsets[p] == current:
            changes.append(f"{where}: token already at {current}, unchanged")
            continue
        beyond = len(archived_files(storage, config, group, topic, p, offsets[p]))
        changes.append(f"{where}: token {current} -> {offsets[p]} ({why}); the next run moves "
                       f"{beyond} archived file{'s' if beyond != 1 else ''} aside and archives "
                       f"from {offsets[p]}")
    if offsets != dict(token.offsets):
        try:
            tokens.write(replace(token, offsets=offsets), expected_version=read.version)
        except TokenConflictError as exc:
            raise RewindError(f"token {group}/{topic} changed while rewinding (a run committed, "
                              f"or another rewind): nothing was written; run the rewind again "
                              f"({exc.found})") from None
        log.warning("rewound %s/%s: %s", group, topic, "; ".join(changes))
    return changes


def format_ms(ms: int) -> str:
    return (datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"))


def _refuse_in_flight(storage: Storage, config: Config, group: str) -> None:
    """A plan in flight was made from the current token: its commit would fail against a
    rewound one, and it may be writing files right now."""
    marker = storage.get_or_none(layout.inflight_marker(config.archive_root, group))
    if marker is not None:
        run_id = json.loads(marker).get("run_id")
        raise RewindError(f"run {run_id} of group {group} is in flight (planned, not committed): "
                          "let it finish, or re-run it until it commits, then rewind")


# --- the plan's side: files at or beyond a slice's start ------------------------------

def archived_files(storage: Storage, config: Config, group: str, topic: str, partition: int,
                   from_offset: int = 0) -> list[tuple[int, str]]:
    """(first offset, url) of the partition's files of the configured generation whose
    first offset is from_offset or more, in offset order. Files of other generations are
    another archive of the same data (DESIGN: generations run side by side)."""
    folder = layout.partition_dir(config.archive_root, group, topic, partition)
    after = None
    if from_offset > 0:  # '~' sorts after the '.<ext>' of every name of from_offset - 1
        after = join(folder, f"{config.generation}_{partition}_{from_offset - 1:020d}~")
    found = []
    for url, _ in storage.list(folder, start_after=after):
        name = layout.parse_file_name(url.rsplit("/", 1)[-1])
        if name and name.generation == config.generation and name.first_offset >= from_offset:
            found.append((name.first_offset, url))
    return sorted(found)


def _straddler(storage: Storage, config: Config, group: str, topic: str, partition: int,
               offset: int) -> Straddler | None:
    files = [(first, url) for first, url in archived_files(storage, config, group, topic, partition)
             if first < offset]
    if not files:
        return None
    first, url = files[-1]
    return Straddler(url, first, _last_offset(storage, url))


def supersede(storage: Storage, config: Config, group: str, slices: list[Slice],
              offsets: dict[str, dict[int, int]]) -> tuple[list[Slice], list[str]]:
    """The slices adjusted so no message is archived twice, and the archived files the
    plan must move aside: those at or beyond a slice's start. Such files exist only after
    a rewind (a token line deleted or moved back), so a partition with a token line costs
    one listing that finds nothing; for the others the file below the start is read too.
    A file straddling the start keeps its messages: the slice starts after it."""
    adjusted, superseded = [], []
    for s in slices:
        has_token = s.partition in offsets.get(s.topic, {})
        if has_token and not archived_files(storage, config, group, s.topic, s.partition, s.start):
            adjusted.append(s)
            continue
        below = _straddler(storage, config, group, s.topic, s.partition, s.start)
        start = s.start if below is None else max(s.start, below.last + 1)
        superseded += [url for first, url in archived_files(storage, config, group, s.topic,
                                                            s.partition, start)]
        # past the slice's end: a slice of no offsets that moves the token past the file
        adjusted.append(replace(s, start=start, end=max(start, s.end)))
    return adjusted, superseded


def _last_offset(storage: Storage, url: str) -> int:
    """Offset of the last record of an archived file (read through: only rewinds need it)."""
    last = None
    with storage.open(url) as stream:
        for last in formats.read(stream, url):
            pass
    if last is None:
        raise ValueError(f"{url}: archived file holds no record")
    if last.offset is None:
        raise ValueError(f"{url}: its format keeps no offsets (only sequencefile does)")
    return last.offset
