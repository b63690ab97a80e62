"""The HTML of a group's page in the Airflow UI (kafka_archive.airflow.ui serves it). First
what needs a person (topics with a problem, open audit mismatches, SLA breaches, holes, a
run that has not committed), then lag per topic, worst first, each opening onto its
partitions (a 10,000-partition group stays one screen), freshness against the SLA, the last
runs with their throughput, the audit and the ranges lost to retention. It reloads itself
every minute. Colours mean something: green until a threshold is crossed.

One self-contained page (inline CSS and SVG, nothing fetched from elsewhere), a pure
function of a GroupOverview. Cells the tests read carry `data-` attributes.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from datetime import datetime, timezone
from html import escape
from urllib.parse import quote

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # kafka-python and the audit, not where a DAG file links to a page
    from kafka_archive.monitor.overview import Glance, GroupOverview, PartitionFiles
    from kafka_archive.monitor.status import PartitionStatus
    from kafka_archive.plan.inflight import InFlight

PREFIX = "/kafka-archive"  # where the api-server mounts the pages


def page_path(dag_id: str) -> str:
    return f"{PREFIX}/dag/{dag_id}"


def duration(ms: int | None) -> str:
    """monitor.status's, imported when a page is rendered."""
    from kafka_archive.monitor.status import duration as of_status

    return of_status(ms)


_STYLE = """
body{font-family:system-ui,sans-serif;margin:16px;color:#1a202c;font-size:14px}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:24px 0 8px}
table{border-collapse:collapse} td,th{padding:3px 10px;border-bottom:1px solid #e2e8f0;text-align:right}
th{background:#f7fafc} td.l,th.l{text-align:left}
.bad{color:#c53030;font-weight:600} .ok{color:#2f855a} .muted{color:#718096}
.warn{color:#b7791f;font-weight:600} details>summary{cursor:pointer}
#attention{border-left:4px solid #c53030;padding:4px 12px;background:#fff5f5}
#attention.calm{border-color:#2f855a;background:#f0fff4}
figure.trend{display:inline-block;margin:0 16px 12px 0} figcaption{font-size:12px}
h3{font-size:14px;margin:12px 0 4px}
"""
REFRESH_S = 60
_COLOURS = {"ok": "#2f855a", "warn": "#b7791f", "bad": "#c53030"}
CHART_PARTITIONS = 60  # more partitions than this: the chart shows topics


def render(o: GroupOverview, dag_link: str) -> str:
    from kafka_archive.monitor import trends  # storage's imports: not where a DAG links here

    at = _time(o.at_ms)
    shown = [p for p in o.partitions if not p.problem]
    sla = {t.topic: t.sla_s for t in o.freshness}
    chart = (lag_chart(shown, sla_s=sla) if len(shown) <= CHART_PARTITIONS
             else topic_chart(topic_lags(o)[:CHART_PARTITIONS]))
    body = [f"<h1>kafka-archive group <span id='group'>{escape(o.group)}</span></h1>",
            f"<p class='muted'>as of {at} (reloads every {REFRESH_S} s) &middot; "
            f"<a href='{escape(dag_link)}' target='_top'>DAG</a> &middot; "
            "<a href='../'>all groups</a></p>",
            attention(o, dag_link), "<h2>Lag per topic, worst first</h2>",
            "<p class='muted'>Two measures of time lag, both 0 when the archive has caught "
            "up. <b>Behind</b>, by offsets: the time since the archive last held everything "
            "Kafka had (a run that reached Kafka's end and committed); no producer's record "
            "timestamp can skew it, and freshness below checks it against each topic's SLA "
            "(red past the SLA, amber past half of it). <b>Lag (time)</b>, by record time: "
            "the age of the oldest message not archived yet, from the timestamp its producer "
            "set; shown beside it. Without a run that caught up yet, freshness uses record "
            "time.</p>", chart, topic_table(o),
            lag_table(o.partitions, o, files_href=dag_link.rsplit("/", 1)[-1] + "/files"),
            "<h2>Freshness against SLA</h2>", _freshness(o),
            "<h2>Last runs</h2>", _runs(o, dag_link),
            "<h2>Trends</h2><div id='trends'>", trends.charts_html(list(o.history), o.at_ms),
            "</div>", "<h2>Audit</h2>", _audit(o)]
    if o.accepted_losses:
        body += ["<h2>Accepted losses (retention deleted them before archiving)</h2>", _lost(o)]
    return _document(f"kafka-archive {o.group}", "\n".join(body), refresh_s=REFRESH_S)


