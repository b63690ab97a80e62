"""Sending the alert emails (kafka_archive.monitor.alerts builds them) through Airflow's SMTP
notifier on the connection `alerts.smtp_conn_id` names.

- task failure: `on_task_failure`, every archive task's on_failure_callback; the same
  failure run after run is mailed once, then daily, until a run commits. A terminal error
  fails its task at once (`fails_at_once_when_terminal`): Airflow retries only the rest.
- data lost to retention (held, or skipped by `on_retention_gap: skip`), topics held, tokens
  changed by hand during a run: `mailings(...).planned` from the plan task and
  `.committed` from the commit task (which mails ranges retention deleted after the plan
  was made). What is mailed when is kafka_archive.monitor.mailing's, sent from here.
- run deadline missed: `deadline_alert`, a Deadline Alert on every archive DAG, counted
  from when the run was queued; the triggerer runs `on_deadline_missed`.
- archive freshness past its SLA: `check_freshness`, the task after commit (the lag
  itself is computed in kafka_archive.monitor.freshness).

Error texts go through Airflow's secrets masker before they are mailed.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Iterable

from airflow.providers.common.compat.sdk import conf
from airflow.providers.smtp.notifications.smtp import SmtpNotifier
from airflow.sdk import AsyncCallback, DeadlineAlert, DeadlineReference
from airflow.sdk.exceptions import AirflowFailException
from airflow.sdk.log import redact

from kafka_archive import brokers, catalog, manifest as manifests
from kafka_archive.airflow import metrics
from kafka_archive.config import Alerts, Config, Group
from kafka_archive.errors import ArchiveError, TerminalError, TransientError
from kafka_archive.monitor import freshness, metrics as figures, trends
from kafka_archive.plan import inflight
from kafka_archive.layout import run_file
from kafka_archive.monitor.alerts import (TASK_KILLED, Message, dag_id, deadline_missed,
                                          freshness_past_sla, run_link, task_failed)
from kafka_archive.monitor.mailing import Mailings
from kafka_archive.monitor.page import page_path
from kafka_archive.plan.planning import HeldTopicsError, Plan

log = logging.getLogger(__name__)


def check_freshness(group_name: str, run_id: str, summary: dict,
                    topics: Iterable[str] = ()) -> dict:
    """After a commit: per topic of the group (or of `topics`, a run's subset), the lag of
    the archive behind Kafka against its SLA; one email listing every lagging topic.
    Returns the lags, for the task's XCom."""
    from kafka_archive.airflow import connections  # boto3 and S3Hook: not at DAG parse
    topics = sorted(topics or ())
    cfg = connections.load_config()
    group = cfg.group(group_name)
    storage = connections.storage(cfg.s3_conn_id)
    manifest = manifests.read(storage, cfg.archive_root, group.name, summary["run_id"])
    store = connections.token_store(cfg)
    # a malformed token holds its topic (mailed when planned): the others are measured
    tokens, unreadable = freshness.read_tokens(store, group.name, topics or store.topics(group.name))
    for topic, problem in unreadable.items():
        log.warning("freshness of %s/%s not measured: %s", group.name, topic, problem)
    consumer = brokers.consumer(cfg)
    try:
        partitions = freshness.observe(
            consumer, group, tokens, manifest["slices"] if manifest else [], topics, unreadable,
            freshness.caught_up(catalog.open_catalog(storage, cfg, group.name)))
    finally:
        consumer.close()
    now_ms = int(datetime.now(timezone.utc).timestamp() * 1000)
    lagging = freshness.past_sla(partitions, lambda t: group.policy_for(t).freshness_s, now_ms)
    lags = freshness.topic_lags(partitions, now_ms)
    metrics.emit(figures.of_freshness(group.name, partitions, now_ms))
    try:  # the page's trends: a lost line is a gap in a chart, not a reason to fail
        trends.record(storage, cfg.archive_root, group.name, trends.run_line(
            summary, summary.get("planned_at", summary["committed_at"]), partitions, now_ms),
            datetime.now(timezone.utc))
    except ArchiveError as exc:
        log.warning("run %s not recorded in the group's history: %s", run_id, exc)
    log.info("freshness lag per topic (s): %s", json.dumps(lags))
    if lagging:
        send(cfg.alerts, freshness_past_sla(group.name, run_id, lagging, now_ms,
                                            link_for(dag_id(group.name), run_id)))
    return {"lag_s": lags, "past_sla": [t.topic for t in lagging]}


def not_green(lags: dict, summary: dict) -> str | None:
    """Why the freshness task must fail though the run committed: topics past their SLA
    (mailed by check_freshness), ranges retention deleted before they were archived
    (mailed when planned); None when there is neither."""
    problems = []
    if lags["past_sla"]:
        problems.append(f"archive freshness past its SLA for {', '.join(lags['past_sla'])} "
                        f"(lag per topic, s: {json.dumps(lags['lag_s'])})")
    problems += [f"data lost: {what}" for what in summary.get("skipped", ())]
    return "; ".join(problems) or None


def page_link(dag: str) -> str:
    """The group page of the kafka-archive plugin (kafka_archive.airflow.ui)."""
    return (conf.get("api", "base_url", fallback=None) or "http://localhost:8080").rstrip("/") \
        + page_path(dag)


def mailings(cfg: Config, group: str, context=None) -> Mailings:
    """The group's mail rules (kafka_archive.monitor.mailing) sending through Airflow's
    SMTP notifier, their records on the archive root's storage."""
    from kafka_archive.airflow import connections  # boto3 and S3Hook: not at DAG parse
    return Mailings(connections.storage(cfg.s3_conn_id), cfg.archive_root, group,
                    lambda message: send(cfg.alerts, message, context),
                    lambda run_id: link_for(dag_id(group), run_id))


def fails_at_once_when_terminal(body):
    """A task body whose TerminalError fails the task at once: retrying cannot help, and
    Airflow's retries would only delay the mail. The callback reads the error it wraps."""
    @functools.wraps(body)
    def run(*args, **kwargs):
        try:
            return body(*args, **kwargs)
        except TerminalError as exc:
            raise AirflowFailException(f"{type(exc).__name__}: {exc}") from exc
    return run


def on_task_failure(context) -> None:
    """on_failure_callback of the archive tasks (runs in the task's process). The same
    failure in consecutive runs is mailed once, then daily, until a run commits."""
    from kafka_archive.airflow import connections  # boto3 and S3Hook: not at DAG parse
    cfg = connections.load_config()
    ti, error = context["ti"], _archive_error(context.get("exception"))
    group = ti.dag_id.removeprefix("kafka_archive_")
    run_id = context["run_id"]
    link = link_for(ti.dag_id, run_id)
    mails = mailings(cfg, group, context)
    # first: Airflow reports the task failed before this callback runs, so the DAG's
    # callback (on_run_failure) may already be looking for this note
    mails.note_failure_seen(run_id)
    if isinstance(error, HeldTopicsError):  # its anomalies were mailed when planned
        log.warning("not mailed again: %s", error)
        return
    text, kind = _error_text(error), (type(error).__name__ if error is not None else None)
    plan = _plan_of(cfg, ti)
    mails.task_failed(
        ti.task_id, (run_id, plan and plan.run_id), kind, text, time.time(),
        lambda since: task_failed(group, run_id, ti.task_id, ti.try_number, text,
                                  _terminal(error), plan, link, ti.log_url, kind, since))


# tasks that mail their own failure (check_freshness), with no failure callback
MAILS_ITS_OWN_FAILURE = frozenset({"freshness"})
# how long the DAG's callback looks for a failed task's note: its callback runs after
# Airflow has the task's state, so the run may be failed (and this called) a moment first
SEEN_WAIT_S = 15


def _seen_within(mails: Mailings, run_id: str, wait_s: float) -> bool:
    deadline = time.monotonic() + wait_s
    while not mails.failure_seen(run_id):
        if time.monotonic() > deadline:
            return False
        time.sleep(1)
    return True


def on_run_failure(context) -> None:
    """on_failure_callback of an archive DAG (run by the DAG processor when a run failed).
    A run whose failed tasks' own callbacks never ran is mailed here: a task process
    killed (out of memory, by its supervisor, a heartbeat timeout) before or while its
    body ran, or a failure in Airflow itself (its task-instance bookkeeping); otherwise
    such a run would fail with no mail at all. Named: the task that failed last."""
    from kafka_archive.airflow import connections  # boto3 and S3Hook: not at DAG parse
    cfg = connections.load_config()
    ti, run_id = context.get("ti"), context["run_id"]
    group = context["dag"].dag_id.removeprefix("kafka_archive_")
    task_id = getattr(ti, "task_id", None) or "(the run)"
    mails = mailings(cfg, group, context)
    if task_id in MAILS_ITS_OWN_FAILURE or _seen_within(mails, run_id, SEEN_WAIT_S):
        log.info("run %s failed; its failure was handled by its task (%s)", run_id, task_id)
        return
    text = (f"Airflow failed the run ({context.get('reason') or 'a task failed'}): task "
            f"{task_id} ended failed without its own failure handling (its process was "
            "killed, or Airflow failed it); its log says why")
    stored = connections.storage(cfg.s3_conn_id).get_or_none(
        run_file(cfg.archive_root, group, run_id, "plan.json"))
    plan = Plan.from_json(stored) if stored is not None else None
    mails.task_failed(
        task_id, (run_id, plan and plan.run_id), TASK_KILLED, text, time.time(),
        lambda since: task_failed(group, run_id, task_id, getattr(ti, "try_number", None), text,
                                  None, plan, link_for(dag_id(group), run_id),
                                  getattr(ti, "log_url", None), TASK_KILLED, since))


def _archive_error(error):
    """The library's error a task failed with, also when fails_at_once_when_terminal
    wrapped it."""
    cause = getattr(error, "__cause__", None)
    return cause if isinstance(error, AirflowFailException) and isinstance(cause, ArchiveError) \
        else error


def deadline_alert(cfg: Config, group: Group):
    """The DAG's Deadline Alert: not finished `deadline` after the run was queued.

    None under `airflow dags test`: no scheduler or triggerer runs there, so no deadline
    can fire, and Airflow 3.3.2's DAG.test() crashes at the end of every successful run of
    a DAG with a deadline (apache/airflow#73428: its in-memory DAG holds the encoded alerts
    where the scheduler's holds their ids)."""
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


FINISHED = ("success", "failed")


async def on_deadline_missed(group: str, deadline_s: int, archive_root: str, s3_conn_id: str,
                             alerts: dict, context: dict | None = None) -> str:
    """Run by the triggerer when a run missed its deadline. The context holds the run
    (`dag_run`) and the deadline; the plan in flight tells what the run is archiving. A
    run that already finished is no late run: Airflow still fires the deadline of a run
    that failed before it, whose failure was mailed already; nothing is sent then."""
    context = context or {}
    run = context.get("dag_run") or {}
    run_id = run.get("dag_run_id") or run.get("run_id") or "?"
    if run.get("state") in FINISHED:
        log.info("run %s of group %s ended %s before its deadline: no deadline alert",
                 run_id, group, run["state"])
        return f"no alert: run {run_id} already {run['state']}"
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
    if message.kind:
        metrics.emit(figures.of_mail(message.group, message.kind))


def link_for(dag: str, run_id: str) -> str:
    return run_link(conf.get("api", "base_url", fallback=None) or "http://localhost:8080",
                    dag, run_id)


def _notifier(alerts: Alerts, message: Message):
    return SmtpNotifier(smtp_conn_id=alerts.smtp_conn_id, from_email=alerts.email_from,
                        to=list(alerts.email_to), subject=message.subject,
                        html_content=message.html)


def _plan_of(cfg: Config, ti) -> Plan | None:
    """The run's plan, when the plan task got as far as storing one."""
    from kafka_archive.airflow import connections  # boto3 and S3Hook: not at DAG parse
    try:
        plan_url = ti.xcom_pull(task_ids="plan")
        return Plan.from_json(connections.storage(cfg.s3_conn_id).get_bytes(plan_url)) \
            if plan_url else None
    except Exception:  # the alert matters more than its detail
        log.exception("could not read the run's plan for the alert")
        return None


def _plan_in_flight(archive_root: str, s3_conn_id: str, group: str) -> tuple[Plan | None, str]:
    from kafka_archive.airflow import connections  # boto3 and S3Hook: not at DAG parse
    try:
        plan = inflight.plan(connections.storage(s3_conn_id), archive_root, group)
        if plan is None:
            return None, ("No plan is in flight: the run has not planned yet (still queued, "
                          "or planning), or has committed since.")
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
    return str(redact(text))


def _terminal(error) -> bool | None:
    if isinstance(error, TerminalError):
        return True
    if isinstance(error, TransientError):
        return False
    return None
