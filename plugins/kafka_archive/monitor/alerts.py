"""Alert emails as pure functions of their facts: what went wrong, where (group, topics,
partitions, offsets), the figures, and the run's page in the Airflow UI.

kafka_archive.airflow.alerting gathers the facts (Airflow's context, the plan, Kafka, the
tokens, the manifest), passes error texts through Airflow's secrets masker, and sends
these messages through Airflow's SMTP notifier.
"""

from __future__ import annotations

import html
import logging
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Iterable
from urllib.parse import quote

from kafka_archive.monitor import freshness
from kafka_archive.plan.planning import Anomaly, Plan

log = logging.getLogger(__name__)

MAX_ROWS = 50  # per table: a mail stays readable; the rest is counted, and in the UI


@dataclass(frozen=True)
class Message:
    subject: str
    html: str


def dag_id(group: str) -> str:
    return f"kafka_archive_{group}"


def run_link(base_url: str, dag: str, run_id: str) -> str:
    """The run's page in the Airflow 3 UI."""
    return f"{base_url.rstrip('/')}/dags/{quote(dag, safe='')}/runs/{quote(run_id, safe='')}"


# --- messages (pure) ---------------------------------------------------------------------

def task_failed(group: str, run_id: str, task_id: str, try_number: int | None, error: str,
                terminal: bool | None, plan: Plan | None, link: str,
                log_link: str | None) -> Message:
    kind = {True: "terminal: retrying will not help, a person must act",
            False: "transient: Airflow retried it; it may pass on the next run",
            None: "unclassified"}[terminal]
    facts = [("group", group), ("run", run_id), ("task", task_id), ("try", try_number),
             ("error kind", kind)]
    body = [_p(f"Task <b>{_e(task_id)}</b> of the archive of group <b>{_e(group)}</b> failed."),
            _facts(facts), "<h3>Error</h3>", f"<pre>{_e(error)}</pre>"]
    if plan is not None:
        body += [f"<h3>What the run was archiving ({len(plan.slices)} slices, "
                 f"{plan.records()} offsets)</h3>", _slices_table(plan)]
        if plan.run_id != run_id:
            body.append(_p(f"This run re-executes the plan of run {_e(plan.run_id)}, which failed "
                           "before commit."))
    else:
        body.append(_p("No plan was made for this run, so no data moved and no token changed."))
    body += [_links(link, log_link)]
    return Message(f"[kafka-archive] {group}: task {task_id} failed in run {run_id}",
                   _page(body))


def data_lost(group: str, run_id: str, anomalies: Iterable[Anomaly], run_failed: bool,
              link: str) -> Message:
    lost = sorted(anomalies, key=lambda a: (a.topic, a.partition))
    total = sum(a.lost_to - a.lost_from for a in lost)
    topics = sorted({a.topic for a in lost})
    rows = [(a.topic, a.partition, f"[{a.lost_from}, {a.lost_to})", a.lost_to - a.lost_from)
            for a in lost]
    what = (("The run failed and nothing moved. Set <code>on_retention_gap: skip</code> to "
             "archive from the earliest retained offset, or rewind the token by hand.")
            if run_failed else
            "The run went on from the earliest retained offset "
            "(<code>on_retention_gap: skip</code>).")
    body = [_p(f"Kafka's retention deleted {total} messages of group <b>{_e(group)}</b> before "
               "they were archived. They are not in the archive and cannot be recovered from "
               "Kafka."), _p(what), _facts([("group", group), ("run", run_id)]),
            _table(("topic", "partition", "lost offsets", "messages"), rows), _links(link)]
    where = topics[0] if len(topics) == 1 else f"{len(topics)} topics"
    return Message(f"[kafka-archive] {group}: {total} messages lost to retention in {where}",
                   _page(body))


def deadline_missed(group: str, run_id: str, deadline_s: int, queued_at: str | None,
                    deadline_at: str | None, state: str | None, plan: Plan | None,
                    plan_note: str, link: str) -> Message:
    facts = [("group", group), ("run", run_id), ("state", state), ("queued at", queued_at),
             ("deadline", f"{_span(deadline_s)} after queued: {deadline_at}")]
    body = [_p(f"Run <b>{_e(run_id)}</b> of group <b>{_e(group)}</b> had not finished "
               f"{_span(deadline_s)} after it was queued."), _facts(facts), _p(_e(plan_note))]
    if state == "queued":
        body.append(_p("It has not started: runs of a group go one at a time, so it waits for "
                       "the run before it (or for a free executor slot)."))
    if plan is not None:
        body += [f"<h3>In flight ({len(plan.slices)} slices, {plan.records()} offsets)</h3>",
                 _slices_table(plan)]
    body += [_p("A long Spark job (a backlog: lower max_records / max_bytes), a task waiting "
                "for a slot or a retry are the usual causes; see the run's tasks."), _links(link)]
    return Message(f"[kafka-archive] {group}: run {run_id} not finished within "
                   f"{_span(deadline_s)} of being queued", _page(body))


