"""Archive freshness: per topic, how far the archive is behind Kafka, against the SLA.

The lag of a partition is the time between the newest message in Kafka and the newest
archived one (by message timestamp); with nothing archived yet, the age of the oldest
message waiting. A topic's lag is its worst partition's. `past_sla` is pure; `observe`
reads Kafka's side with kafka-python.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Callable, Iterable

from kafka_archive.config import Group

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PartitionFreshness:
    topic: str
    partition: int
    archived_to: int                # next offset to archive (the token)
    latest: int                     # Kafka's next offset
    newest_kafka_ms: int | None     # timestamp of the newest message in Kafka
    newest_archived_ms: int | None  # ... of the newest archived one; None: nothing archived
    oldest_pending_ms: int | None   # ... of the oldest not archived (read if none archived)
    caught_up_ms: int | None = None  # when the archive last held everything Kafka had

    @property
    def pending(self) -> int:
        return max(0, self.latest - self.archived_to)

    def lag_s(self, now_ms: int) -> float | None:
        """How far behind the archive is. By offsets when known: the time since the
        archive last held everything Kafka had (a plan whose slice reached Kafka's end,
        then committed), which no producer's record timestamp can skew; else by record
        timestamps. None when Kafka did not answer with the timestamps needed."""
        if self.pending == 0:
            return 0.0
        if self.caught_up_ms is not None:
            return max(0.0, (now_ms - self.caught_up_ms) / 1000)
        if self.newest_archived_ms is not None:
            if self.newest_kafka_ms is None:
                return None
            return max(0.0, (self.newest_kafka_ms - self.newest_archived_ms) / 1000)
        if self.oldest_pending_ms is not None:
            return max(0.0, (now_ms - self.oldest_pending_ms) / 1000)
        return None


@dataclass(frozen=True)
class TopicFreshness:
    topic: str
    sla_s: int
    lag_s: float                    # the worst partition's
    partitions: tuple[PartitionFreshness, ...]  # those with messages waiting


def topic_lags(partitions: Iterable[PartitionFreshness], now_ms: int) -> dict[str, float]:
    """Per topic, its worst partition's lag (topics whose lags Kafka could not tell: absent)."""
    lags: dict[str, float] = {}
    for p in partitions:
        if (lag := p.lag_s(now_ms)) is not None:
            lags[p.topic] = max(lag, lags.get(p.topic, 0.0))
    return dict(sorted(lags.items()))


def plan_to_commit_s(planned_at: str | None, committed_at: str | None) -> float | None:
    """A run's seconds from its plan to its commit (ISO times); None when either is unknown."""
    try:
        return max(0.0, (datetime.fromisoformat(committed_at)
                         - datetime.fromisoformat(planned_at)).total_seconds())
    except (TypeError, ValueError):
        return None


def topic_pending(partitions: Iterable[PartitionFreshness]) -> dict[str, int]:
    """Per topic, the messages in Kafka not archived yet (its partitions' sum)."""
    waiting: dict[str, int] = {}
    for p in partitions:
        waiting[p.topic] = waiting.get(p.topic, 0) + p.pending
    return dict(sorted(waiting.items()))


def past_sla(partitions: Iterable[PartitionFreshness], sla_s: Callable[[str], int],
             now_ms: int) -> list[TopicFreshness]:
    by_topic: dict[str, list[PartitionFreshness]] = defaultdict(list)
    for p in partitions:
        by_topic[p.topic].append(p)
    lagging = []
    for topic, parts in sorted(by_topic.items()):
        lags = [lag for p in parts if (lag := p.lag_s(now_ms)) is not None]
        if lags and max(lags) > sla_s(topic):
            lagging.append(TopicFreshness(topic, sla_s(topic), max(lags),
                                          tuple(p for p in parts if p.pending)))
    return lagging


def read_tokens(store, group: str, topics: Iterable[str]
                ) -> tuple[dict[str, dict[int, int]], dict[str, str]]:
    """Each topic's token offsets, and the topics whose token cannot be read with why:
    a malformed token is that topic's problem (the plan holds it), not the group's."""
    from kafka_archive.tokens import MalformedTokenError

    offsets, unreadable = {}, {}
    for topic in topics:
        try:
            token = store.read(group, topic).token
        except MalformedTokenError as exc:
            unreadable[topic] = str(exc)
            continue
        offsets[topic] = dict(token.offsets) if token else {}
    return offsets, unreadable


def caught_up(cat) -> dict[tuple[str, int], int]:
    """(topic, partition) -> when the archive last held everything Kafka had (ms), from
    the catalog's summaries (catalog.state.Summary.caught_up_at)."""
    from datetime import datetime

    return {(name, s.partition): int(datetime.fromisoformat(s.caught_up_at).timestamp() * 1000)
            for name, t in cat.state.topics.items() for s in t.summaries.values()
            if s.caught_up_at}


def observe(consumer, group: Group, tokens: dict[str, dict[int, int]],
                      manifest_rows: list[dict], topics: Iterable[str] = (),
                      unreadable: Iterable[str] = (),
                      caught_up_at: dict[tuple[str, int], int] | None = None
                      ) -> list[PartitionFreshness]:
    """Kafka's side now, against the tokens, for the group's topics (or only `topics`).
    The newest archived message's timestamp comes from the manifest when this run's slice
    reached the token, else from Kafka (the message just below the token, while retained)."""
    from kafka_archive.plan import planning

    timestamp_at = planning.oldest_pending_reader(consumer)  # first message at or after
    in_run = {(r["topic"], r["partition"]): r for r in manifest_rows if r["records"]}
    found = []
    only, skipped = set(topics), set(unreadable)  # no token to measure from: not measured
    observed = planning.observe(consumer, group)
    for topic, why in sorted(observed.unavailable.items()):
        log.warning("%s: not measured: %s", topic, why)
    for s in observed.states:
        if (only and s.topic not in only) or s.topic in skipped:
            continue
        token = tokens.get(s.topic, {}).get(s.partition)
        archived_to = token if token is not None else (
            s.earliest if group.start_from == "earliest" else s.latest)
        newest_kafka = newest_archived = oldest_pending = None
        if s.latest > archived_to:
            newest_kafka = timestamp_at(s.topic, s.partition, s.latest - 1)
            row = in_run.get((s.topic, s.partition))
            if row and row["end"] == archived_to:
                newest_archived = row["max_timestamp_ms"]
            elif token and token - 1 >= s.earliest:
                newest_archived = timestamp_at(s.topic, s.partition, token - 1)
            if newest_archived is None:
                oldest_pending = timestamp_at(s.topic, s.partition, max(archived_to, s.earliest))
        found.append(PartitionFreshness(s.topic, s.partition, archived_to, s.latest,
                                        newest_kafka, newest_archived, oldest_pending,
                                        (caught_up_at or {}).get((s.topic, s.partition))))
    return found
