"""Trends: a small history of a group's runs, and the page's charts over it.

The freshness task, after each commit, writes the run's line: its records, bytes, files,
plan-to-commit time, and per topic its records and bytes and the lag it left (messages,
and seconds as the SLA measures them). Lines go into one JSON-lines object per UTC day,
`_history/<group>/<day>.jsonl`; a run written again (a retried task) replaces its line,
and days older than HISTORY_DAYS are deleted as a line is written: the history is at
most eight small objects (~150 bytes a run and ~100 a topic). The page reads it to chart
the last 24 hours and 7 days as SVG drawn here (no script, no CDN: it works offline),
each point carrying its run and value (`data-run`, `data-value`) for the browser test.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from html import escape
from typing import Iterable

from kafka_archive import layout
from kafka_archive.monitor.freshness import (PartitionFreshness, plan_to_commit_s, topic_lags,
                                           topic_pending)
from kafka_archive.storage import Storage

HISTORY_DAYS = 7
WINDOWS = (("24 hours", 24 * 3600), ("7 days", HISTORY_DAYS * 24 * 3600))
TOPICS_CHARTED = 8  # per chart: the topics with the most recent lag; the rest are counted
_COLOURS = ("#36c", "#c33", "#393", "#f90", "#909", "#0aa", "#963", "#666")


def run_line(summary: dict, planned_at: str, partitions: Iterable[PartitionFreshness],
             now_ms: int) -> dict:
    """The history's line of a committed run (summary: the commit's; partitions: the
    freshness task's view of the topics it measured)."""
    partitions = list(partitions)
    waiting, lags = topic_pending(partitions), topic_lags(partitions, now_ms)
    by_topic = summary.get("by_topic", {})
    return {"run_id": summary["run_id"], "planned_at": planned_at,
            "committed_at": summary["committed_at"], "records": summary["records"],
            "bytes": sum(t.get("bytes", 0) for t in by_topic.values()),
            "files": summary["files"],
            "duration_s": plan_to_commit_s(planned_at, summary["committed_at"]) or 0.0,
            "topics": {t: {"records": by_topic.get(t, {}).get("records", 0),
                           "bytes": by_topic.get(t, {}).get("bytes", 0),
                           "lag_messages": waiting.get(t), "lag_s": lags.get(t)}
                       for t in sorted(set(by_topic) | set(waiting))}}


def record(storage: Storage, root: str, group: str, line: dict, now: datetime) -> None:
    """Add the run's line to its day's file (replacing a line of the same run), then
    delete the days past the history's length."""
    url = layout.history_file(root, group, line["committed_at"][:10])
    kept = [old for old in _lines(storage.get_or_none(url)) if old["run_id"] != line["run_id"]]
    storage.put_bytes(url, "".join(json.dumps(x, sort_keys=True) + "\n"
                                   for x in [*kept, line]).encode())
    for old in _day_files(storage, root, group):
        if old[0] < _first_day(now):
            storage.delete(old[1])


def read(storage: Storage, root: str, group: str, now: datetime) -> list[dict]:
    """The lines of the history's days, oldest first."""
    found = [line for day, url in _day_files(storage, root, group) if day >= _first_day(now)
             for line in _lines(storage.get_or_none(url))]
    return sorted(found, key=lambda line: line["committed_at"])


def _first_day(now: datetime) -> str:
    return (now - timedelta(days=HISTORY_DAYS)).strftime("%Y-%m-%d")


def _day_files(storage: Storage, root: str, group: str) -> list[tuple[str, str]]:
    return sorted((url.rsplit("/", 1)[1].removesuffix(".jsonl"), url)
                  for url, _ in storage.list(layout.history_dir(root, group) + "/")
                  if url.endswith(".jsonl"))


def _lines(data: bytes | None) -> list[dict]:
    """A day's lines; a line that does not parse (a write cut short) is skipped."""
    found = []
    for text in (data or b"").decode(errors="replace").splitlines():
        try:
            found.append(json.loads(text))
        except ValueError:
            continue
    return found


# --- the charts ---------------------------------------------------------------------

def _ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso).timestamp() * 1000)


