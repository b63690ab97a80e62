"""How far behind Kafka each archive is: per group, topic and partition, the token, Kafka's
end offset, the lag in messages and in time, what the archive holds (records and files
of the group's current rows, the catalog) and the last commit.

The lag in time is the age of the oldest message not archived yet (the one at the token's
offset), 0 when the archive has caught up. `rows` is pure; `status` reads Kafka and the
tokens.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from kafka import TopicPartition
from kafka.errors import KafkaError

from kafka_archive import catalog
from kafka_archive.config import Config, Group
from kafka_archive.errors import TransientError
from kafka_archive.plan import inflight, planning
from kafka_archive.storage import Storage
from kafka_archive.tokens import MalformedTokenError, Token, TokenStore


@dataclass(frozen=True)
class PartitionStatus:
    group: str
    topic: str
    partition: int
    token: int | None        # next offset to archive; None: no token line yet
    earliest: int | None     # Kafka's first retained offset; None: Kafka has no such partition
    end: int | None          # Kafka's end offset (next to be written)
    lag_messages: int | None  # offsets from where the next run starts to the end
    lag_ms: int | None       # age of the oldest unarchived message; None: unknown
    committed_at: str | None  # of the token (its header), the last commit
    run_id: str | None
    archived_records: int | None = None  # in the current rows; None: not looked up
    archived_files: int | None = None
    problem: str | None = None  # why this topic cannot be shown whole (a malformed token...)
    holes: tuple[tuple[int, int], ...] = ()  # [start, end) below the token in no current file
    behind_ms: int | None = None  # since the archive last held all Kafka had; None: unknown
    # the run whose plan holds this topic, planned and not committed (failed, or running)
    in_flight: str | None = None
    in_flight_ms: int | None = None  # how long ago that plan was made; None: unknown


@dataclass(frozen=True)
class Held:
    """What the catalog holds of one partition (configured generation)."""
    records: int
    files: int
    covered: tuple[tuple[int, int], ...] = ()  # the offset ranges its current rows cover
    lost: tuple[tuple[int, int], ...] = ()     # ranges lost to retention and accepted
    caught_up_at: str | None = None            # the last time it held all Kafka had


def holes(held: Held | None, token: int | None) -> tuple[tuple[int, int], ...]:
    """Offsets below the token that no current row covers and no accepted loss explains:
    between covered ranges, and from the last one to the token. Pure."""
    if held is None or not held.covered:
        return ()  # nothing archived (yet, or the partition started at its end)
    ends = [b for _, b in held.covered] + ([token] if token is not None else [])
    starts = [a for a, _ in held.covered[1:]] + ([token] if token is not None else [])
    found = []
    for start, end in zip(ends, starts):
        parts = [(start, end)] if end > start else []
        for lo, hi in held.lost:  # take out what an accepted loss explains
            parts = [piece for a, b in parts
                     for piece in ((a, min(b, lo)), (max(a, hi), b)) if piece[1] > piece[0]]
        found += parts
    return tuple(found)


def next_start(group: Group, token_offset: int | None, earliest: int, end: int) -> int:
    """Where the next run starts a partition: its token, or for a partition without a
    token line, start_from."""
    if token_offset is not None:
        return token_offset
    return earliest if group.start_from == "earliest" else end


def rows(group: Group, topic: str, token: Token | None, kafka: dict[int, tuple[int, int]],
         oldest_ms: dict[int, int | None], now_ms: int,
         archived: dict[int, Held] | None = None) -> list[PartitionStatus]:
    """The status of every partition Kafka has or the token names.

    kafka: partition -> (earliest, end); oldest_ms: partition -> timestamp of the message
    the next run starts from (needed for lagging partitions only); archived: partition ->
    what the catalog holds of it, when looked up."""
    offsets = dict(token.offsets) if token else {}
    out = []
    for p in sorted(set(kafka) | set(offsets)):
        earliest, end = kafka.get(p, (None, None))
        lag = lag_ms = None
        if end is not None:  # else Kafka no longer has the partition
            lag = end - next_start(group, offsets.get(p), earliest, end)
            if lag <= 0:
                lag_ms = 0
            elif oldest_ms.get(p) is not None:
                lag_ms = max(0, now_ms - oldest_ms[p])
        held = None if archived is None else archived.get(p, Held(0, 0))
        out.append(PartitionStatus(group.name, topic, p, offsets.get(p), earliest, end, lag,
                                   lag_ms, token.committed_at if token else None,
                                   token.run_id if token else None,
                                   None if held is None else held.records,
                                   None if held is None else held.files,
                                   holes=holes(held, offsets.get(p)),
                                   behind_ms=_behind(held, lag, now_ms)))
    return out


def status(config: Config, tokens: TokenStore, consumer, now_ms: int,
           group: str | None = None, storage: Storage | None = None) -> list[PartitionStatus]:
    """With `storage`, also what each partition's current rows hold."""
    groups = [config.group(group)] if group else list(config.groups.values())
    kafka_topics = consumer.topics()
    read_timestamp = planning.oldest_pending_reader(consumer)
    out = []
    for g in groups:
        held = None if storage is None else _archived(config, storage, g.name)
        flight = None if storage is None else inflight.current(storage, config.archive_root, g.name)
        first = len(out)
        for topic in sorted({t for t in kafka_topics if g.selects(t)} | set(tokens.topics(g.name))):
            archived = None if held is None else held.get(topic, {})
            try:
                out += _topic(g, topic, tokens, consumer, kafka_topics, read_timestamp, now_ms,
                              archived)
            except (MalformedTokenError, TransientError, KafkaError) as exc:
                # one topic's problem (a malformed token, a look-up or a read that failed
                # after its retries), shown as its row: the other topics stay visible
                out.append(PartitionStatus(g.name, topic, -1, None, None, None, None, None, None,
                                           None, *(archived_totals(archived)),
                                           problem=f"{type(exc).__name__}: {exc}"))
        if flight is not None:
            out[first:] = [replace(row, in_flight=flight.run_id, in_flight_ms=flight.age_ms(now_ms))
                           if row.topic in flight.topics else row for row in out[first:]]
    return out


