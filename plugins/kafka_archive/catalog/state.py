"""The catalog's state, and how one log entry changes it. Pure: no I/O.

The state is small: per (topic, Kafka partition, generation) a `Summary` of its current
files (counts, the offsets they cover, the newest run), per topic the time partitions
that are still open and its finalize watermark, the accepted losses, and the last few
runs. It never holds the rows themselves: those live in row chunks (catalog.chunks), so
what a reader of the state pays follows the number of partitions, not history.

Entries (one JSON object each, written to the log in order):
- `commit`:   a run's rows added, the rows its rewind moved aside removed, its losses;
- `backfill`: rows replaced (removed, then added under the same keys);
- `loss`:     a range lost to retention and accepted;
- `finalize`: time partitions that became final, and the topic's new watermark;
- `compaction`: contiguous rows replaced by one whose files are theirs rewritten
  (commit.compaction).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from kafka_archive import layout
from kafka_archive.errors import TerminalError
from kafka_archive.manifest import row_files

Range = tuple[int, int]
RECENT_RUNS = 20  # runs kept in the state for the page and for idempotent commits


class OverlapError(TerminalError):
    """An entry would put an offset into two current files: refused, nothing written."""


def row_key(row: dict) -> tuple[str, int, int, int]:
    return row["topic"], row["partition"], row["_generation"], row["start"]


def part_key(partition: int, generation: int) -> str:
    return f"{partition}:{generation}"


def key_part(key: str) -> tuple[int, int]:
    """part_key's inverse: (partition, generation)."""
    partition, generation = key.split(":")
    return int(partition), int(generation)


@dataclass
class Summary:
    """What is current of one Kafka partition in one generation."""
    partition: int
    generation: int
    files: int = 0
    records: int = 0
    bytes: int = 0
    rows: int = 0
    covered: list[list[int]] = field(default_factory=list)  # merged [start, end) of its rows
    last_run: str | None = None   # the run that wrote the row reaching furthest
    caught_up_at: str | None = None  # the last plan time the archive held all Kafka had

    @property
    def end(self) -> int | None:
        """One past the highest offset a current row covers."""
        return self.covered[-1][1] if self.covered else None

    def add(self, row: dict, sign: int) -> None:
        self.files += sign * len(row_files(row))
        self.records += sign * row["records"]
        self.bytes += sign * (row.get("bytes") or 0)
        self.rows += sign
        furthest = row["end"] >= (self.end or 0)
        if row["end"] > row["start"]:
            self.covered = (_union if sign > 0 else minus)(self.covered, row["start"], row["end"])
        if sign > 0 and furthest:
            self.last_run = row["_run"].rsplit("/", 1)[-1]
        if sign > 0 and (row.get("caught_up_at") or "") > (self.caught_up_at or ""):
            self.caught_up_at = row["caught_up_at"]  # each such row says: all was held then
        elif sign < 0 and furthest:
            self.caught_up_at = None  # a rewind took out the end: not known to be held

    def overlap(self, start: int, end: int) -> Range | None:
        for a, b in self.covered:
            if a < end and start < b:
                return max(a, start), min(b, end)
        return None


def _union(ranges: list[list[int]], start: int, end: int) -> list[list[int]]:
    out, placed = [], False
    for a, b in ranges:
        if b < start or (placed and a > end):
            out.append([a, b])
        elif a > end:
            out += [[start, end], [a, b]]
            placed = True
        else:
            start, end = min(a, start), max(b, end)
    if not placed:
        out.append([start, end])
    return sorted(out)


def minus(ranges: list[list[int]], start: int, end: int) -> list[list[int]]:
    out = []
    for a, b in ranges:
        if b <= start or a >= end:
            out.append([a, b])
            continue
        if a < start:
            out.append([a, start])
        if b > end:
            out.append([end, b])
    return out


@dataclass
class Topic:
    summaries: dict[str, Summary] = field(default_factory=dict)  # part_key -> summary
    open_time: set[str] = field(default_factory=set)    # time partitions with files, not final
    finalized_through_ms: int | None = None
    lost: dict[int, list[list[int]]] = field(default_factory=dict)  # partition -> ranges
    spots: dict[str, int] = field(default_factory=dict)  # part_key -> rebuild.plan_marks

    def summary(self, partition: int, generation: int) -> Summary:
        key = part_key(partition, generation)
        if key not in self.summaries:
            self.summaries[key] = Summary(partition, generation)
        return self.summaries[key]