def attention(o: GroupOverview, dag_link: str) -> str:
    """What needs a person, first: each item one line; or that nothing does."""
    items = [f"topic {escape(topic)}: {escape(problem)}"
             for topic, problem in sorted({(p.topic, p.problem) for p in o.partitions if p.problem})]
    items += [f"audit: {a.status} {a.amount} in {escape(a.topic)} from {escape(a.source)}, "
              f"window {_time(a.window_start_ms)} ({a.state})"
              for a in o.alarms if a.state != "acknowledged"]
    items += [f"{escape(t.topic)} is past its SLA: lag {_duration_s(t.lag_s)} &gt; "
              f"{_duration_s(t.sla_s)}" for t in o.freshness if t.past_sla]
    items += [f"hole in {escape(p.topic)} partition {p.partition}: offsets "
              + ", ".join(f"[{a}, {b})" for a, b in p.holes) + " are in no file"
              for p in o.partitions if p.holes]
    running = None
    if o.in_flight:
        stuck, line = in_flight(o, dag_link)
        if stuck:
            items.append(line)
        else:
            running = f"<p id='in-flight' class='muted'>{line}</p>"
    if not items:
        return ("<div id='attention' class='calm'><p class='ok'>nothing needs a person</p>"
                f"{running or ''}</div>")
    lines = "".join(f"<li>{item}</li>" for item in items)
    return (f"<div id='attention'><h2 class='bad'>Needs a person ({len(items)})</h2>"
            f"<ul>{lines}</ul>{running or ''}</div>")


def in_flight_kind(run: InFlight, state: str | None, at_ms: int,
                   deadline_s: int | None) -> str:
    """What a run planned and not committed is, as Airflow sees it: "running" (or
    "queued") within the group's deadline, the one kind that needs no person; "late"
    (running past it), "failed", "success" (ended without a commit) or "unknown"
    (Airflow has no such run, or was not asked). Pure."""
    age = run.age_ms(at_ms)
    late = age is not None and deadline_s is not None and age // 1000 > deadline_s
    if state in ("running", "queued"):
        return "late" if late else state
    return state if state in ("failed", "success") else "unknown"


def in_flight(o: GroupOverview, dag_link: str) -> tuple[bool, str]:
    """The run planned and not committed: whether it needs a person, and its line
    (in_flight_kind)."""
    run = o.in_flight
    age = run.age_ms(o.at_ms)
    planned = f"planned {'?' if age is None else _duration_s(age // 1000)} ago"
    held = escape(", ".join(run.topics))
    link = (f"<a class='run' href='{escape(run_link(dag_link, run.run_id))}' target='_top'>"
            f"run {escape(run.run_id)}</a>")
    state = o.in_flight_state
    kind = in_flight_kind(run, state, o.at_ms, o.deadline_s)
    if kind in ("running", "queued"):
        return False, f"{link} is {state} in Airflow, {planned} ({held})"
    if kind == "late":
        return True, (f"{link} is still {state} in Airflow, {planned}: past the group's "
                      f"deadline of {_duration_s(o.deadline_s)} ({held}); look at its "
                      "task logs")
    if state == "failed":
        why = "its failed task's log says why"
        if o.in_flight_failed_task is not None:
            task, attempt = o.in_flight_failed_task
            why = (f"<a class='log' href='{escape(task_log_link(dag_link, run.run_id, task, attempt))}' "
                   f"target='_top'>the log of its failed task {escape(task)}</a> says why")
        return True, (f"{link} failed in Airflow, {planned}, before its commit ({held}): "
                      f"{why}; the group's next run finishes its plan")
    if state == "success":
        return True, (f"{link} is marked success in Airflow but never committed, {planned} "
                      f"({held}): the group's next run finishes its plan")
    return True, (f"{link} was {planned} and has not committed ({held}); Airflow does not "
                  "know its state here: it failed, or is still running; the group's next "
                  "run finishes it")


def run_link(dag_link: str, run_id: str) -> str:
    """The run's page in the Airflow UI (its tasks, and each task's log); dag_link: the
    DAG's (`/dags/<dag id>`, after the UI's base URL in a mail)."""
    return f"{dag_link}/runs/{quote(run_id, safe='')}"


