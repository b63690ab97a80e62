"""The Kafka paper's audit, as pure functions: monitoring events, windows and verdicts.

Producers (kafka_archive.audit.producer.AuditedProducer) publish how many messages each
source sent per (topic, time window); the archive job counts what it archived per
(topic, source, window). Reconciliation compares the two for every window that is
closed and fully archived:

    OK          expected == archived
    MISSING n   n messages were counted by producers but never archived
    EXCESS n    n more messages were archived than producers counted (duplicates)
    PENDING     the window is not yet archived past its end plus the grace period
    UNAUDITED   archived messages from a source that publishes no counts for this topic
                (no header, or a producer without AuditedProducer), or more archived than
                counted where a producer of the source opened the window (or the one
                before) and never published its count (killed mid-window): its messages
                cannot be told from duplicates. Shown, never an alarm

Monitoring events are deltas: a producer that acknowledges more messages for a window it
already reported publishes another event with a new sequence number. The expected count
of a window is the sum of its distinct events; a duplicated event (same producer and
sequence, e.g. a retried send) counts once.
"""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import datetime, timezone
from functools import lru_cache
from itertools import chain
from typing import Iterable, Mapping, NamedTuple

from kafka_archive.errors import TerminalError
from kafka_archive.formats.audit_counts import window_start

ALARMS = ("MISSING", "EXCESS")
STATUSES = ("MISSING", "EXCESS", "PENDING", "UNAUDITED", "OK")  # the order reports list them in


class MonitoringEvent(NamedTuple):
    """One producer's count of messages sent to `topic` in [window_start_ms, + window_ms).
    (A named tuple: an audit may hold millions of them.)"""
    source: str
    topic: str
    window_start_ms: int
    window_ms: int
    count: int
    producer_id: str
    seq: int

    def to_json(self) -> bytes:
        return json.dumps(self._asdict(), sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes, where: str) -> MonitoringEvent:
        """Parse one event; `where` (topic, partition, offset) names it in the error."""
        try:
            raw = json.loads(data)
            event = cls(**{name: raw[name] for name in cls._fields})
        except (ValueError, TypeError, KeyError) as exc:
            raise BadMonitoringEvent(f"{where}: not a monitoring event ({exc!r}): {data[:200]!r}")
        types = {"source": str, "topic": str, "producer_id": str, "window_start_ms": int,
                 "window_ms": int, "count": int, "seq": int}
        wrong = [n for n, t in types.items()
                 if not isinstance(getattr(event, n), t) or isinstance(getattr(event, n), bool)]
        if wrong or event.window_ms <= 0 or event.count < 0 or event.window_start_ms % event.window_ms:
            raise BadMonitoringEvent(f"{where}: invalid monitoring event (check {', '.join(wrong) or 'window and count'}): "
                                     f"{data[:200]!r}")
        return event


class BadMonitoringEvent(TerminalError):
    pass


class Verdict(NamedTuple):
    topic: str
    source: str
    window_start_ms: int
    window_ms: int
    expected: int | None   # None: no producer counts (UNAUDITED)
    archived: int
    status: str            # OK | MISSING | EXCESS | PENDING | UNAUDITED

    @property
    def difference(self) -> int:
        """Archived minus expected: negative when missing, positive when in excess."""
        return self.archived - (self.expected or 0)

    def describe(self) -> str:
        amount = f" {abs(self.difference)}" if self.status in ALARMS else ""
        return (f"{self.status}{amount}: topic {self.topic}, source {self.source}, window "
                f"{format_window(self.window_start_ms, self.window_ms)}: expected "
                f"{self.expected if self.expected is not None else '-'}, archived {self.archived}")


@lru_cache(maxsize=65536)  # reports format the same few thousand windows again and again
def format_window(start_ms: int, window_ms: int) -> str:
    start = datetime.fromtimestamp(start_ms / 1000, timezone.utc)
    return f"{start:%Y-%m-%dT%H:%M:%SZ} +{window_ms // 1000}s"


