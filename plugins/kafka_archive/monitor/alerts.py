"""Alert emails as pure functions of their facts: what went wrong, where (group, topics,
partitions, offsets), the figures, and the run's page in the Airflow UI.

kafka_archive.airflow.alerting gathers the facts (Airflow's context, the plan, Kafka, the
tokens, the manifest), passes error texts through Airflow's secrets masker, and sends
these messages through Airflow's SMTP notifier.
"""

from __future__ import annotations

import html
import logging
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Iterable
from urllib.parse import quote

from kafka_archive import layout
from kafka_archive.audit.checkpoint import Alarm
from kafka_archive.audit.reconcile import format_window
from kafka_archive.audit.reporting import describe
from kafka_archive.monitor import freshness, page
from kafka_archive.plan.planning import Anomaly, Plan

log = logging.getLogger(__name__)

# the runbook's mail pages (docs/operate/mails/<kind>.md, on the docs site)
RUNBOOK = "https://kafka-archive.readthedocs.io/en/latest/operate/mails/"
# every mail, by the kind its runbook page is named after
MAIL_KINDS = ("task-failed", "data-lost", "topics-held", "tokens-left-as-found",
              "deadline-missed", "freshness-past-sla", "audit-mismatch")
MAX_ROWS = 50  # per table: a mail stays readable; the rest is counted, and in the UI


@dataclass(frozen=True)
class Message:
    """about: what the mail is about, as the keys its deduplication uses (anomaly keys,
    a failure's key, topics): for logs and the protocol simulation's checks."""
    subject: str
    html: str
    about: tuple[str, ...] = ()
    group: str = ""
    kind: str = ""  # one of MAIL_KINDS


def dag_id(group: str) -> str:
    return f"kafka_archive_{group}"


def run_link(base_url: str, dag: str, run_id: str) -> str:
    """The run's page in the Airflow 3 UI."""
    return page.run_link(f"{base_url.rstrip('/')}/dags/{quote(dag, safe='')}", run_id)


# --- messages (pure) ---------------------------------------------------------------------

# the error class of a task Airflow failed without its own failure handling: killed, or
# failed by Airflow itself (airflow.alerting.on_run_failure)
TASK_KILLED = "TaskEndedWithoutItsCallback"
REMIND_AFTER_S = 24 * 3600  # the same failure, run after run: mailed again at most daily


def task_failed(group: str, run_id: str, task_id: str, try_number: int | None, error: str,
                terminal: bool | None, plan: Plan | None, link: str,
                log_link: str | None, error_class: str | None = None,
                since: str | None = None) -> Message:
    """since: the run that first failed this way, when this mail is a daily reminder."""
    kind = {True: "terminal: retrying will not help (failed at once), a person must act",
            False: "transient: Airflow retried it; it may pass on the next run",
            None: "unclassified"}[terminal]
    facts = [("group", group), ("run", run_id), ("task", task_id), ("try", try_number),
             ("error kind", kind)]
    body = [_p(f"Task <b>{_e(task_id)}</b> of the archive of group <b>{_e(group)}</b> failed."
               + (f" It has failed the same way in every run since {_e(since)}: this is the "
                  "daily reminder." if since else
                  " Later runs failing the same way are not mailed again (a reminder follows "
                  "daily) until a run commits.")),
            _facts(facts), "<h3>Error</h3>", f"<pre>{_e(error)}</pre>",
            "<h3>What to do</h3>", _p(_e(remedy(error_class, terminal, group)))]
    if plan is not None:
        body += [f"<h3>What the run was archiving ({len(plan.slices)} slices, "
                 f"{plan.records()} offsets)</h3>", _slices_table(plan)]
        if plan.run_id != run_id:
            body.append(_p(f"This run re-executes the plan of run {_e(plan.run_id)}, which failed "
                           "before commit."))
    else:
        body.append(_p("No plan was made for this run, so no data moved and no token changed."))
    body += [_links(link, log_link)]
    return Message(f"[kafka-archive] {group}: task {task_id} failed in run {run_id}"
                   + (f" (failing since {since})" if since else ""), _page(body, "task-failed"),
                   group=group, kind="task-failed")


