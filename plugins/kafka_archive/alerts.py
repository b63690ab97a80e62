"""Alert emails: what went wrong, where (group, topics, partitions, offsets), the figures,
and the run's page in the Airflow UI; sent through Airflow's SMTP notifier on the
connection `alerts.smtp_conn_id` names.

- task failure: `on_task_failure`, every archive task's on_failure_callback. A failure
  caused by data lost to retention becomes the data-lost alert, naming each lost range.
- data lost to retention and skipped (`on_retention_gap: skip`): `on_plan`, from the plan.
- run deadline missed: `deadline_alert`, a Deadline Alert on every archive DAG, counted
  from when the run was queued; the triggerer runs `on_deadline_missed`.
- archive freshness past its SLA: `check_freshness`, the task after commit (the lag
  itself is computed in `freshness`).

Messages are pure functions of their facts; everything else gathers the facts (Airflow's
context, the plan, Kafka, the tokens, the manifest) and sends. Error texts go through
Airflow's secrets masker before they are mailed.
"""

from __future__ import annotations

import asyncio
import html
import json
import logging
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable
from urllib.parse import quote

from kafka_archive import freshness
from kafka_archive.config import Alerts, Config, Group
from kafka_archive.errors import TerminalError, TransientError
from kafka_archive.planning import Anomaly, Plan, RetentionGapError

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


# --- gathering facts and sending ---------------------------------------------------------

def check_freshness(group_name: str, run_id: str, summary: dict,
                    topics: Iterable[str] = ()) -> dict:
    """After a commit: per topic of the group (or of `topics`, a run's subset), the lag of
    the archive behind Kafka against its SLA; one email listing every lagging topic.
    Returns the lags, for the task's XCom."""
    from kafka_archive import brokers, config as config_module, layout
    from kafka_archive.storage import Storage, s3_client
    from kafka_archive.tokens import open_store

    topics = sorted(topics or ())
    cfg = config_module.load()
    group = cfg.group(group_name)
    storage = Storage.for_airflow(cfg.s3_conn_id)
    manifest = json.loads(storage.get_bytes(layout.run_file(
        cfg.archive_root, group.name, summary["run_id"], "manifest.json")))
    store = open_store(cfg.token_root, lambda: s3_client(cfg.s3_conn_id))
    tokens = {}
    for topic in topics or store.topics(group.name):
        read = store.read(group.name, topic)
        tokens[topic] = dict(read.token.offsets) if read.token else {}
    consumer = brokers.consumer(cfg)
    try:
        partitions = freshness.observe(consumer, group, tokens, manifest["slices"], topics)
    finally:
        consumer.close()
    now_ms = int(datetime.now(timezone.utc).timestamp() * 1000)
    lagging = freshness.past_sla(partitions, lambda t: group.policy_for(t).freshness_s, now_ms)
    lags = freshness.topic_lags(partitions, now_ms)
    log.info("freshness lag per topic (s): %s", json.dumps(lags))
    if lagging:
        send(cfg.alerts, freshness_past_sla(group.name, run_id, lagging, now_ms,
                                            link_for(dag_id(group.name), run_id)))
    return {"lag_s": lags, "past_sla": [t.topic for t in lagging]}


def on_plan(cfg: Config, plan: Plan, run_id: str) -> None:
    """Mail the ranges a new plan skipped because retention deleted them (a plan re-executed
    from an earlier run was mailed about then)."""
    skipped = [a for a in plan.anomalies if a.action == "skipped"]
    if skipped and plan.run_id == run_id:
        send(cfg.alerts, data_lost(plan.group, run_id, skipped, False,
                                   link_for(dag_id(plan.group), run_id)))


def on_task_failure(context) -> None:
    """on_failure_callback of the archive tasks (runs in the task's process)."""
    from kafka_archive import config as config_module

    cfg = config_module.load()
    ti, error = context["ti"], context.get("exception")
    group = ti.dag_id.removeprefix("kafka_archive_")
    run_id = context["run_id"]
    link = link_for(ti.dag_id, run_id)
    if isinstance(error, RetentionGapError):
        message = data_lost(group, run_id, error.anomalies, True, link)
    else:
        message = task_failed(group, run_id, ti.task_id, ti.try_number, _error_text(error),
                              _terminal(error), _plan_of(cfg, ti), link, ti.log_url)
    send(cfg.alerts, message, context)