def expected_counts(events: Iterable[MonitoringEvent]) -> dict[tuple[str, str, int], tuple[int, int]]:
    """(topic, source, window start) -> (window_ms, count), each (producer, seq) once."""
    unique = {(e.producer_id, e.seq): e for e in events}
    counts: dict[tuple[str, str, int], int] = defaultdict(int)
    widths: dict[tuple[str, str, int], int] = {}
    for source, topic, start, width, count, producer, seq in unique.values():
        key = (topic, source, start)
        counts[key] += count
        if widths.setdefault(key, width) != width:
            raise BadMonitoringEvent(
                f"topic {topic}, source {source}: window at {start} is reported both "
                f"{widths[key]} ms and {width} ms wide (producer {producer} seq {seq})")
    return {key: (widths[key], n) for key, n in counts.items()}


def reconcile(expected: Mapping[tuple[str, str, int], tuple[int, int]],
              archived: Mapping[tuple[str, str, int], int], archive_window_ms: int,
              archived_through: Mapping[str, int | None], grace_ms: int,
              since_ms: int | None = None, until_ms: int | None = None,
              unclosed: Iterable[tuple[str, str, int]] = ()) -> list[Verdict]:
    """Verdicts for every window of the topics in `archived_through` (topic -> time up to
    which every partition of it is archived, None when not at all).

    `archived` counts are per archive window (archive_window_ms); each producer window
    must be a whole number of them, and they are summed into it. A window is judged only
    once `window end + grace <= archived_through[topic]`; before that it is PENDING.
    `unclosed`: windows a producer opened and published no count for (Checkpoint's); there
    and in the window after (its last messages may carry the broker's later timestamp),
    more archived than counted is UNAUDITED: the uncounted messages are that producer's.
    """
    # archived counts rolled up into the producer windows of each (topic, source)
    widths: dict[tuple[str, str], int] = {}
    for (topic, source, start), (width, _) in expected.items():
        if width % archive_window_ms:
            raise TerminalError(f"topic {topic}, source {source}: producer window {width} ms is "
                                f"not a multiple of the archive's audit window {archive_window_ms} ms")
        widths[(topic, source)] = max(width, widths.get((topic, source), 0))
    rolled: Mapping[tuple[str, str, int], int] = archived
    if any(w != archive_window_ms for w in widths.values()):
        rolled = defaultdict(int)
        for (topic, source, start), count in archived.items():
            width = widths.get((topic, source), archive_window_ms)
            rolled[(topic, source, window_start(start, width))] += count

    uncertain = set()
    for topic, source, start in unclosed:
        width = (expected.get((topic, source, start)) or (archive_window_ms,))[0]
        uncertain |= {(topic, source, start), (topic, source, start + width)}

    buckets: dict[str, list[Verdict]] = {status: [] for status in STATUSES}
    for key in chain(expected, (k for k in rolled if k not in expected)):  # deterministic order
        topic, source, start = key
        if topic not in archived_through:
            continue
        if (since_ms is not None and start < since_ms) or (until_ms is not None and start >= until_ms):
            continue
        width, want = expected.get(key) or (widths.get((topic, source), archive_window_ms), None)
        got = rolled.get(key, 0)
        through = archived_through[topic]
        if (topic, source) not in widths:
            status = "UNAUDITED"
        elif through is None or start + width + grace_ms > through:
            status = "PENDING"
        else:
            want = want or 0
            status = ("OK" if got == want else "MISSING" if got < want
                      else "UNAUDITED" if key in uncertain else "EXCESS")
        buckets[status].append(Verdict(topic, source, start, width, want, got, status))
    # what needs a look first, in a stable order; the OK rows (nearly all of them, in a big
    # audit) keep the order of the producers' reports, which is deterministic and cheap
    for status in ("MISSING", "EXCESS", "PENDING", "UNAUDITED"):
        buckets[status].sort(key=lambda v: (v.topic, v.source, v.window_start_ms))
    return [v for status in STATUSES for v in buckets[status]]


def summarize(verdicts: Iterable[Verdict]) -> dict[str, int]:
    totals = {status: 0 for status in STATUSES}
    for v in verdicts:
        totals[v.status] += 1
    return totals