def _topic(g: Group, topic: str, tokens: TokenStore, consumer, kafka_topics, read_timestamp,
           now_ms: int, archived) -> list[PartitionStatus]:
    token = tokens.read(g.name, topic).token
    offsets = dict(token.offsets) if token else {}
    if offsets and topic not in kafka_topics:  # as the plan holds it (a `vanished` anomaly)
        return [replace(row, problem="Kafka has no such topic (deleted, or another cluster); "
                                     "its token is kept")
                for row in rows(g, topic, token, {}, {}, now_ms, archived)]
    tps = ([TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
           if topic in kafka_topics else [])
    earliest = consumer.beginning_offsets(tps) if tps else {}
    ends = consumer.end_offsets(tps) if tps else {}
    kafka = {tp.partition: (earliest[tp], ends[tp]) for tp in tps}
    starts = {p: next_start(g, offsets.get(p), first, end) for p, (first, end) in kafka.items()}
    # a token below the earliest offset: the oldest message left is the earliest
    oldest = {p: read_timestamp(topic, p, max(start, kafka[p][0]))
              for p, start in starts.items() if start < kafka[p][1]}
    return rows(g, topic, token, kafka, oldest, now_ms, archived)


def _behind(held: Held | None, lag: int | None, now_ms: int) -> int | None:
    """The lag by offsets: 0 when caught up, else the time since the archive last held
    everything Kafka had (no record timestamp involved)."""
    if lag is not None and lag <= 0:
        return 0
    if held is None or held.caught_up_at is None:
        return None
    from datetime import datetime

    return max(0, now_ms - int(datetime.fromisoformat(held.caught_up_at).timestamp() * 1000))


def archived_totals(archived: dict[int, Held] | None) -> tuple[int | None, int | None]:
    """(records, files) of a topic's partitions, when looked up."""
    if archived is None:
        return None, None
    return sum(h.records for h in archived.values()), sum(h.files for h in archived.values())


def _archived(config: Config, storage: Storage, group: str) -> dict[str, dict[int, Held]]:
    """topic -> partition -> what the group's catalog holds of it (configured generation)."""
    cat = catalog.open_catalog(storage, config, group)
    lost = catalog.lost_ranges(cat.state)
    held: dict[str, dict[int, Held]] = {}
    for name, topic in cat.state.topics.items():
        for s in topic.summaries.values():
            if s.generation == config.generation:
                held.setdefault(name, {})[s.partition] = Held(
                    s.records, s.files, tuple(map(tuple, s.covered)),
                    tuple(lost.get((name, s.partition), ())), s.caught_up_at)
    return held


def as_json(statuses: list[PartitionStatus]) -> list[dict]:
    return [asdict(s) for s in statuses]


def render(statuses: list[PartitionStatus]) -> str:
    """A table for people, one line per partition."""
    head = ("GROUP", "TOPIC", "PARTITION", "TOKEN", "END", "LAG", "LAG TIME", "ARCHIVED",
            "FILES", "LAST COMMIT", "RUN")
    table = [head] + [(s.group, s.topic, "!" if s.problem else str(s.partition), _show(s.token),
                       _show(s.end), _show(s.lag_messages), duration(s.lag_ms),
                       _show(s.archived_records), _show(s.archived_files),
                       s.committed_at or "-", s.run_id or "-")
                      for s in statuses]
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in table]
    problems = dict.fromkeys(f"PROBLEM {s.group}/{s.topic}: {s.problem}"
                             for s in statuses if s.problem)  # once a topic, in order
    flights = dict.fromkeys(f"IN FLIGHT {s.group}: run {s.in_flight}, planned "
                            f"{duration(s.in_flight_ms)} ago, has not committed (failed, or "
                            "still running); the group's next run finishes it"
                            for s in statuses if s.in_flight)
    return "\n".join(lines + list(problems) + list(flights))


def _show(value: int | None) -> str:
    return "-" if value is None else str(value)


def duration(ms: int | None) -> str:
    """1d2h, 3h04m, 5m07s, 12s; '?' when unknown."""
    if ms is None:
        return "?"
    s = ms // 1000
    days, hours, minutes, seconds = s // 86400, s // 3600 % 24, s // 60 % 60, s % 60
    if days:
        return f"{days}d{hours}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{seconds:02d}s"
    return f"{seconds}s"
