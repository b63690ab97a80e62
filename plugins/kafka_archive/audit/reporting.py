"""An audit run's report as JSON, CSV and a self-contained HTML page. Pure functions.

The HTML page leads with the unresolved mismatches (new, open, acknowledged: who, when,
why), then charts expected against archived messages per window (summed over topics and
sources; archived messages of unaudited sources are drawn apart, not added to the bars;
windows with a mismatch are marked), then lists the verdicts up to HTML_ROWS (the CSV
and JSON hold every one). An incremental audit lists the windows it judged; the totals
count every window.
"""

from __future__ import annotations

import csv
import html
import io
import json
from collections import defaultdict
from dataclasses import asdict
from typing import Sequence

from kafka_archive.audit.checkpoint import Alarm
from kafka_archive.audit.reconcile import ALARMS, Verdict, format_window, summarize

HTML_ROWS = 2000
CHART_WINDOWS = 240  # the latest windows; older ones are in the CSV
_COLUMNS = ("status", "difference", "topic", "source", "window_start_ms", "window_ms",
            "window", "expected", "archived")


def _values(v: Verdict) -> tuple:
    return (v.status, v.difference if v.expected is not None else None, v.topic, v.source,
            v.window_start_ms, v.window_ms, format_window(v.window_start_ms, v.window_ms),
            v.expected, v.archived)


def to_json(header: dict, verdicts: Sequence[Verdict], alarms: Sequence[Alarm] = (),
            totals: dict | None = None) -> bytes:
    """Columns once, then one row per verdict: reports may hold millions of rows (and
    without indent, json's C encoder does the work)."""
    return json.dumps({**header, "totals": totals or summarize(verdicts),
                       "alarms": [{**asdict(a), "state": a.state} for a in alarms],
                       "columns": _COLUMNS, "verdicts": list(map(_values, verdicts))}).encode()


def to_csv(verdicts: Sequence[Verdict]) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(_COLUMNS)
    writer.writerows(map(_values, verdicts))
    return out.getvalue().encode()


def mismatch_summary(group: str, alarms: Sequence[Alarm], limit: int = 20) -> str:
    lines = [f"audit of group {group}: {len(alarms)} window(s) do not match"]
    lines += [f"  {describe(a)}" for a in alarms[:limit]]
    if len(alarms) > limit:
        lines.append(f"  ... and {len(alarms) - limit} more (see the report)")
    return "\n".join(lines)


def describe(a: Alarm) -> str:
    """`MISSING 1: topic t, source s, window ...: expected 5, archived 4 [state]`"""
    state = (f"acknowledged by {a.ack['by']} at {a.ack['at']}: {a.ack['reason']}" if a.ack
             else f"open since {a.found_at}, mailed {a.mailed_at}" if a.mailed_at
             else f"new, found {a.found_at}")
    verdict = Verdict(a.topic, a.source, a.window_start_ms, a.window_ms, a.expected,
                      a.archived, a.status)
    return f"{verdict.describe()} [{state}]"


