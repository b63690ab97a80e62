"""Replay, the plan: which archived files put a range of a topic back into Kafka.

A replay reads the current files of a partition-layout group (the backup) from the one
catalog, and produces each message again, in offset order,
to a target topic (kafka_archive.archive.replay_job, one Spark task per source partition).
The range is offsets [from, to) of every partition (or one), or the messages whose Kafka
timestamps are in [since, until). A range the archive does not hold whole is an error
naming the first missing offset, and so is a range lost to retention (an accepted loss):
a replay never silently skips a message.

`spans` is pure. `prepare` does the reading and writes the replay's plan once, at
`<archive_root>/_replays/<replay id>/replay.json`: the id is a hash of the request, so
running the same replay again finds its plan and its progress files and resumes.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Iterable

from kafka_archive import catalog, formats, layout
from kafka_archive.archive.replay_job import ReplayError
from kafka_archive.catalog import Contents
from kafka_archive.config import Config
from kafka_archive.errors import VersionConflict
from kafka_archive.manifest import row_files
from kafka_archive.storage import Storage

Range = tuple[int, int]


class MissingRangeError(ReplayError):
    """Part of the range is in no current file: a hole, or a loss accepted."""

    def __init__(self, message: str, topic: str, partition: int, first_missing: int):
        super().__init__(message)
        self.topic, self.partition, self.first_missing = topic, partition, first_missing


@dataclass(frozen=True)
class Request:
    group: str
    topic: str
    to_topic: str
    partition: int | None = None          # None: every archived partition
    from_offset: int | None = None
    to_offset: int | None = None          # exclusive
    since_ms: int | None = None
    until_ms: int | None = None           # exclusive
    bootstrap: str | None = None          # the target cluster; None: the archive's own
    hash_by_key: bool = False             # let the producer's partitioner choose
    allow_archived_target: bool = False   # the target may be a topic the archive archives

    def replay_id(self) -> str:
        """Same replay (what and where), same id: running it again resumes it. The loop
        guard's override does not change what lands in the target."""
        what = {k: v for k, v in asdict(self).items() if k != "allow_archived_target"}
        digest = hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:12]
        return f"{self.topic}-to-{self.to_topic}-{digest}"

    def time_range(self) -> bool:
        return self.since_ms is not None or self.until_ms is not None

    def check(self) -> None:
        offsets = self.from_offset is not None or self.to_offset is not None
        if offsets and self.time_range():
            raise ReplayError("give an offset range (from/to offset) or a time range "
                              "(since/until), not both")
        for low, high, what in ((self.from_offset, self.to_offset, "offset"),
                                (self.since_ms, self.until_ms, "time")):
            if low is not None and high is not None and low >= high:
                raise ReplayError(f"the {what} range [{low}, {high}) is empty")
        if self.topic == self.to_topic and self.bootstrap is None:
            raise ReplayError(f"the target {self.to_topic} is the topic replayed: name another "
                              "topic (--to-topic), or another cluster (--bootstrap)")


@dataclass(frozen=True)
class FileSpan:
    url: str
    start: int   # the offsets of the file to replay: [start, end)
    end: int


@dataclass(frozen=True)
class Span:
    """One source partition's part of a replay: its files in offset order."""
    partition: int
    target_partition: int | None   # None: the producer's partitioner chooses (by key)
    files: list[FileSpan] = field(default_factory=list)


