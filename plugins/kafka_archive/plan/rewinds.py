"""Rewinds: archiving a Kafka partition again from an earlier offset.

There is one mechanism, whichever way a rewind is asked for. The token line moves back
(deleting it means "back to start_from"; `rewind` writes an earlier offset by
compare-and-swap), and nothing else changes then. The next run's plan (`supersede`)
asks the catalog for the partition's rows holding an offset at or beyond its start,
whatever the layout (`_late/` and time partitions included), and records their files in
the plan, which moves them aside to `_superseded/<run id>/` before any data is written;
its commit takes those rows out of the catalog. So a
crash at any point loses nothing and duplicates nothing: the token is the only write of a
rewind, and the plan that acts on it is re-executed unchanged until it commits.

A message stays in exactly one file. The start of a run must therefore fall on a slice
boundary: `rewind` moves an offset inside an archived slice back to the slice's first
offset (the whole slice is archived again), or, when Kafka no longer holds that offset,
forward to just after the slice (its messages stay where they are); the plan treats a
deleted or hand-edited token line the same second way.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from datetime import datetime, timezone

from kafka import TopicPartition

from kafka_archive import catalog
from kafka_archive.catalog.state import part_key
from kafka_archive.config import Config
from kafka_archive.errors import TerminalError
from kafka_archive.manifest import row_files
from kafka_archive.plan import inflight
from kafka_archive.plan.planning import Anomaly, Slice
from kafka_archive.storage import Storage
from kafka_archive.tokens import TokenConflictError, TokenStore, Versioned

log = logging.getLogger(__name__)


class RewindError(TerminalError):
    """A rewind that cannot be done as asked; nothing was written."""


@dataclass(frozen=True)
class Straddler:
    """The current row (slice) holding offsets below and at or beyond an offset: its
    file (or a description of its files), its first and last offset covered."""
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


def token_to_move(config: Config, tokens: TokenStore, group: str, topic: str,
                  error: type[TerminalError], nothing: str) -> Versioned:
    """The token an operator's command moves (a rewind, an accepted loss), read for its
    compare-and-swap; `error` when the group is unknown, there is no token (`nothing` says
    what that means) or the token was written for another Kafka cluster."""
    config.group(group)  # an unknown group is a config error
    read = tokens.read(group, topic)
    if read.token is None or not read.token.offsets:
        raise error(f"no token for {group}/{topic}: {nothing}")
    if read.token.bootstrap != config.bootstrap_servers:
        raise error(f"token {group}/{topic} was written for Kafka at {read.token.bootstrap}, "
                    f"but the config says {config.bootstrap_servers}")
    return read


def rewind(config: Config, tokens: TokenStore, consumer, group: str, topic: str,
           partition: int | None = None, to_offset: int | None = None,
           to_time_ms: int | None = None, *, storage: Storage) -> list[str]:
    """Move the token of topic (one partition, or every partition it has a line for)
    back to to_offset, or to the first message at or after to_time_ms (Kafka's
    offsets_for_times; a time past the newest message means the end offset). One
    compare-and-swap write, all partitions or none. Returns what changed, per partition."""
    if (to_offset is None) == (to_time_ms is None):
        raise RewindError("give exactly one of to_offset and to_time_ms")
    read = token_to_move(config, tokens, group, topic, RewindError,
                         "nothing to rewind; its next run starts every partition from start_from")
    token = read.token
    if partition is not None and partition not in token.offsets:
        raise RewindError(f"{group}/{topic} has no token line for partition {partition} (it "
                          f"has {', '.join(map(str, token.offsets))}); its next run starts it "
                          "from start_from")
    if run := inflight.holding(storage, config.archive_root, group, topic):
        # made from the current token: its commit would fail against a rewound one, and
        # it may be writing files right now
        raise RewindError(f"run {run} of group {group} is in flight with topic {topic} "
                          "(planned, not committed): let it finish, or re-run it until it "
                          "commits, then rewind")

    cat = catalog.open_catalog(storage, config, group, may_rebuild=True)
    chosen = [partition] if partition is not None else sorted(token.offsets)
    tps = [TopicPartition(topic, p) for p in chosen]
    missing = [p for p in chosen if p not in (consumer.partitions_for_topic(topic) or ())]
    if missing:
        raise RewindError(f"Kafka has no partition {', '.join(map(str, missing))} of topic {topic}")
    earliest, ends = consumer.beginning_offsets(tps), consumer.end_offsets(tps)
    archived = rows_through(cat, topic, config.generation)
    if ahead := [p for p in chosen if archived.get(p, 0) > ends[TopicPartition(topic, p)]]:
        p = ahead[0]
        raise RewindError(
            f"{group}/{topic} partition {p}: the archive holds offsets up to {archived[p] - 1} "
            f"but Kafka's latest offset is {ends[TopicPartition(topic, p)]}: the topic was "
            "deleted and re-created, or an unclean leader election truncated it, so Kafka's "
            "offsets name other messages; a rewind would replace archived messages with "
            "them. To archive the topic as it is now beside the archived one, set a new "
            "`generation` in the config and delete the token")
    if to_time_ms is not None:
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
        below = _straddler(cat, config, topic, p, requested[p])
        offsets[p], why = place(where, current, requested[p], earliest[tp], below)
        if offsets[p] == current:
            changes.append(f"{where}: token already at {current}, unchanged")
            continue
        # (a compacted row holding it: rewritten without what is archived again)
        beyond = sum(len(row_files(r)) for r in _beyond(cat, config, topic, p, offsets[p])
                     if r["start"] >= offsets[p] or r.get("pieces"))
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


# --- the plan's side: rows at or beyond a slice's start ---------------------------------

def _beyond(cat: catalog.Catalog, config: Config, topic: str, partition: int,
            offset: int) -> list[dict]:
    """The partition's current rows of the configured generation holding an offset at or
    beyond offset, in offset order, whatever the layout (a row is one slice: its files in
    a partition folder, or spread over time partitions, `_late/` and `_quarantine/`).
    Rows of other generations are another archive of the same data (DESIGN: generations
    run side by side). Free when the catalog's summary says nothing reaches offset."""
    found = cat.state.topics.get(topic)
    summary = found and found.summaries.get(part_key(partition, config.generation))
    if not summary or summary.end is None or summary.end <= offset:
        return []
    return cat.rows(topic, partition, config.generation, end_after=offset)