def to_html(header: dict, verdicts: Sequence[Verdict], alarms: Sequence[Alarm] = (),
            totals: dict | None = None, chart: Sequence[Verdict] | None = None) -> bytes:
    """`chart`: the verdicts to chart (default: `verdicts`)."""
    totals = totals or summarize(verdicts)
    e = html.escape
    rows = "\n".join(
        f"<tr class='{v.status.lower()}'><td>{v.status}</td><td>{_signed(v)}</td><td>{e(v.topic)}</td>"
        f"<td>{e(v.source)}</td><td>{format_window(v.window_start_ms, v.window_ms)}</td>"
        f"<td>{'' if v.expected is None else v.expected}</td><td>{v.archived}</td></tr>"
        for v in verdicts[:HTML_ROWS])
    more = (f"<p>{len(verdicts) - HTML_ROWS} more verdicts in report.csv.</p>"
            if len(verdicts) > HTML_ROWS else "")
    facts = "".join(f"<li>{e(str(k))}: {e(str(v))}</li>" for k, v in header.items())
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>kafka-archive audit: {e(str(header.get('group')))}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; }} table {{ border-collapse: collapse; }}
td, th {{ border: 1px solid #ccc; padding: 2px 8px; text-align: right; }}
tr.missing td, tr.excess td, tr.new td, tr.open td {{ background: #fdd; }}
tr.pending td {{ color: #888; }} tr.acknowledged td {{ background: #eee; }}
</style></head><body>
<h1>Audit of group {e(str(header.get('group')))}</h1>
<p>{' · '.join(f'{k}: {n}' for k, n in totals.items())}</p>
<ul>{facts}</ul>
<h2>Mismatches not resolved ({len(alarms)})</h2>
{_alarms(alarms)}
<h2>Expected vs archived per window</h2>
{_chart(verdicts if chart is None else chart)}
<h2>Verdicts (mismatches first)</h2>
<table><tr><th>status</th><th>difference</th><th>topic</th><th>source</th><th>window (UTC)</th>
<th>expected</th><th>archived</th></tr>
{rows}
</table>{more}
</body></html>
"""
    return page.encode()


def _signed(v: Verdict) -> str:
    return f"{v.difference:+d}" if v.status in ALARMS else ""


def _alarms(alarms: Sequence[Alarm]) -> str:
    if not alarms:
        return "<p>None.</p>"
    e = html.escape
    rows = "".join(
        f"<tr class='{a.state}'><td>{a.state}</td><td>{a.status} {a.amount}</td><td>{e(a.topic)}</td>"
        f"<td>{e(a.source)}</td><td>{format_window(a.window_start_ms, a.window_ms)}</td>"
        f"<td>{a.expected}</td><td>{a.archived}</td><td>{e(a.found_at)}</td>"
        f"<td>{e(a.mailed_at or '')}</td><td>{e(_ack(a))}</td></tr>" for a in alarms)
    return ("<table><tr><th>state</th><th>finding</th><th>topic</th><th>source</th>"
            "<th>window (UTC)</th><th>expected</th><th>archived</th><th>found</th>"
            f"<th>mailed</th><th>acknowledged</th></tr>{rows}</table>")


def _ack(a: Alarm) -> str:
    return f"by {a.ack['by']} at {a.ack['at']}: {a.ack['reason']}" if a.ack else ""


def _chart(verdicts: Sequence[Verdict], width: int = 900, height: int = 240) -> str:
    """An inline SVG per window start of the latest CHART_WINDOWS: expected (red line),
    archived messages of audited sources (blue bars), archived messages of unaudited
    sources (thin grey bars beside, not stacked), a mismatch (red mark above)."""
    expected, archived, unaudited = defaultdict(int), defaultdict(int), defaultdict(int)
    bad = set()
    for v in verdicts:
        if v.status == "UNAUDITED":
            unaudited[v.window_start_ms] += v.archived
            continue
        expected[v.window_start_ms] += v.expected or 0
        archived[v.window_start_ms] += v.archived
        if v.status in ALARMS:
            bad.add(v.window_start_ms)
    windows = sorted(expected.keys() | archived.keys() | unaudited.keys())[-CHART_WINDOWS:]
    if not windows:
        return "<p>No windows.</p>"
    top = max(max(map(expected.get, windows, [0] * len(windows))),
              max(map(archived.get, windows, [0] * len(windows))),
              max(map(unaudited.get, windows, [0] * len(windows))), 1)
    step = width / len(windows)
    y = lambda n: height - n * (height - 14) / top  # noqa: E731
    parts = []
    for i, w in enumerate(windows):
        x, bar = i * step, max(step * 0.7 - 1, 0.5)
        tip = (f"{format_window(w, 0)}: expected {expected[w]}, archived {archived[w]}, "
               f"unaudited {unaudited[w]}{', MISMATCH' if w in bad else ''}")
        parts.append(f"<rect x='{x:.1f}' y='{y(archived[w]):.1f}' width='{bar:.1f}' "
                     f"height='{height - y(archived[w]):.1f}' fill='#7aa6d8'><title>{tip}</title></rect>")
        if unaudited[w]:
            parts.append(f"<rect x='{x + bar:.1f}' y='{y(unaudited[w]):.1f}' "
                         f"width='{max(step * 0.3 - 1, 0.5):.1f}' height='{height - y(unaudited[w]):.1f}' "
                         f"fill='#bbb'><title>{tip}</title></rect>")
        if w in bad:
            parts.append(f"<circle class='mismatch' cx='{x + step / 2:.1f}' cy='6' r='4' "
                         f"fill='#c00'><title>{tip}</title></circle>")
    line = " ".join(f"{(i + 0.5) * step:.1f},{y(expected[w]):.1f}" for i, w in enumerate(windows))
    return (f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
            f"role='img' aria-label='expected vs archived per window'>{''.join(parts)}"
            f"<polyline points='{line}' fill='none' stroke='#c33' stroke-width='2'/></svg>"
            f"<p>blue bars: archived (audited sources); grey bars: archived from unaudited "
            f"sources (not counted against expected); red line: expected; red dot: a "
            f"MISSING or EXCESS window. Max {top} per window; the latest {len(windows)} windows.</p>")