def series(lines: list[dict], since_ms: int) -> dict[str, dict[str, list[tuple[str, int, float]]]]:
    """Per chart, per line on it ("" for the group's own), its points (run, ms, value):
    runs committed since since_ms. Throughput is records per second of plan-to-commit."""
    charts: dict[str, dict[str, list]] = {name: {} for name in CHARTS}
    for line in lines:
        at = _ms(line["committed_at"])
        if at < since_ms:
            continue
        run = line["run_id"]
        group_values = {"records": line["records"], "bytes": line["bytes"],
                        "duration_s": line["duration_s"],
                        "throughput": line["records"] / line["duration_s"]
                        if line["duration_s"] > 0 else None}
        for name, value in group_values.items():
            if value is not None:
                charts[name].setdefault("", []).append((run, at, value))
        for topic, figures in line.get("topics", {}).items():
            for name, key in (("topic_records", "records"), ("lag_messages", "lag_messages"),
                              ("lag_s", "lag_s")):
                if figures.get(key) is not None:
                    charts[name].setdefault(topic, []).append((run, at, figures[key]))
    return charts


CHARTS = {"records": "records per run", "bytes": "bytes per run",
          "duration_s": "plan to commit, seconds", "throughput": "records per second",
          "topic_records": "records per run, per topic",
          "lag_messages": "lag after the run, messages, per topic",
          "lag_s": "lag after the run, seconds, per topic"}


def charts_html(lines: list[dict], now_ms: int) -> str:
    """The trends section: for each window, a chart of each figure."""
    if not lines:
        return ("<p class='muted'>No history yet: each run's figures are recorded after its "
                "commit (by the freshness task), and charted here.</p>")
    parts = []
    for label, seconds in WINDOWS:
        since = now_ms - seconds * 1000
        drawn = series(lines, since)
        charts = "".join(chart(name, CHARTS[name], drawn[name], since, now_ms)
                         for name in CHARTS if drawn[name])
        parts.append(f"<div class='window' data-window='{seconds}'><h3>Last {label}</h3>"
                     f"{charts or '<p class=muted>no run in this window</p>'}</div>")
    return "".join(parts)


def chart(name: str, title: str, lines: dict[str, list[tuple[str, int, float]]],
          since_ms: int, now_ms: int, width: int = 440, height: int = 150) -> str:
    """A time chart: x from since_ms to now_ms, y from 0 to the largest value; a line and
    its points per series, the series with the largest last value first."""
    ranked = sorted(lines.items(), key=lambda kv: (-kv[1][-1][2], kv[0]))
    shown, hidden = ranked[:TOPICS_CHARTED], len(ranked) - TOPICS_CHARTED
    top = max((v for _, points in shown for _, _, v in points), default=0) or 1
    left, bottom, span = 56, height - 18, max(1, now_ms - since_ms)

    def xy(at: int, value: float) -> tuple[float, float]:
        return (left + (width - left - 8) * (at - since_ms) / span,
                bottom - (bottom - 8) * value / top)

    body = [f"<line x1='{left}' y1='{bottom}' x2='{width - 8}' y2='{bottom}' stroke='#999'/>",
            f"<text x='{left - 4}' y='12' text-anchor='end'>{_short(top)}</text>",
            f"<text x='{left - 4}' y='{bottom}' text-anchor='end'>0</text>",
            f"<text x='{left}' y='{height - 4}'>{_clock(since_ms)}</text>",
            f"<text x='{width - 8}' y='{height - 4}' text-anchor='end'>{_clock(now_ms)}</text>"]
    legend = []
    for i, (topic, points) in enumerate(shown):
        colour = _COLOURS[i % len(_COLOURS)]
        coords = [xy(at, v) for _, at, v in points]
        body.append(f"<polyline fill='none' stroke='{colour}' points='"
                    + " ".join(f"{x:.1f},{y:.1f}" for x, y in coords) + "'/>")
        for (run, _, value), (x, y) in zip(points, coords):
            body.append(f"<circle cx='{x:.1f}' cy='{y:.1f}' r='2.5' fill='{colour}' "
                        f"data-run='{escape(run)}' data-topic='{escape(topic)}' "
                        f"data-value='{value:g}'><title>{escape(run)}"
                        f"{' ' + escape(topic) if topic else ''}: {value:g}</title></circle>")
        if topic:
            legend.append(f"<span style='color:{colour}'>{escape(topic)}</span>")
    if hidden > 0:
        legend.append(f"<span class='muted'>and {hidden} more</span>")
    return (f"<figure class='trend' data-chart='{name}'><figcaption>{escape(title)}"
            f"{' · ' + ' '.join(legend) if legend else ''}</figcaption>"
            f"<svg role='img' aria-label='{escape(title)}' width='{width}' height='{height}' "
            f"font-size='10' xmlns='http://www.w3.org/2000/svg'>{''.join(body)}</svg></figure>")


def _short(value: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= size:
            return f"{value / size:.3g}{unit}"
    return f"{value:.3g}"


def _clock(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%m-%d %H:%M")
