"""The HTML of a group's page in the Airflow UI (kafka_archive.airflow.ui serves it): lag
per topic-partition as a chart and a table, freshness against the SLA, the last runs with
their throughput, the audit's unresolved mismatches and the ranges lost to retention.

One self-contained page (inline CSS and SVG, nothing fetched from elsewhere), a pure
function of a GroupOverview. Cells the tests read carry `data-` attributes.
"""

from __future__ import annotations

from datetime import datetime, timezone
from html import escape

from kafka_archive.monitor.overview import GroupOverview
from kafka_archive.monitor.status import PartitionStatus, duration

PREFIX = "/kafka-archive"  # where the api-server mounts the pages


def page_path(dag_id: str) -> str:
    return f"{PREFIX}/dag/{dag_id}"


_STYLE = """
body{font-family:system-ui,sans-serif;margin:16px;color:#1a202c;font-size:14px}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:24px 0 8px}
table{border-collapse:collapse} td,th{padding:3px 10px;border-bottom:1px solid #e2e8f0;text-align:right}
th{background:#f7fafc} td.l,th.l{text-align:left}
.bad{color:#c53030;font-weight:600} .ok{color:#2f855a} .muted{color:#718096}
"""


def render(o: GroupOverview, dag_link: str) -> str:
    at = _time(o.at_ms)
    body = [f"<h1>kafka-archive group <span id='group'>{escape(o.group)}</span></h1>",
            f"<p class='muted'>as of {at} &middot; <a href='{escape(dag_link)}' "
            f"target='_top'>DAG</a> &middot; <a href='../'>all groups</a></p>",
            _problems(o), "<h2>Lag per topic-partition</h2>",
            lag_chart([p for p in o.partitions if not p.problem]), lag_table(o.partitions),
            "<h2>Freshness against SLA</h2>", _freshness(o), "<h2>Last runs</h2>", _runs(o),
            "<h2>Audit</h2>", _audit(o)]
    if o.accepted_losses:
        body += ["<h2>Accepted losses (retention deleted them before archiving)</h2>", _lost(o)]
    return _document(f"kafka-archive {o.group}", "\n".join(body))


def index(groups: list[str], dag_ids: dict[str, str]) -> str:
    items = "".join(f"<li><a href='dag/{escape(dag_ids[g])}'>{escape(g)}</a></li>" for g in groups)
    return _document("kafka-archive", f"<h1>kafka-archive groups</h1><ul>{items}</ul>")


def not_a_group(dag_id: str, groups: list[str]) -> str:
    return _document("kafka-archive", f"<p>{escape(dag_id)} archives no group. Groups: " + ", ".join(
        f"<a href='kafka_archive_{escape(g)}'>{escape(g)}</a>" for g in groups) + "</p>")


def failure(group: str, problem: str) -> str:
    return _document("kafka-archive", f"<h1>kafka-archive group {escape(group)}</h1>"
                                      f"<p class='bad'>cannot show the group: {escape(problem)}</p>")


def _problems(o: GroupOverview) -> str:
    """Topics that cannot be shown whole, first: the rest of the page shows the others."""
    found = [p for p in o.partitions if p.problem]
    if not found:
        return ""
    items = "".join(f"<li data-topic='{escape(p.topic)}'><b>{escape(p.topic)}</b>: "
                    f"{escape(p.problem)}</li>" for p in found)
    return f"<h2 class='bad'>Topics with a problem</h2><ul id='problems' class='bad'>{items}</ul>"


def lag_chart(partitions: list[PartitionStatus], width: int = 640) -> str:
    """Horizontal bars: messages not archived yet, per topic-partition."""
    if not partitions:
        return "<p class='muted'>no topic selected yet</p>"
    bar, label_w = 18, 240
    top = max((p.lag_messages or 0) for p in partitions) or 1
    rows = []
    for i, p in enumerate(partitions):
        lag = p.lag_messages or 0
        length = (width - label_w - 80) * lag / top
        y = i * bar
        rows.append(f"<text x='{label_w - 6}' y='{y + 13}' text-anchor='end'>"
                    f"{escape(p.topic)} [{p.partition}]</text>"
                    f"<rect x='{label_w}' y='{y + 3}' width='{length:.1f}' height='{bar - 6}' "
                    f"fill='{'#c53030' if lag else '#2f855a'}'/>"
                    f"<text x='{label_w + length + 4:.1f}' y='{y + 13}'>{_num(p.lag_messages)}</text>")
    height = bar * len(partitions)
    return (f"<svg id='lag-chart' role='img' aria-label='lag in messages per partition' "
            f"width='{width}' height='{height}' font-size='12' xmlns='http://www.w3.org/2000/svg'>"
            + "".join(rows) + "</svg>")


