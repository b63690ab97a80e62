"""An audit run's report as JSON, CSV and a self-contained HTML page. Pure functions.

The HTML page leads with the mismatches, then charts expected against archived messages
per window (summed over topics and sources), then lists the remaining verdicts up to
HTML_ROWS (the CSV and JSON hold every one).
"""

from __future__ import annotations

import csv
import html
import io
import json
from collections import defaultdict
from typing import Sequence

from kafka_archive.audit.reconcile import ALARMS, Verdict, format_window, summarize

HTML_ROWS = 2000
_COLUMNS = ("status", "difference", "topic", "source", "window_start_ms", "window_ms",
            "window", "expected", "archived")


def _values(v: Verdict) -> tuple:
    return (v.status, v.difference if v.expected is not None else None, v.topic, v.source,
            v.window_start_ms, v.window_ms, format_window(v.window_start_ms, v.window_ms),
            v.expected, v.archived)


def to_json(header: dict, verdicts: Sequence[Verdict]) -> bytes:
    """Columns once, then one row per verdict: reports may hold millions of rows (and
    without indent, json's C encoder does the work)."""
    return json.dumps({**header, "totals": summarize(verdicts), "columns": _COLUMNS,
                       "verdicts": list(map(_values, verdicts))}).encode()


def to_csv(verdicts: Sequence[Verdict]) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(_COLUMNS)
    writer.writerows(map(_values, verdicts))
    return out.getvalue().encode()


def mismatch_summary(group: str, verdicts: Sequence[Verdict], limit: int = 20) -> str:
    bad = [v for v in verdicts if v.status in ALARMS]
    lines = [f"audit of group {group}: {len(bad)} window(s) do not match"]
    lines += [f"  {v.describe()}" for v in bad[:limit]]
    if len(bad) > limit:
        lines.append(f"  ... and {len(bad) - limit} more (see the report)")
    return "\n".join(lines)


def to_html(header: dict, verdicts: Sequence[Verdict]) -> bytes:
    totals = summarize(verdicts)
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
tr.missing td, tr.excess td {{ background: #fdd; }} tr.pending td {{ color: #888; }}
</style></head><body>
<h1>Audit of group {e(str(header.get('group')))}</h1>
<p>{' · '.join(f'{k}: {n}' for k, n in totals.items())}</p>
<ul>{facts}</ul>
<h2>Expected vs archived per window</h2>
{_chart(verdicts)}
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


def _chart(verdicts: Sequence[Verdict], width: int = 900, height: int = 240) -> str:
    """An inline SVG: expected (line) and archived (bars) per window start."""
    expected, archived = defaultdict(int), defaultdict(int)
    for v in verdicts:
        expected[v.window_start_ms] += v.expected or 0
        archived[v.window_start_ms] += v.archived
    windows = sorted(expected.keys() | archived.keys())
    if not windows:
        return "<p>No windows.</p>"
    top = max(max(expected.values(), default=0), max(archived.values(), default=0), 1)
    step = width / len(windows)
    y = lambda n: height - n * (height - 10) / top  # noqa: E731
    bars = "".join(f"<rect x='{i * step:.1f}' y='{y(archived[w]):.1f}' width='{max(step - 1, 0.5):.1f}' "
                   f"height='{height - y(archived[w]):.1f}' fill='#7aa6d8'><title>"
                   f"{format_window(w, 0)}: archived {archived[w]}, expected {expected[w]}</title></rect>"
                   for i, w in enumerate(windows))
    line = " ".join(f"{(i + 0.5) * step:.1f},{y(expected[w]):.1f}" for i, w in enumerate(windows))
    return (f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
            f"role='img' aria-label='expected vs archived per window'>{bars}"
            f"<polyline points='{line}' fill='none' stroke='#c33' stroke-width='2'/></svg>"
            f"<p>bars: archived; red line: expected (max {top} per window)</p>")
