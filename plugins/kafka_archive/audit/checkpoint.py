"""The audit's memory of a group: what it already counted and what it already judged.

`<archive_root>/_audit/<group>/checkpoint.json`, replaced only by compare-and-swap
(Storage.put_if, the conditional write tokens use), holds:

- `catalog_seq`: the group's catalog entry up to which rows are counted in `archived`
  (None: recount from the catalog's current rows); `events`: per partition folder of the copied monitoring events,
  the last file counted in `expected`; `seen`: per producer, the event sequence numbers
  counted (as ranges), so an event delivered twice counts once across audits;
- `expected`, `archived`: the counts folded in so far, as reconcile takes them;
  `unclosed`: the windows a producer opened (its opening event) and published no count
  for yet, with those producers: a producer killed mid-window stays here;
- `windows`: the last verdict of every window, so a window judged final stays judged
  while its counts do not change (even if its topic's archive falls back for a rewind);
- `retired_before_ms`: judged windows ending before it were dropped from the counts and
  verdicts (`retire`), so the checkpoint's size follows the open windows, not history;
  counts for them that come later are ignored;
- `alarms`: each MISSING or EXCESS window, open until it turns OK or is acknowledged:
  when it was found, when it was mailed (a mismatch is mailed once), who acknowledged
  it, when and why.

Pure data and folding here; reading the archive is kafka_archive.audit.incremental's.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import asdict, dataclass, field
from typing import Iterable

from kafka_archive.audit.reconcile import ALARMS, BadMonitoringEvent, MonitoringEvent, Verdict

FORMAT = 2  # 1 kept the id of every run counted: read, then recounted once
Key = tuple[str, str, int]  # (topic, source, window start ms)


@dataclass
class Alarm:
    topic: str
    source: str
    window_start_ms: int
    window_ms: int
    status: str                # MISSING | EXCESS
    expected: int
    archived: int
    found_at: str
    found_run: str
    mailed_at: str | None = None
    ack: dict | None = None    # {"by", "at", "reason"}

    @property
    def key(self) -> Key:
        return (self.topic, self.source, self.window_start_ms)

    @property
    def amount(self) -> int:
        return abs(self.archived - self.expected)

    @property
    def state(self) -> str:
        """new (not mailed yet), open (mailed, not acknowledged) or acknowledged."""
        return "acknowledged" if self.ack else "open" if self.mailed_at else "new"

    @classmethod
    def of(cls, v: Verdict, at: str, run_id: str) -> Alarm:
        return cls(v.topic, v.source, v.window_start_ms, v.window_ms, v.status, v.expected or 0,
                   v.archived, at, run_id)

    def same_finding(self, v: Verdict) -> bool:
        """The same loss (or excess): its kind and amount (a late message counted on both
        sides changes neither)."""
        return (self.status, self.amount) == (v.status, abs(v.archived - (v.expected or 0)))


@dataclass
class Checkpoint:
    catalog_seq: int | None = 0
    events: dict[str, str] = field(default_factory=dict)
    seen: dict[str, list[list[int]]] = field(default_factory=dict)
    expected: dict[Key, tuple[int, int]] = field(default_factory=dict)  # -> (width, count)
    archived: dict[Key, int] = field(default_factory=dict)  # per archive window
    # -> (width, status, expected, archived[, the catalog's count when a rescan judged it])
    windows: dict[Key, tuple] = field(default_factory=dict)
    alarms: dict[Key, Alarm] = field(default_factory=dict)
    retired_before_ms: int | None = None
    version: str | None = None  # the stored version this was read from; not stored
    unclosed: dict[Key, list[str]] = field(default_factory=dict)  # -> producer ids

    def to_json(self) -> bytes:
        return json.dumps({
            "format": FORMAT, "catalog_seq": self.catalog_seq,
            "events": self.events, "seen": self.seen,
            "expected": [[*k, w, n] for k, (w, n) in self.expected.items()],
            "archived": [[*k, n] for k, n in self.archived.items()],
            "unclosed": [[*k, ids] for k, ids in self.unclosed.items()],
            "windows": [[*k, *v] for k, v in self.windows.items()],
            "alarms": [asdict(a) for a in self.alarms.values()],
            "retired_before_ms": self.retired_before_ms}).encode()

    @classmethod
    def from_json(cls, data: bytes, version: str | None) -> Checkpoint:
        raw = json.loads(data)
        if raw.get("format") not in (1, FORMAT):
            raise ValueError(f"checkpoint format {raw.get('format')!r}, this code reads {FORMAT}")
        return cls(raw.get("catalog_seq"), raw["events"], raw["seen"],  # format 1: None
                   {(t, s, w): (width, n) for t, s, w, width, n in raw["expected"]},
                   {(t, s, w): n for t, s, w, n in raw["archived"]},
                   {(t, s, w): tuple(rest) for t, s, w, *rest in raw["windows"]},
                   {(a["topic"], a["source"], a["window_start_ms"]): Alarm(**a)
                    for a in raw["alarms"]}, raw.get("retired_before_ms"), version,
                   {(t, s, w): ids for t, s, w, ids in raw.get("unclosed", [])})

    def forget_counts(self) -> None:
        """Start the counts over (a rescan); the verdicts and alarms stay."""
        self.catalog_seq, self.events, self.seen = None, {}, {}
        self.expected, self.archived, self.unclosed = {}, {}, {}

    def fold_events(self, events: Iterable[MonitoringEvent]) -> int:
        """Add events not counted yet (by producer and sequence number); how many."""
        added = 0
        for e in events:
            if not _claim(self.seen.setdefault(e.producer_id, []), e.seq):
                continue
            key = (e.topic, e.source, e.window_start_ms)
            width, count = self.expected.get(key, (e.window_ms, 0))
            if width != e.window_ms:
                raise BadMonitoringEvent(
                    f"topic {e.topic}, source {e.source}: window at {e.window_start_ms} is "
                    f"reported both {width} ms and {e.window_ms} ms wide "
                    f"(producer {e.producer_id} seq {e.seq})")
            self.expected[key] = (width, count + e.count)
            opened = self.unclosed.setdefault(key, [])
            if e.count == 0 and e.producer_id not in opened:  # its opening event
                opened.append(e.producer_id)
            elif e.count and e.producer_id in opened:  # its count: the window closed
                opened.remove(e.producer_id)
            if not opened:
                del self.unclosed[key]
            added += 1
        return added

    def judge(self, verdicts: list[Verdict], run_id: str, at: str, rescan: bool = False,
              basis: dict[Key, int] | None = None
              ) -> tuple[list[Verdict], list[Verdict], list[Alarm]]:
        """Record this audit's verdicts; returns (every window's verdict, the ones judged
        now, i.e. not a final verdict kept from before, and the alarms resolved).

        A window judged final before keeps its verdict while its counts are unchanged,
        unless `rescan`. A rescan judges by the files and gives `basis`, the catalog's
        count of each window then: a later plain audit, which counts by the catalog,
        compares with that, so a window the files lack stays judged so until a rescan
        finds it whole; where the catalog's count changed since (a late message), the
        change is added to what the files held (never a MISSING turned OK by one late
        message while the file is still gone).
        A window judged before that cannot be judged now (PENDING) keeps its verdict.
        A mismatch becomes an alarm (a new one if its counts differ from the open
        alarm's); an alarm is resolved once its window is judged anything but PENDING,
        MISSING or EXCESS."""
        every, judged, resolved, carried = [], [], [], {}
        for v in verdicts:
            key = (v.topic, v.source, v.window_start_ms)
            before = self.windows.get(key)
            if v.status == "PENDING" and before is not None and before[1] != "PENDING":
                # judged before, and cannot be judged now (its topic held by a plan in
                # flight, or behind): the verdict stands, a rescan's finding included
                every.append(v._replace(status=before[1], window_ms=before[0],
                                        archived=before[3]))
                continue
            if (not rescan and before is not None and len(before) > 4 and before[1] in ALARMS
                    and v.expected is not None
                    and (before[2], _catalog_count(before)) != (v.expected, v.archived)):
                # a rescan found the files short of (or beyond) what the catalog counted:
                # what the catalog gained since (a late message) adds to what the files
                # held; a plain audit never clears such a finding, a rescan does. (Also
                # where only the producers' count moved: judged again, the finding is
                # kept, not replaced by the catalog's count.)
                catalog_now = v.archived
                files = before[3] + catalog_now - _catalog_count(before)
                status = ("MISSING" if files < v.expected else "EXCESS" if files > v.expected
                          else before[1])
                v = v._replace(status=status, archived=files)
                carried[key] = catalog_now
            if (not rescan and before is not None and before[1] != "PENDING"
                    and (before[2], _catalog_count(before)) == (v.expected, v.archived)):
                if v.status != before[1]:  # e.g. PENDING while a rewound topic catches up
                    # (what the files held, where a rescan judged it by them)
                    v = v._replace(status=before[1], window_ms=before[0], archived=before[3])
                every.append(v)
                continue
            every.append(v)
            judged.append(v)
            self.windows[key] = (v.window_ms, v.status, v.expected, v.archived,
                                 *((basis.get(key, 0),) if basis is not None else
                                   (carried[key],) if key in carried else ()))
            alarm = self.alarms.get(key)
            if v.status in ("MISSING", "EXCESS"):
                if alarm is None or not alarm.same_finding(v):
                    self.alarms[key] = Alarm.of(v, at, run_id)
            elif alarm is not None and v.status != "PENDING":
                resolved.append(self.alarms.pop(key))
        return every, judged, resolved

    def retire(self, before_ms: int) -> int:
        """Drop every judged window (not PENDING, no unresolved alarm) that ends at or
        before before_ms, with its counts; counts of retired windows that come later are
        dropped too (drop_retired). How many windows left."""
        gone = [key for key, (width, status, *_) in self.windows.items()
                if key[2] + width <= before_ms and status != "PENDING" and key not in self.alarms]
        for topic, source, start in gone:
            width = self.windows.pop((topic, source, start))[0]
            self.expected.pop((topic, source, start), None)
            self.unclosed.pop((topic, source, start), None)
            for key in [k for k in self.archived if k[:2] == (topic, source)
                        and start <= k[2] < start + width]:
                del self.archived[key]
        self.retired_before_ms = max(before_ms, self.retired_before_ms or before_ms)
        return len(gone)

    def drop_retired(self) -> int:
        """Counts folded in for windows already retired: late events, or rows counted
        again; they would make a partial window. How many dropped."""
        if self.retired_before_ms is None:
            return 0
        late = [k for k in (*self.expected, *self.archived) if k not in self.windows
                and k[2] < self.retired_before_ms and k[:2] + (k[2],) not in self.alarms]
        for key in late:
            self.expected.pop(key, None)
            self.unclosed.pop(key, None)
            self.archived.pop(key, None)
        return len(late)

    def find_alarm(self, topic: str, source: str, at_ms: int) -> Alarm | None:
        """The alarm of topic and source whose window holds the time at_ms."""
        for a in self.alarms.values():
            if (a.topic, a.source) == (topic, source) and \
                    a.window_start_ms <= at_ms < a.window_start_ms + a.window_ms:
                return a
        return None


def _catalog_count(window: tuple) -> int:
    """What the catalog counted of a judged window: a rescan's record keeps it apart from
    what the files held."""
    return window[4] if len(window) > 4 else window[3]


def _claim(ranges: list[list[int]], seq: int) -> bool:
    """Add seq to sorted, disjoint [first, last] ranges; False if it was in one already."""
    i = bisect.bisect_right(ranges, [seq, float("inf")])  # ranges[:i] start at or before seq
    if i and ranges[i - 1][1] >= seq:
        return False
    joins_left = i and ranges[i - 1][1] == seq - 1
    joins_right = i < len(ranges) and ranges[i][0] == seq + 1
    if joins_left and joins_right:
        ranges[i - 1][1] = ranges.pop(i)[1]
    elif joins_left:
        ranges[i - 1][1] = seq
    elif joins_right:
        ranges[i][0] = seq
    else:
        ranges.insert(i, [seq, seq])
    return True