def rows_through(cat: catalog.Catalog, topic: str, generation: int | None = None
                 ) -> dict[int, int]:
    """Per partition, one past the highest offset a current row of the generation (None:
    any) holds."""
    found: dict[int, int] = {}
    held = cat.state.topics.get(topic)
    for summary in (held.summaries.values() if held else ()):
        if generation in (None, summary.generation) and summary.end is not None:
            found[summary.partition] = max(found.get(summary.partition, 0), summary.end)
    return found


def _straddler(cat: catalog.Catalog, config: Config, topic: str, partition: int,
               offset: int) -> Straddler | None:
    """The current row holding offsets both below and at or beyond offset, if any."""
    below = [(p, row) for p, row in _in_pieces(_beyond(cat, config, topic, partition, offset))
             if p["start"] < offset]
    if not below:
        return None
    piece, row = below[-1]
    files = row_files(row)
    what = files[0]["url"] if len(files) == 1 else (
        f"slice [{row['start']}, {row['end']}) of run {row['_run'].rsplit('/', 1)[-1]} "
        f"({len(files)} files)")
    if piece is not row:  # a compacted row's piece: archived again as the row was
        what = (f"slice [{piece['start']}, {piece['end']}) of run "
                f"{piece['_run'].rsplit('/', 1)[-1]}, compacted into {what}")
    return Straddler(what, piece["start"], piece["end"] - 1)


def _in_pieces(rows: list[dict]) -> list[tuple[dict, dict]]:
    """(piece, its row) in offset order: a compacted row's pieces (catalog.pieces), each
    as a row of its own; any other row as itself."""
    return [({**piece, "topic": row["topic"], "partition": row["partition"],
              "_generation": row["_generation"]} if row.get("pieces") else row, row)
            for row in rows for piece in (row.get("pieces") or [row])]