@dataclass
class State:
    seq: int = 0                      # the last log entry applied
    topics: dict[str, Topic] = field(default_factory=dict)
    accepted: list[dict] = field(default_factory=list)  # plan.losses.AcceptedLoss as dicts
    recent: list[dict] = field(default_factory=list)    # newest first: run summaries

    def topic(self, name: str) -> Topic:
        topic = self.topics.get(name)  # not setdefault: a Topic made per row costs 6 us
        if topic is None:
            topic = self.topics[name] = Topic()
        return topic

    def with_rows(self) -> set[str]:
        """Topics a row was ever in the catalog for: the ones with tables in a table group.
        A topic known only by a loss (deleted before its slice was archived) or a spot
        (begun without a message) has none."""
        return {name for name, topic in self.topics.items() if topic.summaries}

    def has_run(self, run_id: str, kind: str = "commit") -> bool:
        return any(r["run_id"] == run_id and r.get("kind", "commit") == kind for r in self.recent)

    # --- applying entries -------------------------------------------------------------

    def apply(self, entry: dict, check: bool = False) -> None:
        """Apply one log entry. check: refuse (OverlapError) rows whose offsets a current
        row already covers, after the entry's removals: the archive would hold a message
        twice."""
        kind = entry["kind"]
        # a compaction rewrites files, whatever their time partitions' state: none opens
        still_open = ({name: set(t.open_time) for name, t in self.topics.items()}
                      if kind == "compaction" else None)
        self.apply_rows(entry.get("remove", ()), entry.get("add", ()), check)
        if kind == "compaction":
            for name, topic in self.topics.items():
                topic.open_time &= still_open.get(name, set())
        for loss in entry.get("lost", ()):
            ranges = self.topic(loss["topic"]).lost.setdefault(loss["partition"], [])
            if [loss["lost_from"], loss["lost_to"]] not in ranges:
                ranges.append([loss["lost_from"], loss["lost_to"]])
                ranges.sort()
        for spot in entry.get("spots", ()):
            spots = self.topic(spot["topic"]).spots
            key = part_key(spot["partition"], spot["generation"])
            spots[key] = max(spots.get(key, 0), spot["offset"])
        if kind == "loss":
            record = entry["loss"]
            if record not in self.accepted:
                self.accepted.append(record)
                self.accepted.sort(key=lambda a: (a["topic"], a["partition"], a["lost_from"]))
        if kind == "finalize":
            for name, done in entry["topics"].items():
                topic = self.topic(name)
                topic.open_time -= set(done["paths"])
                topic.finalized_through_ms = done["through_ms"]
        if kind in ("commit", "backfill") and entry.get("run"):
            self.recent = ([{**entry["run"], "kind": kind}] + self.recent)[:RECENT_RUNS]
        self.seq = entry["seq"]

    def apply_rows(self, removed, added, check: bool = False) -> None:
        """An entry's rows: the removed ones first, then the added (catalog.rebuild
        applies them a partition at a time, which comes to the same: a row changes only
        its own partition's summary)."""
        for row in removed:
            self.topic(row["topic"]).summary(row["partition"], row["_generation"]).add(row, -1)
        for row in added:
            summary = self.topic(row["topic"]).summary(row["partition"], row["_generation"])
            if check and row["end"] > row["start"] and (twice := summary.overlap(row["start"],
                                                                                 row["end"])):
                raise OverlapError(
                    f"{row['topic']} partition {row['partition']}: offsets [{twice[0]}, "
                    f"{twice[1]}) of run {row['_run'].rsplit('/', 1)[-1]} are already in a "
                    "current file of the catalog; refusing to archive them twice (a rewind "
                    "whose plan did not move the old files aside?)")
            summary.add(row, +1)
            for f in row_files(row):
                if f.get("time"):
                    self.topic(row["topic"]).open_time.add(f["time"])

    # --- serialization --------------------------------------------------------------

    def to_json(self) -> dict:
        return {"seq": self.seq, "accepted": self.accepted, "recent": self.recent,
                "topics": {name: {"summaries": {k: s.__dict__ for k, s in t.summaries.items()},
                                  "open_time": sorted(t.open_time),
                                  "finalized_through_ms": t.finalized_through_ms,
                                  "lost": {str(p): r for p, r in t.lost.items()},
                                  "spots": t.spots}
                           for name, t in sorted(self.topics.items())}}

    @classmethod
    def from_json(cls, data: dict) -> State:
        topics = {name: Topic({k: Summary(**s) for k, s in t["summaries"].items()},
                              set(t["open_time"]), t["finalized_through_ms"],
                              {int(p): r for p, r in t["lost"].items()}, t.get("spots", {}))
                  for name, t in data["topics"].items()}
        return cls(data["seq"], topics, data["accepted"], data["recent"])


def lost_ranges(state: State) -> dict[tuple[str, int], list[Range]]:
    """(topic, partition) -> ranges lost to retention: skipped by a plan or accepted."""
    lost: dict[tuple[str, int], list[Range]] = defaultdict(list)
    for name, topic in state.topics.items():
        for partition, ranges in topic.lost.items():
            lost[(name, partition)] += [tuple(r) for r in ranges]
    for a in state.accepted:
        if (a["lost_from"], a["lost_to"]) not in lost[(a["topic"], a["partition"])]:
            lost[(a["topic"], a["partition"])].append((a["lost_from"], a["lost_to"]))
    return dict(lost)


def with_time_partitions(row: dict, spec: layout.LayoutSpec, root: str, group: str) -> dict:
    """The row with each file's time partition (`time`) where the file sits in one (the
    event-time layout; not `_late/` or `_quarantine/`), from layout's inverse."""
    if spec.kind != "event_time":
        return row
    files = []
    for f in row_files(row):
        where = layout.parse_url(root, f["url"], spec)
        files.append({**f, "time": where.time_path if where and where.place == "time" else None})
    return {**row, "files": files}