def task_log_link(dag_link: str, run_id: str, task_id: str, try_number: int) -> str:
    """A task's page in the Airflow UI, which opens on its log (of that try, when it ran)."""
    tried = f"?try_number={try_number}" if try_number > 0 else ""
    return f"{run_link(dag_link, run_id)}/tasks/{quote(task_id, safe='')}{tried}"


@dataclass(frozen=True)
class TopicLag:
    topic: str
    partitions: int
    lag_messages: int
    lag_ms: int | None      # the worst partition's
    records: int | None
    files: int | None
    sla_s: int | None


def topic_lags(o: GroupOverview) -> list[TopicLag]:
    """Per topic its partitions summed (time lag: the worst), worst first. Pure."""
    sla = {t.topic: t.sla_s for t in o.freshness}
    by_topic: dict[str, list[PartitionStatus]] = {}
    for p in o.partitions:
        if not p.problem:
            by_topic.setdefault(p.topic, []).append(p)
    found = []
    for topic, parts in by_topic.items():
        # behind (by offsets) where known, record time where not
        times = [lag for p in parts
                 if (lag := p.lag_ms if p.behind_ms is None else p.behind_ms) is not None]
        found.append(TopicLag(
            topic, len(parts), sum(p.lag_messages or 0 for p in parts),
            max(times) if times else None,
            None if any(p.archived_records is None for p in parts) else
            sum(p.archived_records for p in parts),
            None if any(p.archived_files is None for p in parts) else
            sum(p.archived_files for p in parts), sla.get(topic)))
    return sorted(found, key=lambda t: (-(t.lag_ms or 0), -t.lag_messages, t.topic))


def _lag_class(lag_ms: int | None, sla_s: int | None) -> str:
    """Green until a threshold: red past the SLA, amber past half of it."""
    if not lag_ms or not sla_s:
        return "ok"
    return "bad" if lag_ms > sla_s * 1000 else "warn" if lag_ms > sla_s * 500 else "ok"


def topic_table(o: GroupOverview) -> str:
    rows = [f"<tr data-topic='{escape(t.topic)}'><td class='l'>{escape(t.topic)}</td>"
            f"<td>{t.partitions}</td><td class='{_lag_class(t.lag_ms, t.sla_s)}' "
            f"data-lag='{t.lag_messages}'>{t.lag_messages}</td>"
            f"<td class='{_lag_class(t.lag_ms, t.sla_s)}'>{duration(t.lag_ms)}</td>"
            f"<td>{_num(t.records)}</td><td>{_num(t.files)}</td></tr>" for t in topic_lags(o)]
    return _table(("topic", "partitions", "lag (messages)", "lag (time)", "archived records",
                   "files"), rows, "topic-table") if rows else ""


def topic_chart(lags: list[TopicLag], width: int = 640) -> str:
    """Horizontal bars: messages not archived yet, per topic (the worst first)."""
    bar, label_w = 18, 240
    top = max((t.lag_messages for t in lags), default=0) or 1
    rows = []
    for i, t in enumerate(lags):
        length = (width - label_w - 80) * t.lag_messages / top
        colour = _COLOURS[_lag_class(t.lag_ms, t.sla_s)]
        rows.append(f"<text x='{label_w - 6}' y='{i * bar + 13}' text-anchor='end'>"
                    f"{escape(t.topic)}</text><rect x='{label_w}' y='{i * bar + 3}' "
                    f"width='{length:.1f}' height='{bar - 6}' fill='{colour}'/>"
                    f"<text x='{label_w + length + 4:.1f}' y='{i * bar + 13}'>{t.lag_messages}</text>")
    return (f"<svg id='lag-chart' role='img' aria-label='lag in messages per topic' "
            f"width='{width}' height='{bar * len(lags)}' font-size='12' "
            "xmlns='http://www.w3.org/2000/svg'>" + "".join(rows) + "</svg>")