def remedy(error_class: str | None, terminal: bool | None, group: str) -> str:
    """What a person does about a failed task, by the error's class."""
    known = {
        "TokenConflictError": "Another run committed this topic while this run's plan was in "
                              "flight (two plans at once: was `_inflight.json` removed by "
                              "hand?). This run's plan is stale; `kafka-archive verify --group "
                              f"{group} --full` shows any file it left outside the catalog.",
        "ManifestMismatchError": "A file the run's manifest lists is missing or changed since "
                                 "the archive job wrote it (or the job did not finish). Find "
                                 "out what removed it; to archive the plan again, delete the "
                                 "run's manifest.json: the next run then re-runs its job.",
        "MalformedTokenError": "Fix the token line the error names, or delete it to archive "
                               "that partition again from start_from.",
        "OverlapError": f"`kafka-archive verify --group {group} --full` shows which files hold "
                        "the offsets twice; the run was not committed.",
        "ConfigError": "Fix the config file and key the error names; the next run reads it "
                       "again.",
        TASK_KILLED: "Read the task's log (linked below) for why its process ended: killed "
                     "for memory (raise the worker's memory or lower the group's max_records "
                     "and max_bytes), stopped by its supervisor or a heartbeat timeout (a "
                     "busy or restarted worker), or an error of Airflow's own. Nothing was "
                     "committed half: the next run re-executes the run's plan.",
    }
    if error_class in known:
        return known[error_class]
    if terminal:
        return ("The error names what is wrong (topic, partition, offsets, file); fix that, "
                "and the next scheduled run (or a manual trigger) goes on from there.")
    if terminal is False:
        return ("Usually nothing: the next run tries again. If it keeps failing, check that "
                "Kafka, the S3 server and Spark are reachable from the workers.")
    return "Read the error and the task's log: this failure is not one kafka-archive knows."


def failure_key(task_id: str, error_class: str | None, error: str,
                run_ids: Iterable[str | None]) -> str:
    """The same failure in consecutive runs has the same key: what failed (the task, the
    error's class) and why (its text), with every run id taken out, the failing run's and
    its plan's, as ids and as run folder names: an incident is one key whichever runs
    meet it."""
    for run_id in sorted({r for r in run_ids if r}, key=len, reverse=True):
        error = error.replace(run_id, "<run>").replace(layout.run_folder_name(run_id), "<run>")
    # and any other run Airflow named (the plan in flight, which moves on while the
    # incident stays the same): its id, or its run folder's name
    return f"{task_id} {error_class} {_AIRFLOW_RUN_ID.sub('<run>', error)}"


_AIRFLOW_RUN_ID = re.compile(r"\b(?:scheduled|manual|backfill|asset_triggered|dataset_triggered)"
                             r"__[^\s,;()]*[^\s,;():.]")


def failure_due(mailed: dict[str, dict], key: str, now_s: float) -> bool:
    """Whether a failure is mailed now: the first time, then at most every REMIND_AFTER_S."""
    last = mailed.get(key)
    return last is None or now_s - last["mailed_at_s"] >= REMIND_AFTER_S


def data_lost(group: str, run_id: str, anomalies: Iterable[Anomaly], run_failed: bool,
              link: str) -> Message:
    """run_failed: the topics are held out of the archive (not skipped by config)."""
    lost = sorted(anomalies, key=lambda a: (a.topic, a.partition))
    total = sum(a.lost_to - a.lost_from for a in lost)
    topics = sorted({a.topic for a in lost})
    rows = [(a.topic, a.partition, f"[{a.lost_from}, {a.lost_to})", a.lost_to - a.lost_from)
            for a in lost]
    what = ((f"{_e(', '.join(topics))} {'is' if len(topics) == 1 else 'are'} left out of the "
             "archive, run after run, until the loss is accepted; the group's other topics "
             "are archived as usual. To accept it (recorded with your name, the time and the "
             "reason; <code>verify</code> then lists the range as known loss) and archive "
             "from the earliest retained offset, run:"
             + "".join(f"<pre>{_e(a.remedy(group))}</pre>" for a in lost)
             + "or trigger the DAG with <code>accept_loss</code>, or set "
               "<code>on_retention_gap: skip</code> for the group.")
            if run_failed else
            "The run went on from the earliest retained offset "
            "(<code>on_retention_gap: skip</code>); the range is recorded as accepted loss.")
    body = [_p(f"Kafka's retention deleted {total} messages of group <b>{_e(group)}</b> before "
               "they were archived. They are not in the archive and cannot be recovered from "
               "Kafka."), _p(what), _facts([("group", group), ("run", run_id)]),
            _table(("topic", "partition", "lost offsets", "messages"), rows), _links(link)]
    where = topics[0] if len(topics) == 1 else f"{len(topics)} topics"
    return Message(f"[kafka-archive] {group}: {total} messages lost to retention in {where}",
                   _page(body, "data-lost"), tuple(a.key() for a in lost),
                   group, "data-lost")