def deadline_alert(cfg: Config, group: Group):
    """The DAG's Deadline Alert: not finished `deadline` after the run was queued.

    None under `airflow dags test`: no scheduler or triggerer runs there, so no deadline
    can fire, and Airflow 3.3.2's DAG.test() crashes at the end of every successful run of
    a DAG with a deadline (apache/airflow#73428: its in-memory DAG holds the encoded alerts
    where the scheduler's holds their ids)."""
    from datetime import timedelta

    from airflow.sdk import AsyncCallback, DeadlineAlert, DeadlineReference

    if Path(sys.argv[0]).name == "airflow" and sys.argv[1:3] == ["dags", "test"]:
        return None
    return DeadlineAlert(
        reference=DeadlineReference.DAGRUN_QUEUED_AT,
        interval=timedelta(seconds=group.deadline_s),
        callback=AsyncCallback(on_deadline_missed, kwargs={
            "group": group.name, "deadline_s": group.deadline_s,
            "archive_root": cfg.archive_root, "s3_conn_id": cfg.s3_conn_id,
            "alerts": {"smtp_conn_id": cfg.alerts.smtp_conn_id,
                       "email_to": list(cfg.alerts.email_to),
                       "email_from": cfg.alerts.email_from}}))


async def on_deadline_missed(group: str, deadline_s: int, archive_root: str, s3_conn_id: str,
                             alerts: dict, context: dict | None = None) -> str:
    """Run by the triggerer when a run missed its deadline. The context holds the run
    (`dag_run`) and the deadline; the plan in flight tells what the run is archiving."""
    context = context or {}
    run = context.get("dag_run") or {}
    run_id = run.get("dag_run_id") or run.get("run_id") or "?"
    deadline_at = (context.get("deadline") or {}).get("deadline_time")
    plan, note = await asyncio.to_thread(_plan_in_flight, archive_root, s3_conn_id, group)
    message = deadline_missed(group, run_id, deadline_s, run.get("queued_at"),
                              str(deadline_at) if deadline_at else None, run.get("state"),
                              plan, note,
                              link_for(run.get("dag_id") or dag_id(group), run_id))
    settings = Alerts(alerts["smtp_conn_id"], tuple(alerts["email_to"]), alerts["email_from"])
    await _notifier(settings, message).async_notify(context)
    log.info("deadline alert sent to %s: %s", ", ".join(settings.email_to), message.subject)
    return message.subject


def send(alerts: Alerts, message: Message, context=None) -> None:
    # notify(), not the notifier's __call__: our text is not a Jinja template
    _notifier(alerts, message).notify(context or {})
    log.info("alert sent to %s: %s", ", ".join(alerts.email_to), message.subject)


def link_for(dag: str, run_id: str) -> str:
    from airflow.providers.common.compat.sdk import conf

    return run_link(conf.get("api", "base_url", fallback=None) or "http://localhost:8080",
                    dag, run_id)


def _notifier(alerts: Alerts, message: Message):
    from airflow.providers.smtp.notifications.smtp import SmtpNotifier

    return SmtpNotifier(smtp_conn_id=alerts.smtp_conn_id, from_email=alerts.email_from,
                        to=list(alerts.email_to), subject=message.subject,
                        html_content=message.html)


def _plan_of(cfg: Config, ti) -> Plan | None:
    """The run's plan, when the plan task got as far as storing one."""
    from kafka_archive.storage import Storage

    try:
        plan_url = ti.xcom_pull(task_ids="plan")
        return Plan.from_json(Storage.for_airflow(cfg.s3_conn_id).get_bytes(plan_url)) \
            if plan_url else None
    except Exception:  # the alert matters more than its detail
        log.exception("could not read the run's plan for the alert")
        return None


def _plan_in_flight(archive_root: str, s3_conn_id: str, group: str) -> tuple[Plan | None, str]:
    from kafka_archive import layout
    from kafka_archive.storage import Storage

    try:
        storage = Storage.for_airflow(s3_conn_id)
        marker = storage.get_or_none(layout.inflight_marker(archive_root, group))
        if marker is None:
            return None, ("No plan is in flight: the run has not planned yet (still queued, "
                          "or planning), or has committed since.")
        plan = Plan.from_json(storage.get_bytes(json.loads(marker)["plan"]))
        return plan, f"The plan in flight is run {plan.run_id}'s, made at {plan.created_at}."
    except Exception as exc:
        log.exception("could not read the plan in flight for the alert")
        return None, f"Could not read the plan in flight: {_redact(repr(exc))}"


def _error_text(error) -> str:
    text = error if isinstance(error, str) else (
        f"{type(error).__name__}: {error}" if error is not None else "(no exception recorded)")
    text = _redact(text)
    return text if len(text) <= 4000 else text[:4000] + " ..."


def _redact(text: str) -> str:
    from airflow.sdk.log import redact

    return str(redact(text))


def _terminal(error) -> bool | None:
    if isinstance(error, TerminalError):
        return True
    if isinstance(error, TransientError):
        return False
    return None


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