def index(glances: list[Glance], dag_ids: dict[str, str],
          kafka_problem: str | None = None) -> str:
    """Every group's state at a glance: what needs a person there, its last commit, size.
    kafka_problem: why Kafka could not be asked (then topics and partitions are what the
    archive holds only)."""
    rows = [_glance_row(g, dag_ids[g.group]) for g in glances]
    table = _table(("group", "state", "last commit", "topics", "partitions", "files", "audit"),
                   rows, "groups")
    kafka = ("<p class='muted'>topics and partitions: archived of those the group selects "
             "in Kafka now</p>" if kafka_problem is None else
             f"<p id='kafka-problem' class='bad'>Kafka could not be asked "
             f"({escape(kafka_problem)}): topics and partitions are what the archive "
             "holds</p>")
    return _document("kafka-archive", "<h1>kafka-archive groups</h1><p class='muted'>each "
                     "group's page shows its lag</p>" + kafka + table, refresh_s=REFRESH_S)


GLANCE_IN_FLIGHT = {"late": "running past its deadline", "failed": "failed in Airflow",
                    "success": "ended in Airflow without its commit",
                    "unknown": "not committed, its state in Airflow unknown"}


def glance_state(g: Glance) -> tuple[str, str]:
    """(css class, words) of a group's state: trouble first (its catalog unreadable, its
    Spark Connect server unreachable, a run in flight that needs a person, open audit
    mismatches), then a group that selects no topic (a pattern that matches nothing, or
    topics not created yet), one that never committed, or ok; a run that Airflow runs
    within its deadline is said after, needing no one."""
    kind = (in_flight_kind(g.in_flight, g.in_flight_state, g.at_ms, g.deadline_s)
            if g.in_flight else None)
    run = g.in_flight and f"run {escape(g.in_flight.run_id)}"
    trouble = ([escape(g.problem)] if g.problem else []) + (
        [f"Spark Connect server unreachable: {escape(g.connect_problem)}"]
        if g.connect_problem else []) + (
        [f"{run} {GLANCE_IN_FLIGHT[kind]}"] if kind in GLANCE_IN_FLIGHT else []) + (
        [f"{g.open_alarms} open audit mismatch(es)"] if g.open_alarms else [])
    if trouble:
        return "bad", "; ".join(trouble)
    calm = f"; {run} {kind} in Airflow" if kind in ("running", "queued") else ""
    if g.selected_topics == 0:
        return "warn", "no topic matched" + calm
    if g.last_commit is None:
        return "warn", "never archived" + calm
    return "ok", "ok" + calm


def _of(held: int, selected: int | None) -> str:
    return f"{held}" if selected is None else f"{held} of {selected}"


def _glance_row(g: Glance, dag_id: str) -> str:
    css, state = glance_state(g)
    return (f"<tr data-group='{escape(g.group)}'><td class='l'><a href='dag/{escape(dag_id)}'>"
            f"{escape(g.group)}</a></td><td class='l {css}'>{state}</td>"
            f"<td class='l'>{escape(g.last_commit or 'never')}</td>"
            f"<td>{_of(g.topics, g.selected_topics)}</td>"
            f"<td>{_of(g.partitions, g.selected_partitions)}</td><td>{g.files}</td>"
            f"<td class='l'>{'not audited' if g.open_alarms is None else 'audited'}</td></tr>")


def audit_page(alarms: dict[str, list], groups: list[str]) -> str:
    """The audit DAG's tab: the unresolved mismatches of every audited group."""
    body = ["<h1>kafka-archive audit</h1>"]
    if not alarms:
        body.append("<p class='muted'>no group is audited (config: audit.groups)</p>")
    from kafka_archive.monitor.overview import GroupOverview

    for group, found in sorted(alarms.items()):
        body += [f"<h2>group {escape(group)}</h2>",
                 _audit(GroupOverview(group, 0, [], [], [], True, found, []))]
    body.append("<p class='muted'>groups: " + ", ".join(
        f"<a href='kafka_archive_{escape(g)}'>{escape(g)}</a>" for g in groups) + "</p>")
    return _document("kafka-archive audit", "\n".join(body), refresh_s=REFRESH_S)


def not_a_group(dag_id: str, groups: list[str]) -> str:
    return _document("kafka-archive", f"<p>{escape(dag_id)} archives no group. Groups: " + ", ".join(
        f"<a href='kafka_archive_{escape(g)}'>{escape(g)}</a>" for g in groups) + "</p>")


def failure(group: str, problem: str) -> str:
    return _document("kafka-archive", f"<h1>kafka-archive group {escape(group)}</h1>"
                                      f"<p class='bad'>cannot show the group: {escape(problem)}</p>")