def topics_held(group: str, run_id: str, anomalies: Iterable[Anomaly], link: str) -> Message:
    """Topics left out of the run for a token that cannot be applied (not retention)."""
    found = sorted(anomalies, key=lambda a: (a.topic, a.partition))
    topics = sorted({a.topic for a in found})
    waits = ("Each run leaves them out until a person acts"
             + (", or, for a topic Kafka gives no offsets of, until Kafka serves it again."
                if any(a.kind == "unavailable" for a in found) else "."))
    body = [_p(f"{len(topics)} topic(s) of group <b>{_e(group)}</b> were left out of the run; "
               f"the other topics were archived. {waits}"),
            _facts([("group", group), ("run", run_id)]),
            _table(("topic", "problem", "what to do"),
                   [(a.topic, a.describe(), a.remedy(group)) for a in found]), _links(link)]
    where = topics[0] if len(topics) == 1 else f"{len(topics)} topics"
    return Message(f"[kafka-archive] {group}: {where} left out of the archive ("
                   f"{', '.join(sorted({a.kind.replace('_', ' ') for a in found}))})",
                   _page(body, "topics-held"), tuple(a.key() for a in found),
                   group, "topics-held")


def tokens_left_as_found(group: str, run_id: str, left: dict[str, str], link: str) -> Message:
    """A run whose tokens a person changed while it was in flight (commit.protocol)."""
    body = [_p(f"While run <b>{_e(run_id)}</b> of group <b>{_e(group)}</b> was in flight, "
               "the token of the topic(s) below was changed by hand (deleted, a line deleted "
               "or edited, or a rewind or accept-loss that raced the plan). The run did not "
               "overwrite it: it committed its other topics as usual, kept what it had "
               "archived of these in the catalog, and left their tokens as they are. The next "
               "run archives them from those tokens, moving aside whatever it archives again. "
               "Nothing was lost or archived twice; nothing needs doing unless the change was "
               "a mistake."), _facts([("group", group), ("run", run_id)]),
            _table(("topic", "what happened"), sorted(left.items())), _links(link)]
    where = next(iter(left)) if len(left) == 1 else f"{len(left)} topics"
    return Message(f"[kafka-archive] {group}: token of {where} changed by hand during run "
                   f"{run_id}; left as found", _page(body, "tokens-left-as-found"),
                   group=group, kind="tokens-left-as-found")


def unmailed(anomalies: Iterable[Anomaly], mailed: dict[str, str], run_id: str
             ) -> tuple[list[Anomaly], dict[str, str]]:
    """The anomalies not mailed yet, and the new record of mailed ones (anomaly key -> run
    that mailed it), kept only for anomalies still seen: one that comes back is mailed again."""
    anomalies = list(anomalies)
    new = [a for a in anomalies if a.key() not in mailed]
    return new, {a.key(): mailed.get(a.key(), run_id) for a in anomalies}


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
                   f"{_span(deadline_s)} of being queued", _page(body, "deadline-missed"),
                   group=group, kind="deadline-missed")


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
    return Message(f"[kafka-archive] {group}: archive freshness past SLA for {names}",
                   _page(body, "freshness-past-sla"),
                   group=group, kind="freshness-past-sla")