def supersede(cat: catalog.Catalog, config: Config, slices: list[Slice]
              ) -> tuple[list[Slice], list[str], list[dict]]:
    """The slices adjusted so no message is archived twice, and the archived files the
    plan must move aside: every file of the rows this run archives again, the rows at or
    beyond a slice's start. Such rows exist only after a rewind (a token line deleted or
    moved back). A row straddling the start keeps its messages: the slice starts after
    it. The slice reaches to the end of the last row it starts in (a row is archived
    again whole: the job cuts no slice inside what it replaces, Slice.archived_before);
    rows beyond a capped slice stay current until a later run reaches them, so nothing
    leaves the catalog that this run does not archive again. Each slice also carries
    where its offsets were archived before, so in the event-time layout they go back to
    the same time partitions."""
    event_time = config.group(cat.group).layout.kind == "event_time"
    watermarks: dict[str, dict] = {}  # run folder -> its plan's finalize watermarks
    adjusted, superseded, cuts = [], [], []
    for s in slices:
        beyond = _beyond(cat, config, s.topic, s.partition, s.start)
        if not beyond:
            adjusted.append(s)
            continue
        parts = _in_pieces(beyond)
        straddling = [p for p, _ in parts if p["start"] < s.start]
        start = max([s.start] + [p["end"] for p in straddling])
        # past the slice's end: a slice of no offsets that moves the token past the row
        end, replaced, owners = max(start, s.end), [], {}
        for p, row in parts:  # in offset order
            if start <= p["start"] < end:
                replaced.append(p)
                owners[row["start"]] = row
                # a compacted row's file is one: what is not kept of it is archived again
                end = max(end, row["end"] if row.get("pieces") else p["end"])
        earlier = [f["url"] for row in owners.values() for f in row_files(row)]
        superseded += earlier
        for row in owners.values():
            if row["start"] < start:  # a compacted row: the job keeps its rows below start
                cuts.append({"topic": s.topic, "partition": s.partition,
                             "generation": row["_generation"], "row": row, "below": start})
        before = tuple(step for r in replaced
                       for step in (_placed_by(cat, r, watermarks) if event_time
                                    else [(r["end"], None)]))
        adjusted.append(replace(s, start=start, end=end, archived_before=before,
                                earlier=tuple(earlier), earlier_last=tuple(
                                    tuple(p["last_message"]) for p in replaced
                                    if p.get("last_message"))))
    return adjusted, superseded, cuts


def held_elsewhere(cat: catalog.Catalog, config: Config, slices: list[Slice]) -> list[Slice]:
    """Each slice with the files of other generations' current rows holding its offsets
    (Slice.elsewhere). Such rows exist only after a new generation began where an older
    one's archive still reaches (a new generation with its token deleted, a rewind
    across generations): then the job tells which of its messages they hold too, for the
    audit to count each message once. Free when the catalog's summaries say none reach
    the slice."""
    found = []
    for s in slices:
        held = cat.state.topics.get(s.topic)
        others = sorted(summary.generation for summary in (held.summaries.values() if held else ())
                        if summary.partition == s.partition and s.start < s.end
                        and summary.generation != config.generation
                        and summary.end is not None and summary.end > s.start)
        rows = tuple((generation, row["start"], row["end"], tuple(f["url"] for f in row_files(row)))
                     for generation in others
                     for row in cat.rows(s.topic, s.partition, generation, end_after=s.start,
                                         start_before=s.end))
        found.append(replace(s, elsewhere=rows) if rows else s)
    return found


def offsets_reused(offset: int | None, s: Slice) -> Anomaly | None:
    """A rewind's slice whose replaced files hold other messages than Kafka does at the
    same offsets (offset: the first, archive.earlier.first_reused): the topic is held, as
    a rewind would replace archived messages with others."""
    return None if offset is None else Anomaly(
        "offsets_reused", s.topic, s.partition, offset, offset + 1, "failed")


def _placed_by(cat: catalog.Catalog, row: dict, known: dict[str, dict]
               ) -> list[tuple[int, int | None]]:
    """The watermarks that placed the row's messages (Slice.archived_before's steps): as
    its row records them (a re-archive keeps the first placement), or, for a row from
    before that, its run's plan watermark for the whole row."""
    if "placed_by" in row:
        return [tuple(step) for step in row["placed_by"]]
    run = row["_run"]
    if run not in known:
        stored = cat.storage.get_or_none(f"{run}/plan.json")
        known[run] = json.loads(stored).get("finalized", {}) if stored is not None else {}
    return [(row["end"], known[run].get(row["topic"]))]