def unavailable(problem: str) -> str:
    return _document("kafka-archive", "<h1>kafka-archive</h1>"
                                      f"<p class='bad'>cannot show this page: {escape(problem)}</p>")


def lag_chart(partitions: list[PartitionStatus], width: int = 640,
              sla_s: dict[str, int] | None = None) -> str:
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
        level = _lag_class(p.lag_ms if p.behind_ms is None else p.behind_ms,
                           (sla_s or {}).get(p.topic))
        rows.append(f"<text x='{label_w - 6}' y='{y + 13}' text-anchor='end'>"
                    f"{escape(p.topic)} [{p.partition}]</text>"
                    f"<rect x='{label_w}' y='{y + 3}' width='{length:.1f}' height='{bar - 6}' "
                    f"fill='{_COLOURS[level]}'/>"
                    f"<text x='{label_w + length + 4:.1f}' y='{y + 13}'>{_num(p.lag_messages)}</text>")
    height = bar * len(partitions)
    return (f"<svg id='lag-chart' role='img' aria-label='lag in messages per partition' "
            f"width='{width}' height='{height}' font-size='12' xmlns='http://www.w3.org/2000/svg'>"
            + "".join(rows) + "</svg>")


def lag_table(partitions: list[PartitionStatus], o: GroupOverview | None = None,
              files_href: str | None = None) -> str:
    """Every partition, in a drill-down (collapsed) under the topic table; files_href:
    where each partition's files are listed (`<files_href>/<topic>/<partition>`)."""
    sla = {t.topic: t.sla_s for t in (o.freshness if o else ())}
    head = ("topic", "partition", "token", "Kafka end", "lag (messages)", "behind",
            "lag (time)", "archived records", "files", "last commit")
    rows = []
    for p in partitions:
        level = "bad" if p.problem or p.holes else _lag_class(
            p.lag_ms if p.behind_ms is None else p.behind_ms, sla.get(p.topic))
        rows.append(
            f"<tr data-topic='{escape(p.topic)}' data-partition='{p.partition}'"
            f"{' class=bad' if p.problem else ''}>"
            f"<td class='l'>{escape(p.topic)}</td><td>{'!' if p.problem else _files_link(p, files_href)}</td>"
            f"<td>{_num(p.token)}</td><td>{_num(p.end)}</td><td class='lag {level}' "
            f"data-lag='{'' if p.lag_messages is None else p.lag_messages}'>"
            f"{_num(p.lag_messages)}</td><td class='{level}'>{duration(p.behind_ms)}</td>"
            f"<td>{duration(p.lag_ms)}</td>"
            f"<td>{_num(p.archived_records)}</td><td>{_num(p.archived_files)}</td>"
            f"<td class='l'>{escape(p.committed_at or '-')}</td></tr>")
    table = _table(head, rows, "lag-table")
    if len(partitions) <= CHART_PARTITIONS:
        return table
    return f"<details><summary>every partition ({len(partitions)})</summary>{table}</details>"


def _files_link(p: PartitionStatus, files_href: str | None) -> str:
    if files_href is None or not p.archived_files:
        return str(p.partition)
    href = f"{files_href}/{quote(p.topic, safe='')}/{p.partition}"
    return f"<a class='files' href='{escape(href)}'>{p.partition}</a>"


def files_page(pf: PartitionFiles, dag_id: str) -> str:
    """A partition's current files: each one's URL and the command that prints its
    records; a table group's table and a query that reads the partition from it."""
    rows = [f"<tr data-url='{escape(f.url)}'><td>{f.start}</td><td>{f.end}</td>"
            f"<td>{f.records}</td><td>{_bytes(f.bytes)}</td><td class='l'>{escape(f.run)}</td>"
            f"<td class='l'><code class='url'>{escape(f.url)}</code></td>"
            f"<td class='l'><code class='cat'>{escape(cat_command(f.url))}</code></td></tr>"
            for f in pf.files]
    table = ""
    if pf.table:
        query = (f"SELECT * FROM {table_sql(pf.table)} WHERE kafka.partition = {pf.partition} "
                 "ORDER BY kafka.offset LIMIT 100")
        table = (f"<p>Iceberg table <code id='table'>{escape(pf.table)}</code> (catalog, "
                 f"namespace, table); its rows of this partition, in Spark SQL with the "
                 f"catalog configured: <code id='query'>{escape(query)}</code></p>")
    return _document(
        f"kafka-archive {pf.group} {pf.topic}/{pf.partition}",
        f"<h1>kafka-archive group <span id='group'>{escape(pf.group)}</span>: "
        f"{escape(pf.topic)}/{pf.partition}</h1><p class='muted'>the partition's current "
        f"files, oldest first (its catalog's rows) &middot; <a href='"
        f"{escape(page_path(dag_id))}'>the group's page</a></p>" + table
        + (_table(("first offset", "end", "records", "bytes", "run", "file", "prints it"),
                  rows, "files") if rows else "<p class='muted'>no file holds this partition "
                                                  "now</p>"))