def freshness_past_sla(group: str, run_id: str, lagging: list[freshness.TopicFreshness],
                       now_ms: int,
                       link: str) -> Message:
    body = [_p(f"The archive of group <b>{_e(group)}</b> is behind Kafka by more than the "
               f"freshness SLA for {len(lagging)} topic(s), after run {_e(run_id)} committed. "
               "Lag: the time between the newest message in Kafka and the newest archived "
               "one (when nothing is archived yet: the age of the oldest waiting message).")]
    for t in lagging:
        rows = [(p.partition, p.archived_to, p.latest, p.pending, _time(p.newest_kafka_ms),
                 _time(p.newest_archived_ms), _span(p.lag_s(now_ms)))
                for p in sorted(t.partitions, key=lambda p: -(p.lag_s(now_ms) or 0))]
        body += [f"<h3>{_e(t.topic)}: lag {_span(t.lag_s)}, SLA {_span(t.sla_s)}, "
                 f"{sum(p.pending for p in t.partitions)} messages waiting</h3>",
                 _table(("partition", "archived up to", "Kafka latest", "waiting",
                         "newest in Kafka", "newest archived", "lag"), rows)]
    body += [_p("A backlog (raise max_records / max_bytes or run more often), min_records / "
                "max_delay holding partitions back, or failing runs are the usual causes."),
             _links(link)]
    names = ", ".join(t.topic for t in lagging[:3]) + (" ..." if len(lagging) > 3 else "")
    return Message(f"[kafka-archive] {group}: archive freshness past SLA for {names}", _page(body))


def audit_mismatch(outcome: dict, link: str) -> Message:
    """An audit found windows whose archived count differs from the producers' count
    (`outcome` of tasks.audit_reconcile: totals, summary naming each window, report)."""
    totals = outcome["totals"]
    return Message(f"[kafka-archive] audit of group {outcome['group']}: {totals['MISSING']} "
                   f"window(s) MISSING, {totals['EXCESS']} EXCESS",
                   _page([f"<pre>{_e(outcome['summary'])}</pre>",
                          _p(f"The whole report: {_e(outcome['report'])}"), _links(link)]))


# --- HTML --------------------------------------------------------------------------------

def _e(value) -> str:
    return html.escape(str(value))


def _p(inner: str) -> str:
    return f"<p>{inner}</p>"


def _page(parts: list[str]) -> str:
    return ("<html><body style=\"font-family: sans-serif\">\n" + "\n".join(parts)
            + "\n</body></html>")


def _facts(pairs) -> str:
    return "<table>" + "".join(f"<tr><th align=\"left\">{_e(k)}</th><td>{_e(v)}</td></tr>"
                               for k, v in pairs if v is not None) + "</table>"


def _table(headers, rows) -> str:
    rows = list(rows)
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>"
                   for row in rows[:MAX_ROWS])
    more = (f"<tr><td colspan=\"{len(headers)}\">... and {len(rows) - MAX_ROWS} more</td></tr>"
            if len(rows) > MAX_ROWS else "")
    return f"<table border=\"1\" cellpadding=\"3\"><tr>{head}</tr>{body}{more}</table>"


def _slices_table(plan: Plan) -> str:
    return _table(("topic", "partition", "offsets", "messages"),
                  [(s.topic, s.partition, f"[{s.start}, {s.end})", s.end - s.start)
                   for s in sorted(plan.slices, key=lambda s: (s.topic, s.partition))])


def _links(run: str, task_log: str | None = None) -> str:
    parts = [f"<a href=\"{_e(run)}\">the run in Airflow</a>: {_e(run)}"]
    if task_log:
        parts.append(f"<a href=\"{_e(task_log)}\">the task's log</a>: {_e(task_log)}")
    return _p("<br>".join(parts))


def _span(seconds: float | None) -> str:
    """900 -> '15m 0s (900 s)'; readable and exact."""
    if seconds is None:
        return "unknown"
    s = int(round(seconds))
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    readable = f"{h}h {m}m" if h else (f"{m}m {sec}s" if m else f"{sec}s")
    return readable if s < 60 else f"{readable} ({s} s)"


def _time(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="seconds")