def spans(contents: Contents, topic: str, partition: int | None,
          from_offset: int | None = None, to_offset: int | None = None,
          since_ms: int | None = None, until_ms: int | None = None) -> list[Span]:
    """Per source partition, the current files holding the range, in offset order. An
    offset range must be held whole ([from, to), from defaulting to the first archived
    offset and to to the last); a time range selects the files whose messages' time
    bounds meet it, and everything between the first and the last of them must be held.
    Offsets Kafka itself lacks (compaction, transaction markers: the rows' gaps) are no
    hole. Pure."""
    rows = [r for r in contents.of_topic(topic) if partition is None or r["partition"] == partition]
    found: list[Span] = []
    for p in sorted({r["partition"] for r in rows} | ({partition} if partition is not None else set())):
        chain = sorted((r for r in rows if r["partition"] == p), key=lambda r: (r["start"], r["end"]))
        if not chain:
            raise MissingRangeError(f"the archive holds no offset of {topic} partition {p}: "
                                    f"the first missing offset is {from_offset or 0}",
                                    topic, p, from_offset or 0)
        if since_ms is not None or until_ms is not None:
            meeting = [r for r in chain if r["records"] and _meets(r, since_ms, until_ms)]
            if not meeting:
                continue
            low, high = meeting[0]["start"], meeting[-1]["end"]
            wanted = {r["start"] for r in meeting}
        else:
            low = chain[0]["start"] if from_offset is None else from_offset
            high = chain[-1]["end"] if to_offset is None else to_offset
            if from_offset is not None and to_offset is None and low >= high:
                continue  # nothing archived from there on: nothing to replay
            wanted = {r["start"] for r in chain}
        taken = _cover(topic, p, chain, low, high, contents.lost.get((topic, p), ()))
        files = []
        for row in taken:
            if row["start"] not in wanted or not row["records"]:
                continue
            _check_lossless(topic, p, row, contents.format_of(row))
            files += [FileSpan(f["url"], max(row["start"], low), min(row["end"], high))
                      for f in row_files(row)]
        found.append(Span(p, None, files))
    return found


def _meets(row: dict, since_ms: int | None, until_ms: int | None) -> bool:
    return ((since_ms is None or row["max_timestamp_ms"] >= since_ms)
            and (until_ms is None or row["min_timestamp_ms"] < until_ms))


def _cover(topic: str, partition: int, chain: list[dict], low: int, high: int,
           lost: Iterable[Range]) -> list[dict]:
    """The rows covering [low, high), in order; the first offset no row holds is an error,
    named as a hole or as a recorded loss."""
    taken, position = [], low
    for row in chain:
        if row["end"] <= position:
            continue
        if row["start"] >= high:
            break
        if row["start"] > position:
            _missing(topic, partition, position, row["start"], lost)
        taken.append(row)
        position = row["end"]
    if position < high:
        _missing(topic, partition, position, high, lost)
    return taken


def _missing(topic: str, partition: int, start: int, end: int, lost: Iterable[Range]) -> None:
    for a, b in sorted(lost):
        if a <= start < b:
            raise MissingRangeError(
                f"{topic} partition {partition}: offsets [{a}, {b}) were deleted by retention "
                f"before they were archived (a loss accepted); the range to replay starts "
                f"missing at offset {start}: replay around it", topic, partition, start)
    raise MissingRangeError(
        f"{topic} partition {partition}: offsets [{start}, {end}) are in no current file of "
        f"the archive: the first missing offset is {start}", topic, partition, start)


def _check_lossless(topic: str, partition: int, row: dict, fmt: dict) -> None:
    if not formats.replayable(fmt):
        raise ReplayError(
            f"{topic} partition {partition}: offsets [{row['start']}, {row['end']}) are "
            f"archived as {fmt.get('kind')} (key {fmt.get('key')}), which keeps no message key, "
            "timestamp or headers: only SequenceFiles with the msgpack key and Parquet files "
            "can be replayed")


# --- reading the archive, checking the target, writing the plan --------------------------

def target_partitions(consumer, topic: str) -> int | None:
    """How many partitions the target topic has (a kafka-python consumer of its cluster);
    None when it does not exist."""
    if topic not in consumer.topics():
        return None
    return len(consumer.partitions_for_topic(topic) or ())


def archiving_groups(config: Config, topic: str) -> list[str]:
    """The configured groups that archive topic (from their include/exclude regexes)."""
    return [g.name for g in config.groups.values() if g.selects(topic)]


