"""Planning a run: which offsets of which Kafka partitions this run archives.

`decide` is the pure heart: from what Kafka holds, what the tokens say and the group's
policy it computes the slices [start, end) and the anomalies. `observe` reads Kafka's
side with kafka-python. The plan is fixed before any data moves and stored as JSON, so a
failed run is re-executed unchanged.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Callable

from kafka_archive.config import Group, Policy
from kafka_archive.errors import TerminalError, TransientError


@dataclass(frozen=True)
class PartitionState:
    topic: str
    partition: int
    earliest: int  # first retained offset
    latest: int    # next offset to be written (high watermark)


@dataclass(frozen=True)
class Caps:
    """A manual run's limits per partition; each set one replaces the policy's for that run."""
    max_records: int | None = None
    max_bytes: int | None = None

    def apply(self, policy: Policy) -> Policy:
        return replace(policy, max_records=self.max_records or policy.max_records,
                       max_bytes=self.max_bytes or policy.max_bytes)


@dataclass(frozen=True)
class Slice:
    topic: str
    partition: int
    start: int
    end: int        # exclusive; start == end only initialises a token (start_from: latest)
    max_bytes: int  # the job ends the slice early, deterministically, past this many bytes
    # after a rewind: ((end, finalized_ms), ...) in offset order: the offsets below `end`
    # (and at or past the previous end) were archived before, and (event-time layout)
    # placed by a finalize watermark holding time partitions ending at or before
    # finalized_ms (None: none) final, as their rows record it (`placed_by`). Archived
    # again, they go where they were: back into a finalized time partition, not `_late/`,
    # so a rewind never empties what folder readers see; and no size cut falls before
    # the last end (the rows are archived again whole)
    archived_before: tuple[tuple[int, int | None], ...] = ()
    # after a rewind: the files of the rows archived again (their URLs when the plan was
    # made); what Kafka no longer returns of the slice's offsets (its log cleaner removed
    # it, retention deleted it, an unclean election truncated it) is kept from them
    # (archive.earlier), so a rewind never drops what the archive held
    earlier: tuple[str, ...] = ()
    # after a rewind: the last message of each row archived again (records.fingerprint),
    # where the row keeps one; the plan's look compares them with Kafka's before anything
    # moves aside (archive.earlier.first_reused), and the job as it reads (agreeing_with_last)
    earlier_last: tuple[tuple[int, int, int], ...] = ()
    # other generations' current rows holding offsets of the slice, as (generation, start,
    # end, files), each generation's in offset order: the job counts a message they hold
    # too (the same one at its offset) apart, so the audit counts it once however many
    # generations archived it (SliceRow.audit_elsewhere)
    elsewhere: tuple[tuple[int, int, int, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class Anomaly:
    """Something wrong with one topic. Unless its action is `skipped` (loss accepted by
    `on_retention_gap: skip`), the topic is `held`: left out of the run, while the group's
    other topics are archived; the run then ends failed, naming it."""
    kind: str       # retention_gap | token_ahead | archive_ahead | offsets_reused | vanished
    #                 | malformed_token | name_taken | unavailable
    topic: str
    partition: int  # -1: the whole topic
    lost_from: int  # retention_gap: the lost range; token_ahead: token and Kafka's latest;
    #                 archive_ahead: the archive's end and Kafka's latest
    lost_to: int    # exclusive
    action: str     # failed (the topic is held) | skipped
    detail: str = ""

    def describe(self) -> str:
        where = self.topic if self.partition < 0 else f"{self.topic} partition {self.partition}"
        if self.kind == "retention_gap":
            count = self.lost_to - self.lost_from
            return (f"{where}: offsets [{self.lost_from}, {self.lost_to}) ({count} messages) "
                    "were deleted by retention before they were archived")
        if self.kind == "token_ahead":
            return (f"{where}: token says {self.lost_from} but Kafka's latest offset is "
                    f"{self.lost_to}; the token belongs to other data (another cluster, or a "
                    "topic deleted and re-created).")
        if self.kind == "archive_ahead":
            return (f"{where}: the archive holds offsets up to {self.lost_from - 1} but Kafka's "
                    f"latest offset is {self.lost_to}: the topic was deleted and re-created, or "
                    "an unclean leader election truncated it, so Kafka's offsets name other "
                    "messages than the archived ones. Archiving them again would replace "
                    "archived messages with others.")
        if self.kind == "offsets_reused":
            return (f"{where}: Kafka holds another message at offset {self.lost_from} than "
                    "the archive does: the topic was deleted and re-created, or an unclean "
                    "leader election truncated it and new messages took its offsets. "
                    "Archiving it again would replace archived messages with others.")
        return f"{where}: {self.detail}"

    def key(self) -> str:
        """The same problem seen by several runs has the same key (mailed once)."""
        return f"{self.kind} {self.topic} {self.partition} {self.lost_from}"

    def remedy(self, group: str) -> str:
        if self.kind == "retention_gap":
            return (f"kafka-archive accept-loss --group {group} --topic {self.topic} "
                    f"--partition {self.partition} --reason \"...\"")
        if self.kind == "name_taken":
            return (f"exclude {self.topic} from group {group} (topics.exclude in the config), "
                    "or archive it in a group of its own")
        if self.kind == "vanished":
            return f"delete the token {group}/{self.topic} if the topic was deleted on purpose"
        if self.kind == "unavailable":  # a partition without a leader: Kafka's to mend
            return ("none in the archive: the next run archives the topic once Kafka serves "
                    "its every partition again; if this lasts, see to the brokers (kafka-topics "
                    "--describe --unavailable-partitions)")
        if self.kind == "token_ahead":  # a re-created topic's offsets are other messages
            return (f"fix or delete the token {group}/{self.topic}; if the topic was "
                    "re-created, set a new `generation` in the config first, so that the "
                    "new topic's files get new names and the archived ones stay as they are")
        if self.kind in ("archive_ahead", "offsets_reused"):
            return ("set a new `generation` in the config (the topic's files get new names "
                    f"and the archived ones stay as they are), and delete the token "
                    f"{group}/{self.topic} if it is there")
        return f"fix or delete the token {group}/{self.topic}"


@dataclass(frozen=True)
class Plan:
    group: str
    run_id: str
    created_at: str
    bootstrap: str
    generation: int
    format: dict
    slices: tuple[Slice, ...]
    token_versions: dict[str, str | None]  # per topic in the plan: the token version read
    base_offsets: dict[str, dict[str, int]]  # per topic: the token's offsets when planned
    anomalies: tuple[Anomaly, ...] = ()
    superseded: tuple[str, ...] = ()         # files moved aside by a rewind
    waiting: dict[str, str] = field(default_factory=dict)  # "topic/partition" -> why not now
    # event-time layout, per topic: time partitions ending at or before this (ms) were
    # final when planned; the job writes their late messages beside them (`_late/`)
    finalized: dict[str, int] = field(default_factory=dict)
    topic_formats: dict[str, dict] = field(default_factory=dict)  # topics not in `format`
    # per topic and partition Kafka's end offset when planned: a slice reaching it means
    # the archive then held everything Kafka had (freshness measured by offsets)
    latest: dict[str, dict[str, int]] = field(default_factory=dict)
    # per topic, the run id in the header of the token read: a token that changed under
    # the plan but still names it (or is gone) was changed by a person, not by another run
    token_runs: dict[str, str | None] = field(default_factory=dict)
    # an event-time table group's, per topic: its table's [name, type] columns when planned
    # (the job writes them so, and types only the fields none names: formats.columns)
    columns: dict[str, list[list]] = field(default_factory=dict)
    # a typed table's (formats.schemas), per topic: column -> the schema id that set its
    # type, for the reasons of messages whose schema cannot join it
    column_origins: dict[str, dict[str, str]] = field(default_factory=dict)
    # a typed table's, per topic: column -> the identities of the field it holds where
    # they are not just its name (formats.schemas.fit: a Protobuf field's number, an Avro
    # field's aliases), so a renamed field fills its column
    column_identities: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    # the catalog's newest entry when planned: a token that changed under the plan was
    # advanced by another run if that run's commit came after it, else it is an older
    # copy a person put back (None: a plan from before this was recorded)
    catalog_seq: int | None = None
    # a rewind into a compacted row (catalog.pieces): per such row, {topic, partition,
    # generation, row (the catalog row), below}: the job keeps its rows below `below`
    # as a row of this run, the rest is archived again (rewinds.supersede)
    cuts: tuple[dict, ...] = ()

    def format_for(self, topic: str) -> dict:
        return self.topic_formats.get(topic, self.format)

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), indent=1, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Plan:
        raw = json.loads(data)
        raw["slices"] = tuple(Slice(**{**s, "archived_before": tuple(
            tuple(step) for step in s.get("archived_before", ())),
            "earlier": tuple(s.get("earlier", ())),
            "earlier_last": tuple(tuple(m) for m in s.get("earlier_last", ())),
            "elsewhere": tuple((g, a, b, tuple(urls)) for g, a, b, urls in s.get("elsewhere", ()))})
            for s in raw["slices"])
        raw["anomalies"] = tuple(Anomaly(**a) for a in raw["anomalies"])
        raw["superseded"] = tuple(raw["superseded"])
        raw["cuts"] = tuple(raw.get("cuts", ()))
        return cls(**raw)

    def topics(self) -> list[str]:
        return sorted({s.topic for s in self.slices})

    def records(self) -> int:
        return sum(s.end - s.start for s in self.slices)


class HeldTopicsError(TerminalError):
    """Topics left out of a run for their anomalies (already reported when planned)."""

    def __init__(self, group: str, run_id: str, anomalies: list[Anomaly]):
        self.anomalies = anomalies
        topics = sorted({a.topic for a in anomalies})
        super().__init__(
            f"run {run_id} of group {group} left out topic(s) {', '.join(topics)}; the other "
            "topics were archived. " + " ".join(f"{a.describe()} Remedy: {a.remedy(group)}."
                                               for a in anomalies))


def held(anomalies) -> list[Anomaly]:
    """The anomalies that keep their topic out of the run."""
    return [a for a in anomalies if a.action != "skipped"]


def decide(group: Group, states: list[PartitionState], tokens: dict[str, dict[int, int]],
           now_ms: int, oldest_pending_ms: Callable[[str, int, int], int | None],
           caps: Caps = Caps(), archived: dict[str, dict[int, int]] | None = None
           ) -> tuple[list[Slice], list[Anomaly], dict[str, str]]:
    """Slices to archive, anomalies found, and partitions left waiting (with the reason).
    A topic with an anomaly that is not a skipped (accepted) retention gap gets no slice.

    tokens: per topic, partition -> next offset (a missing partition has no token).
    oldest_pending_ms(topic, partition, offset): timestamp of the message at offset, asked
    only when a partition has fewer pending messages than min_records.
    caps: a manual run's max_records / max_bytes, replacing the policy's.
    archived: per topic, partition -> one past the last offset the archive holds. Beyond
    Kafka's latest offset, Kafka's offsets are other messages (archive_ahead), and a
    rewind or a deleted token would replace archived messages with them.
    """
    slices, anomalies, waiting = [], [], {}
    for s in states:
        policy = caps.apply(group.policy_for(s.topic))
        token = tokens.get(s.topic, {}).get(s.partition)
        if token is not None and token > s.latest:
            anomalies.append(Anomaly("token_ahead", s.topic, s.partition, token, s.latest, "failed"))
            continue
        if (end := (archived or {}).get(s.topic, {}).get(s.partition, 0)) > s.latest:
            anomalies.append(Anomaly("archive_ahead", s.topic, s.partition, end, s.latest, "failed"))
            continue
        if token is None:
            start = s.earliest if group.start_from == "earliest" else s.latest
        elif token < s.earliest:
            action = "skipped" if group.on_retention_gap == "skip" else "failed"
            anomalies.append(Anomaly("retention_gap", s.topic, s.partition, token, s.earliest, action))
            start = s.earliest
        else:
            start = token
        pending = s.latest - start
        if token is None and pending == 0:
            if start > 0:  # start_from: latest, or an emptied partition: remember the spot
                slices.append(Slice(s.topic, s.partition, start, start, policy.max_bytes))
            continue
        if pending == 0:
            if token is not None and start != token:  # a skipped gap up to the log's end:
                # the token moves past it (else the gap is found, and skipped, every run)
                slices.append(Slice(s.topic, s.partition, start, start, policy.max_bytes))
            continue
        if pending < policy.min_records:
            oldest = oldest_pending_ms(s.topic, s.partition, start)
            # None: no message pending, only offsets no reader sees (a transaction's
            # marker): nothing to wait for, and waiting would show a lag for good
            age_s = (now_ms - oldest) / 1000 if oldest is not None else policy.max_delay_s
            if age_s < policy.max_delay_s:
                waiting[f"{s.topic}/{s.partition}"] = (
                    f"{pending} pending < min_records {policy.min_records}, oldest {age_s:.0f}s "
                    f"< max_delay {policy.max_delay_s}s")
                continue
        slices.append(Slice(s.topic, s.partition, start,
                            min(s.latest, start + policy.max_records), policy.max_bytes))
    out = {a.topic for a in held(anomalies)}  # the whole topic: its token moves as one
    return ([s for s in slices if s.topic not in out], anomalies,
            {k: v for k, v in waiting.items() if k.rsplit("/", 1)[0] not in out})


def only_topics(observed: Observed, topics: tuple[str, ...], group: Group
                ) -> list[PartitionState]:
    """The states of the requested topics (a manual run's subset; empty: all). A topic
    the group does not archive is an error, not silently nothing to do."""
    states = observed.states
    if not topics:
        return states
    unknown = sorted(set(topics) - {s.topic for s in states} - set(observed.unavailable))
    if unknown:
        raise TerminalError(
            f"group {group.name} does not archive topic(s) {', '.join(unknown)}: not in Kafka, "
            f"or not selected by its include {list(group.include)} / exclude "
            f"{list(group.exclude)}")
    return [s for s in states if s.topic in topics]


@dataclass(frozen=True)
class Observed:
    states: list[PartitionState]
    unavailable: dict[str, str]  # topic -> why Kafka gave none of its offsets


def observe(consumer, group: Group) -> Observed:
    """Every partition of every topic the group selects, with its retained offset range.
    Topics and partitions are discovered afresh on every run. When Kafka cannot give the
    offsets of some partition (one without a leader: its broker down, its replicas out
    of sync), each topic is asked alone, and only the topics that fail are unavailable:
    the others go on. When every topic fails, Kafka is what is down: its error is raised."""
    from kafka import TopicPartition  # kafka-python: not on the job's Python workers

    topics = sorted(t for t in consumer.topics() if group.selects(t))
    partitions = {t: [TopicPartition(t, p) for p in sorted(consumer.partitions_for_topic(t) or ())]
                  for t in topics}

    def states(tps: list[TopicPartition]) -> list[PartitionState]:
        if not tps:
            return []
        earliest, latest = consumer.beginning_offsets(tps), consumer.end_offsets(tps)
        return [PartitionState(tp.topic, tp.partition, earliest[tp], latest[tp]) for tp in tps]

    try:
        return Observed(states([tp for t in topics for tp in partitions[t]]), {})
    except TransientError as whole:
        if len(topics) < 2:
            raise
        found, unavailable = [], {}
        for topic in topics:
            try:
                found += states(partitions[topic])
            except TransientError as alone:
                unavailable[topic] = str(alone)
        if len(unavailable) == len(topics):
            raise whole
        return Observed(found, unavailable)


def oldest_pending_reader(consumer) -> Callable[[str, int, int], int | None]:
    """Reads the timestamp of the first message at or after an offset (None: there is
    none); used for the max_delay policy, freshness and status."""
    from kafka import TopicPartition

    from kafka_archive import brokers

    def read(topic: str, partition: int, offset: int) -> int | None:
        tp = TopicPartition(topic, partition)
        return brokers.timestamps_at(consumer, {tp: offset}).get(tp)
    return read