def audit_mismatch(group: str, new: list[Alarm], located: dict, link: str, report: str,
                   report_expires_s: int, still_open: int, acknowledged: int,
                   holes: dict | None = None) -> Message:
    """New audit mismatches, each mailed once: the windows and their messages, where they
    are (located: alarm key -> rows of kafka_archive.audit.incremental.locate), the holes
    next to them as verify names them (holes: alarm key -> (partition, start, end)),
    commands that investigate and acknowledge, and links a browser opens."""
    holes = holes or {}
    missing = [a for a in new if a.status == "MISSING"]
    excess = [a for a in new if a.status == "EXCESS"]
    topics = sorted({a.topic for a in new})
    body = [_p(f"The audit of group <b>{_e(group)}</b> found {len(new)} new window(s) whose "
               "archived messages differ from what the producers reported: "
               f"<b>{sum(a.amount for a in missing)} message(s) missing</b> in {len(missing)} "
               f"window(s), <b>{sum(a.amount for a in excess)} in excess</b> (archived twice, "
               f"or sent outside the audited producer) in {len(excess)}."),
            f"<pre>{_e(chr(10).join(describe(a) for a in new[:MAX_ROWS]))}</pre>",
            _table(("finding", "topic", "source", "window (UTC)", "expected", "archived",
                    "archived in partition [offsets): messages of the window",
                    "holes: partition [offsets) in no file"),
                   [(f"{a.status} {a.amount}", a.topic, a.source,
                     format_window(a.window_start_ms, a.window_ms), a.expected, a.archived,
                     "; ".join(f"{r['partition']} [{r['start']}, {r['end']}): {r['messages']}"
                               for r in located.get(a.key, ())) or "none archived",
                     "; ".join(f"hole: partition {p} [{s}, {e})"
                               for p, s, e in holes.get(a.key, ())) or "none")
                    for a in new])]
    if still_open or acknowledged:
        body.append(_p(f"Not repeated here: {still_open} mismatch(es) mailed before and still "
                       f"open, {acknowledged} acknowledged (see the report)."))
    first = new[0]
    files = [r["url"] for r in located.get(first.key, ()) if r.get("url")]
    commands = [
        ("lag and tokens of every partition", f"kafka-archive status --group {group}"),
        ("holes or offsets archived twice", f"kafka-archive verify --group {group}"),
        ("count the archived files themselves, not the manifests",
         f"kafka-archive audit --group {group} --rescan"),
        *([("read the window's messages", f"kafka-archive cat {files[0]} --limit 20")]
          if files else []),
        ("the mismatches not resolved", f"kafka-archive audit list --group {group}"),
        ("once explained: acknowledge (recorded with who, when and why; not mailed again)",
         f"kafka-archive audit ack --group {group} --topic {first.topic} --source "
         f"{first.source} --window {_time(first.window_start_ms)} --reason \"...\""),
    ]
    body += ["<h3>What to do</h3>",
             _p("With the deployment's config (<code>KAFKA_ARCHIVE_CONFIG</code>), on a host "
                "with the Airflow connections:"),
             "<ul>" + "".join(f"<li>{_e(why)}:<br><code>{_e(cmd)}</code></li>"
                              for why, cmd in commands) + "</ul>",
             _p("A window stays open in the report until it turns OK (e.g. after a rewind "
                "re-archives the missing messages) or is acknowledged; the audit task fails "
                "only for new mismatches.")]
    where = topics[0] if len(topics) == 1 else f"{len(topics)} topics"
    if report.startswith("file://"):
        report_line = f"the report (local archive root): <a href=\"{_e(report)}\">{_e(report)}</a>"
    else:
        expires = _time(_now_ms() + report_expires_s * 1000)
        report_line = (f"<a href=\"{_e(report)}\">the whole report</a> (a presigned link, "
                       f"valid {_span(report_expires_s)}, until {expires})")
    body += [_links(link), _p(report_line)]
    return Message(f"[kafka-archive] audit of group {group}: {len(missing)} window(s) MISSING, "
                   f"{len(excess)} EXCESS in {where}", _page(body, "audit-mismatch"),
                   group=group, kind="audit-mismatch")


def _now_ms() -> int:
    return int(datetime.now(timezone.utc).timestamp() * 1000)


# --- HTML --------------------------------------------------------------------------------

def _e(value) -> str:
    return html.escape(str(value))


def _p(inner: str) -> str:
    return f"<p>{inner}</p>"


def _page(parts: list[str], kind: str) -> str:
    """The mail's HTML, ending with the link to its page of the runbook (what it means,
    what to do), which the docs render from this function's examples."""
    runbook = (f"<p><a href=\"{RUNBOOK}{kind}/\">What this mail means and what to do</a> "
               "(the kafka-archive runbook)</p>")
    return ("<html><body style=\"font-family: sans-serif\">\n" + "\n".join([*parts, runbook])
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