def lag_table(partitions: list[PartitionStatus]) -> str:
    head = ("topic", "partition", "token", "Kafka end", "lag (messages)", "lag (time)",
            "archived records", "files", "last commit")
    rows = [f"<tr data-topic='{escape(p.topic)}' data-partition='{p.partition}'"
            f"{' class=bad' if p.problem else ''}>"
            f"<td class='l'>{escape(p.topic)}</td><td>{'!' if p.problem else p.partition}</td>"
            f"<td>{_num(p.token)}</td>"
            f"<td>{_num(p.end)}</td><td class='lag{' bad' if p.lag_messages else ''}' "
            f"data-lag='{'' if p.lag_messages is None else p.lag_messages}'>{_num(p.lag_messages)}</td>"
            f"<td>{duration(p.lag_ms)}</td><td>{_num(p.archived_records)}</td>"
            f"<td>{_num(p.archived_files)}</td><td class='l'>{escape(p.committed_at or '-')}</td></tr>"
            for p in partitions]
    return _table(head, rows, "lag-table")


def _freshness(o: GroupOverview) -> str:
    rows = [f"<tr data-topic='{escape(t.topic)}'><td class='l'>{escape(t.topic)}</td>"
            f"<td>{'?' if t.lag_s is None else duration(int(t.lag_s * 1000))}</td>"
            f"<td>{duration(t.sla_s * 1000)}</td>"
            f"<td class='l {'bad' if t.past_sla or t.problem else 'ok'}'>"
            f"{escape(t.problem) if t.problem else 'PAST SLA' if t.past_sla else 'ok'}</td></tr>"
            for t in o.freshness]
    return _table(("topic", "lag", "SLA", ""), rows, "freshness") if rows else \
        "<p class='muted'>no topic archived yet</p>"


def _runs(o: GroupOverview) -> str:
    rows = [f"<tr data-run='{escape(r.run_id)}'><td class='l'>{escape(r.run_id)}</td>"
            f"<td class='l'>{escape(r.committed_at)}</td><td>{r.records}</td>"
            f"<td>{_bytes(r.bytes)}</td><td>{r.files}</td>"
            f"<td>{'?' if r.seconds is None else f'{r.seconds:.0f} s'}</td>"
            f"<td class='mbps'>{'?' if r.mb_per_s is None else f'{r.mb_per_s:.3g}'}</td></tr>"
            for r in o.runs]
    return _table(("run", "committed", "records", "bytes", "files", "plan to commit", "MB/s"),
                  rows, "runs") if rows else "<p class='muted'>no committed run yet</p>"


def _audit(o: GroupOverview) -> str:
    if not o.audited:
        return "<p class='muted'>this group is not audited (config: audit.groups)</p>"
    if not o.alarms:
        return "<p class='ok' id='audit-ok'>no unresolved mismatch</p>"
    rows = []
    for a in o.alarms:
        ack = a.ack or {}
        rows.append(f"<tr class='alarm'><td class='l {'muted' if ack else 'bad'}'>{a.state}</td>"
                    f"<td class='l'>{a.status} {a.amount}</td><td class='l'>{escape(a.topic)}</td>"
                    f"<td class='l'>{escape(a.source)}</td><td class='l'>{_time(a.window_start_ms)} "
                    f"+{a.window_ms // 1000}s</td><td>{a.expected}</td><td>{a.archived}</td>"
                    f"<td class='l'>{escape(a.found_at)}</td>"
                    f"<td class='l'>{escape(' '.join(str(ack.get(k, '')) for k in ('by', 'at', 'reason')))}</td></tr>")
    head = ("state", "mismatch", "topic", "source", "window", "expected", "archived", "found",
            "acknowledged (by, at, why)")
    return _table(head, rows, "alarms")


def _lost(o: GroupOverview) -> str:
    rows = [f"<tr><td class='l'>{escape(a.topic)}</td><td>{a.partition}</td>"
            f"<td>[{a.lost_from}, {a.lost_to})</td><td>{a.lost_to - a.lost_from}</td>"
            f"<td class='l'>{escape(a.by)}</td><td class='l'>{escape(a.at)}</td>"
            f"<td class='l'>{escape(a.reason)}</td></tr>" for a in o.accepted_losses]
    return _table(("topic", "partition", "offsets", "messages", "accepted by", "at", "why"),
                  rows, "lost")


def _table(head, rows: list[str], table_id: str) -> str:
    cells = "".join(f"<th class='{'l' if i == 0 else ''}'>{escape(h)}</th>" for i, h in enumerate(head))
    return f"<table id='{table_id}'><tr>{cells}</tr>{''.join(rows)}</table>"


def _document(title: str, body: str) -> str:
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(title)}</title>"
            f"<style>{_STYLE}</style></head><body>{body}</body></html>")


def _time(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _num(value: int | None) -> str:
    return "-" if value is None else str(value)


def _bytes(n: int) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)