def cat_command(url: str) -> str:
    """The CLI command that prints a file's records, as a person pastes it."""
    return f"kafka-archive cat --limit 100 {shlex.quote(url)}"


def table_sql(identifier: str) -> str:
    """`catalog.namespace.topic` for Spark SQL: the topic (which may hold dots) quoted."""
    catalog, namespace, topic = identifier.split(".", 2)
    return f"{catalog}.{namespace}.`{topic.replace('`', '``')}`"


def _freshness(o: GroupOverview) -> str:
    rows = [f"<tr data-topic='{escape(t.topic)}'><td class='l'>{escape(t.topic)}</td>"
            f"<td>{'?' if t.lag_s is None else duration(int(t.lag_s * 1000))}</td>"
            f"<td>{duration(t.sla_s * 1000)}</td>"
            f"<td class='l {'bad' if t.past_sla or t.problem else 'ok'}'>"
            f"{escape(t.problem) if t.problem else 'PAST SLA' if t.past_sla else 'ok'}</td></tr>"
            for t in o.freshness]
    return _table(("topic", "lag", "SLA", ""), rows, "freshness") if rows else \
        "<p class='muted'>no topic archived yet</p>"


def _runs(o: GroupOverview, dag_link: str) -> str:
    rows = [f"<tr data-run='{escape(r.run_id)}'><td class='l'><a href="
            f"'{escape(run_link(dag_link, r.run_id))}' target='_top'>{escape(r.run_id)}</a></td>"
            f"<td class='l'>{escape(r.committed_at)}</td><td>{r.records}</td>"
            f"<td>{_bytes(r.bytes)}</td><td>{r.files}</td>"
            f"<td>{'?' if r.seconds is None else f'{r.seconds:.0f} s'}</td>"
            f"<td class='mbps' data-mbps='{'' if r.mb_per_s is None else r.mb_per_s}'>"
            f"{'?' if r.mb_per_s is None else _rate(r.bytes / r.seconds)}</td></tr>"
            for r in o.runs]
    if o.in_flight:  # planned, not committed: running, or failed (see attention)
        stuck, line = in_flight(o, dag_link)
        rows.insert(0, f"<tr data-run='{escape(o.in_flight.run_id)}' "
                       f"class='{'bad' if stuck else 'running'}'><td class='l' colspan='7'>"
                       f"{line}</td></tr>")
    return _table(("run", "committed", "records", "bytes", "files", "plan to commit",
                   "throughput"), rows, "runs") if rows else \
        "<p class='muted'>no committed run yet</p>"


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


def _document(title: str, body: str, refresh_s: int | None = None) -> str:
    refresh = f"<meta http-equiv='refresh' content='{refresh_s}'>" if refresh_s else ""
    return (f"<!doctype html><html><head><meta charset='utf-8'>{refresh}"
            f"<title>{escape(title)}</title><style>{_STYLE}</style></head><body>{body}"
            "</body></html>")


def _rate(bytes_per_s: float) -> str:
    """1.2 MB/s, 340 kB/s, 40 B/s: readable at every scale."""
    for unit in ("B/s", "kB/s", "MB/s"):
        if bytes_per_s < 1000:
            return f"{bytes_per_s:.0f} {unit}" if bytes_per_s >= 10 else f"{bytes_per_s:.1f} {unit}"
        bytes_per_s /= 1000
    return f"{bytes_per_s:.1f} GB/s"


def _duration_s(seconds: float | int | None) -> str:
    return duration(None if seconds is None else int(seconds * 1000))


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