def check_target(config: Config, request: Request, target_partitions: int | None,
                 sources: list[Span]) -> None:
    """The target exists, is no topic the archive archives (no loops), and has a
    partition for each source partition, unless the producer hashes by key. Pure."""
    if request.bootstrap in (None, config.bootstrap_servers) and not request.allow_archived_target:
        if groups := archiving_groups(config, request.to_topic):
            raise ReplayError(
                f"the target {request.to_topic} is archived by group {', '.join(groups)}: "
                "replaying into it would archive the messages again (a loop); give "
                "--allow-archived-target if that is what you want")
    if target_partitions is None:
        raise ReplayError(f"the target topic {request.to_topic} does not exist at "
                          f"{request.bootstrap or config.bootstrap_servers}: create it first "
                          f"(with at least {max((s.partition for s in sources), default=0) + 1} "
                          "partitions to keep the partition numbers)")
    if not request.hash_by_key:
        beyond = [s.partition for s in sources if s.partition >= target_partitions]
        if beyond:
            raise ReplayError(
                f"the target {request.to_topic} has {target_partitions} partitions, the replay "
                f"needs partition {max(beyond)}: add partitions, or give --hash-by-key to let "
                "the producer choose by key (per-key order is kept, not partition numbers)")


def plan_replay(config: Config, storage: Storage, request: Request, target_partitions: int | None
                ) -> dict:
    """The replay's plan (JSON-able): checked against the archive and the target."""
    request.check()
    group = config.group(request.group)
    if group.layout.kind != "partition":
        raise ReplayError(f"group {request.group} has layout {group.layout.kind}: replay reads "
                          "a group laid out by Kafka partition (the backup)")
    cat = catalog.open_catalog(storage, config, request.group)
    # an offset range reads only the row chunks that can hold it
    contents = Contents.of(cat, cat.rows(request.topic, request.partition,
                                         end_after=request.from_offset,
                                         start_before=request.to_offset))
    found = spans(contents, request.topic, request.partition, request.from_offset,
                  request.to_offset, request.since_ms, request.until_ms)
    check_target(config, request, target_partitions, found)
    return {"replay_id": request.replay_id(), "request": asdict(request),
            "source_bootstrap": config.bootstrap_servers,
            "target_bootstrap": request.bootstrap or config.bootstrap_servers,
            "partitions": [{"partition": s.partition,
                            "target_partition": None if request.hash_by_key else s.partition,
                            "files": [asdict(f) for f in s.files]} for s in found]}


def prepare(config: Config, storage: Storage, request: Request, target_partitions: int | None,
            dry_run: bool = False) -> tuple[str, dict]:
    """The replay's plan URL and plan: the one written when this replay first ran (a
    resumed replay replays exactly what it set out to), else a new one, written unless
    dry_run. The target is checked again either way."""
    url = layout.replay_file(config.archive_root, request.replay_id(), "replay.json")
    existing = storage.get_or_none(url)
    if existing is not None:
        plan = json.loads(existing)
        check_target(config, request, target_partitions,
                     [Span(p["partition"], p["target_partition"]) for p in plan["partitions"]])
        return url, plan
    plan = plan_replay(config, storage, request, target_partitions)
    if not dry_run:
        try:
            storage.put_if(url, json.dumps(plan, indent=1, sort_keys=True).encode(), None)
        except VersionConflict:  # the same replay started meanwhile: take its plan
            return url, json.loads(storage.get_bytes(url))
    return url, plan


def describe(plan: dict) -> str:
    """The plan for people: per source partition, its target, files and offsets."""
    r = plan["request"]
    lines = [f"replay {plan['replay_id']}: {r['group']}/{r['topic']} -> {r['to_topic']} at "
             f"{plan['target_bootstrap']}"]
    for p in plan["partitions"]:
        files = p["files"]
        where = ("offsets [{}, {})".format(files[0]["start"], files[-1]["end"]) if files
                 else "nothing archived in the range")
        target = ("by key" if p["target_partition"] is None
                  else f"partition {p['target_partition']}")
        lines.append(f"  partition {p['partition']} -> {target}: {where} in {len(files)} files")
    return "\n".join(lines)
