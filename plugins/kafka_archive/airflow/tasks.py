"""The bodies of the DAGs' tasks: each builds its clients from config and the Airflow
connections, and calls one library function. The CLI calls them too."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict

from kafka_archive import brokers, catalog, config as config_module, layout
from kafka_archive.airflow import alerting, connections, metrics
from kafka_archive.audit import gather, incremental, reconcile, reporting
from kafka_archive.audit.checkpoint import Alarm
from kafka_archive.commit import (compaction, finalizing, iceberg, mirror,
                                  protocol as committing, table_maintenance)
from kafka_archive.errors import ArchiveError
from kafka_archive.monitor import alerts, metrics as figures, preflight as preflight_check
from kafka_archive.plan import inflight, losses, rewinds as rewinding, runs
from kafka_archive.plan.planning import Anomaly, Caps, HeldTopicsError, Plan, held
from kafka_archive.progress_bars import Track, untracked
from kafka_archive.tools import backfill as backfilling, replay as replaying

log = logging.getLogger(__name__)
# kafka-python logs every connection and coordinator step at INFO: dozens of lines a task
logging.getLogger("kafka").setLevel(logging.WARNING)

REPORT_LINK_S = 7 * 24 * 3600  # a presigned report link's life: SigV4's longest


def _first_reused(storage, consumer, s):
    """The plan's look at the files a rewind replaces (loaded only when one does)."""
    from kafka_archive.archive import earlier

    return earlier.first_reused(storage, consumer, s)


def plan(group: str, run_id: str, dry_run: bool = False, topics: tuple[str, ...] = (),
         caps: Caps = Caps(), rewinds: tuple[dict, ...] = (), accepting: tuple[dict, ...] = (),
         accepted_by: str = "") -> str | None:
    """Make (or resume) the run's plan; the plan's URL, or None when there is nothing to do.
    A manual run may name a topic subset, per-partition caps, losses to accept
    ({topic, partition?, reason}, by `accepted_by`) and rewinds (keyword arguments of
    `rewinds.rewind`), applied first, unless it is a dry run. Fails when every topic with
    something to archive was held out for an anomaly."""
    cfg = connections.load_config()
    storage = connections.storage(cfg.s3_conn_id)
    tokens = connections.token_store(cfg)
    if not dry_run:  # a server that ignores compare-and-swap could lose a commit
        preflight_check.conditional_writes(cfg, storage, tokens)
    consumer = brokers.consumer(cfg)
    try:
        for request in accepting:
            if dry_run:
                log.info("dry run: not accepting loss %s", request)
                continue
            for loss in losses.accept(cfg, tokens, consumer, storage, group, request["topic"],
                                      request["reason"], accepted_by,
                                      runs.now_utc().isoformat(timespec="seconds"),
                                      request.get("partition")):
                log.warning("accepted: %s", loss.describe())
        for request in rewinds:
            if dry_run:
                log.info("dry run: not rewinding %s", request)
                continue
            for change in rewinding.rewind(cfg, tokens, consumer, group, storage=storage,
                                           **request):
                log.warning("%s", change)
        now = runs.now_utc()
        made = runs.start(cfg, group, run_id, storage, tokens, consumer, now, dry_run,
                          topics, caps, tables=connections.iceberg_tables(cfg)
                          if cfg.group(group).table is not None else None,
                          first_reused=_first_reused)
    finally:
        consumer.close()
    for anomaly in made.anomalies:
        log.warning("%s (%s)", anomaly.describe(), anomaly.action)
    waiting = list(made.waiting.items())
    log.info("plan %s: %d slices, %d offsets, %d files superseded; %d partitions waiting%s",
             made.run_id, len(made.slices), made.records(), len(made.superseded), len(waiting),
             "".join(f"; {where}: {why}" for where, why in waiting[:3])
             + ("; ..." if len(waiting) > 3 else ""))
    if dry_run:
        print(made.to_json().decode())
        return None
    # mails each anomaly once (held topics, skipped ranges)
    alerting.mailings(cfg, group).planned(made, run_id, now)
    if not made.slices:
        if held(made.anomalies):  # nothing else to archive: the run fails here
            raise HeldTopicsError(group, run_id, held(made.anomalies))
        return None
    return layout.run_file(cfg.archive_root, group, made.run_id, "plan.json")


def check_held(plan_url: str, summary: dict | None = None) -> None:
    """The run's last task: fails when the plan left topics out for their anomalies, or
    the job did (its commit's summary: a rewind that found other messages in Kafka than
    the archive; the other topics are committed by then), so the run shows failed in the
    UI."""
    cfg = connections.load_config()
    made = Plan.from_json(connections.storage(cfg.s3_conn_id).get_bytes(plan_url))
    if out := held(made.anomalies) + [Anomaly(**a) for a in (summary or {}).get(
            "offsets_reused", ())]:
        raise HeldTopicsError(made.group, made.run_id, out)
    log.info("no topic was left out of run %s", made.run_id)


def commit(plan_url: str) -> dict:
    """The run's commit, then its announcements: the lag mirror, the mail and (by the
    caller, as the task returns) the Asset events, `announce` in the summary: "new", or
    "again" for a commit whose protocol an earlier attempt finished but whose task died
    before its announcements were recorded as made (its events flagged `replaces`), or
    None: made before. The record (`announced.json` in the run's folder) is written after
    the mail and again just before the events go out, so a kill between the two sends
    the mail at most twice, never not at all."""
    cfg = connections.load_config()
    storage = connections.storage(cfg.s3_conn_id)
    made = Plan.from_json(storage.get_bytes(plan_url))
    tokens = connections.token_store(cfg)
    summary = committing.commit(cfg, made, storage, tokens, runs.now_utc(),
                                connections.iceberg_tables(cfg))
    # the job's anomalies, mailed as the plan's are: retention deleted a slice's head after
    # the plan, a rewind found other messages in Kafka than the archive (check_held)
    late = [Anomaly(**a) for a in summary.pop("retention_lost")]
    found = [Anomaly(**a) for a in summary.setdefault("offsets_reused", [])]
    outbox = layout.run_file(cfg.archive_root, made.group, made.run_id, "announced.json")
    repeated = bool(summary.get("repeated"))
    sent = json.loads(storage.get_or_none(outbox) or b"{}") if repeated else {}
    if sent.get("events"):  # a committed run's commit again: mailed and announced once
        log.warning("run %s was committed at %s and announced; nothing changed, nothing is "
                    "mailed again", made.run_id, summary["committed_at"])
        summary["announce"] = None
    else:
        if repeated:
            log.warning("run %s was committed at %s, but its task died before announcing it: "
                        "announcing it now%s", made.run_id, summary["committed_at"],
                        "" if sent.get("mail") else " (mail too)")
        else:
            log.info("committed run %s: %d records in %d files; tokens of %s advanced",
                     made.run_id, summary["records"], summary["files"],
                     ", ".join(summary["tokens"]) or "no topic")
        if not sent.get("mail"):
            offsets = {}
            for topic in made.topics():
                token = tokens.read(made.group, topic).token
                offsets[topic] = dict(token.offsets) if token else {}
            mirror.mirror(cfg, made.group, offsets, made.run_id)  # for standard lag tools only
            alerting.mailings(cfg, made.group).committed(made, summary, late + found)
            storage.put_bytes(outbox, json.dumps({"mail": True}).encode())
        try:
            storage.put_bytes(outbox, json.dumps({"mail": True, "events": True}).encode())
        except ArchiveError as unrecorded:  # the events go out all the same
            # (failing here would keep them from going out, and a write that landed though
            # reported failed would keep every retry from sending them: never announced)
            log.warning("run %s: could not record that its Asset events go out (%s): a "
                        "later re-execution of this commit announces them again, flagged "
                        "as replacing these", made.run_id, unrecorded)
        metrics.emit(figures.of_commit(made.group, summary, made.created_at))  # with the events
        summary["announce"] = "again" if repeated else "new"
    # ranges retention deleted before they were archived: the freshness task fails on them
    summary["planned_at"] = made.created_at  # for the history's plan-to-commit time
    summary["skipped"] = [a.describe() for a in made.anomalies if a.action == "skipped"] + [
        f"{a.describe()} (after this run was planned; the topic waits for the loss to be "
        f"accepted: {a.remedy(made.group)})" for a in late]
    return summary


def finalize(group: str, run_id: str) -> dict[str, dict[str, list[str]]]:
    """After commit: `_SUCCESS` into the time partitions that can receive no more data;
    `paths` per topic, and of them the ones to replace what a reader loaded (`again`:
    final before, or announced by an earlier attempt of this run's finalize)."""
    cfg = connections.load_config()
    consumer = brokers.consumer(cfg)
    try:
        return finalizing.finalize(cfg, cfg.group(group), connections.storage(cfg.s3_conn_id),
                                   connections.token_store(cfg), consumer,
                                   int(runs.now_utc().timestamp() * 1000), run_id)
    finally:
        consumer.close()


def expire_snapshots(group: str) -> dict[str, dict[str, int]]:
    """A table group's tables: snapshots older than the group's keep_snapshots expire, and
    the files only they read are deleted; so are, once a day, files of runs that never
    committed (orphans); per table, how many of each."""
    cfg = connections.load_config()
    tables = connections.iceberg_tables(cfg)
    storage = connections.storage(cfg.s3_conn_id)
    now_ms = int(runs.now_utc().timestamp() * 1000)
    keep_ms = cfg.group(group).table.keep_snapshots_s * 1000
    done = {}
    for topic in connections.token_store(cfg).topics(group):
        for dead_letters in tables.kinds(group):
            table = tables.find(group, topic, dead_letters)
            if table is None:
                continue
            if not table_maintenance.settled(table, storage, cfg, group, topic):
                log.warning("table %s: its current snapshot is of a run not committed yet (or "
                            "given up): its maintenance waits for the next run", iceberg.name(table))
                done[iceberg.name(table)] = {"waiting": 1}
                continue
            done[iceberg.name(table)] = {
                **table_maintenance.expire(table, keep_ms, now_ms),
                "orphans": table_maintenance.remove_orphans(
                    table, storage, cfg.archive_root, group, keep_ms, now_ms)}
    return done


def compact(group: str, run_id: str) -> dict:
    """A table group's small files of older runs rewritten into large ones
    (commit.compaction); what it did."""
    cfg = connections.load_config()
    return compaction.compact(cfg, connections.storage(cfg.s3_conn_id),
                              connections.iceberg_tables(cfg), group, run_id, runs.now_utc())


def backfill(group: str, topic: str, run_id: str, from_offset: int | None = None,
             to_offset: int | None = None, since_ms: int | None = None,
             until_ms: int | None = None, source: str = "backup") -> dict:
    """Rebuild an event-time group's files of a topic in a range from the backup archive."""
    cfg = connections.load_config()
    storage = connections.storage(cfg.s3_conn_id)
    summary = backfilling.backfill(cfg, storage, group, topic, run_id,
                                   runs.now_utc().isoformat(timespec="seconds"), from_offset,
                                   to_offset, since_ms, until_ms, source)
    return {k: summary[k] for k in ("run_id", "group", "topic", "moved_aside")} | {
        "slices": len(summary["slices"]),
        "files": sum(len(s["files"]) for s in summary["slices"])}


def replay_prepare(request: replaying.Request, dry_run: bool = False,
                   cfg: config_module.Config | None = None) -> str | None:
    """Check a replay against the archive and its target and write its plan (or find the
    one it wrote before: the replay then resumes); its URL, None for a dry run (the plan
    is printed)."""
    cfg = cfg or connections.load_config()
    storage = connections.storage(cfg.s3_conn_id)
    consumer = brokers.consumer(cfg, request.bootstrap)
    try:
        partitions = replaying.target_partitions(consumer, request.to_topic)
    finally:
        consumer.close()
    url, plan = replaying.prepare(cfg, storage, request, partitions, dry_run)
    log.info("%s", replaying.describe(plan))
    if dry_run:
        print(json.dumps(plan, indent=1))
        return None
    return url


def audit_ingest(run_id: str, cfg: config_module.Config | None = None) -> int:
    """Copy new monitoring events into the archive; how many. cfg: the CLI's --config
    (default: the environment's config, as in Airflow)."""
    cfg = cfg or connections.load_config()
    storage = connections.storage(cfg.s3_conn_id)
    tokens = connections.token_store(cfg)
    consumer = brokers.consumer(cfg)
    try:
        now = runs.now_utc().isoformat(timespec="seconds")
        copied = gather.ingest(cfg, storage, tokens, consumer, run_id, now)
    finally:
        consumer.close()
    log.info("copied %d monitoring events from %s", copied, cfg.audit.topic)
    return copied


def audit_reconcile(group: str, run_id: str, since_ms: int | None = None,
                    until_ms: int | None = None, rescan: bool = False,
                    track: Track = untracked, cfg: config_module.Config | None = None) -> dict:
    """Fold what was committed and reported since the last audit into the group's
    checkpoint, judge, write the reports. The outcome holds `new` (mismatches not mailed
    nor acknowledged yet: the ones that fail the task), `open` and `acknowledged` (how
    many), `mismatches` (how many new) and a readable `summary` of the new ones."""
    cfg = cfg or connections.load_config()
    storage = connections.storage(cfg.s3_conn_id)
    tokens = connections.token_store(cfg)
    now = runs.now_utc()
    consumer = brokers.consumer(cfg)
    try:
        through = finalizing.archived_through(cfg, cfg.group(group), tokens, consumer,
                                          int(now.timestamp() * 1000))
    finally:
        consumer.close()
    # a plan in flight may have moved tokens its commit has not put in the catalog yet
    # (the audit counts the catalog's rows): its topics are not judged until it commits
    waiting = inflight.held_topics(storage, cfg.archive_root, group)
    through = {t: None if waiting is None or t in waiting else ms for t, ms in through.items()}
    at = now.isoformat(timespec="seconds")
    done = incremental.audit(cfg, storage, group, run_id, at, through, rescan, track)
    inside = lambda start: ((since_ms is None or start >= since_ms)  # noqa: E731
                            and (until_ms is None or start < until_ms))
    every = [v for v in done.every if inside(v.window_start_ms)]
    judged = [v for v in done.judged if inside(v.window_start_ms)]
    alarms = [a for a in done.alarms if inside(a.window_start_ms)]
    totals = reconcile.summarize(every)
    header = {"group": group, "run_id": run_id, "audited_at": at,
              "mode": "rescan" if rescan else "incremental", "since_ms": since_ms,
              "until_ms": until_ms, "grace_s": cfg.audit.grace_s, "windows": len(every),
              "judged_now": len(judged), "runs_counted_now": done.new_runs,
              "recounted_after_rewind_or_backfill": done.recounted,
              "resolved_now": len(done.resolved),
              "unreadable_monitoring_events": len(done.bad_events)}
    page = reporting.to_html(header, judged, alarms, totals, chart=every)
    for name, data in (("report.json", reporting.to_json(header, judged, alarms, totals)),
                       ("report.csv", reporting.to_csv(judged)), ("report.html", page)):
        storage.put_bytes(layout.audit_report(cfg.archive_root, group, run_id, name), data)
    storage.put_bytes(layout.audit_report(cfg.archive_root, group, None, "index.html"), page)
    for problem in done.bad_events:
        log.warning("%s", problem)
    for alarm in done.resolved:
        log.info("resolved (now OK): %s", reporting.describe(alarm))
    new = [a for a in alarms if a.state == "new"]
    report = layout.audit_report(cfg.archive_root, group, run_id, "report.html")
    log.info("audit %s: %s; %d new, %d unresolved mismatches; report %s", group, totals,
             len(new), len(alarms), report)
    for alarm in alarms:
        log.warning("%s", reporting.describe(alarm))
    unresolved = sum(a.state != "acknowledged" for a in alarms)
    metrics.emit(figures.of_audit(group, unresolved))
    return {"group": group, "run_id": run_id, "totals": totals, "report": report,
            "new": [asdict(a) for a in new], "mismatches": len(new),
            "open": unresolved,
            "acknowledged": sum(a.state == "acknowledged" for a in alarms),
            "summary": reporting.mismatch_summary(group, new)}


def audit_alert(outcome: dict, link: str, context=None) -> None:
    """Mail the new mismatches of an audit once: where their messages are, what to run,
    links that open in a browser. Recorded as mailed in the checkpoint first, so a kill
    after the mail cannot mail the same loss again (a failed send takes the record back:
    the next audit mails them)."""
    cfg = connections.load_config()
    storage = connections.storage(cfg.s3_conn_id)
    group = outcome["group"]
    new = [Alarm(**a) for a in outcome["new"]]
    located = incremental.locate(storage, cfg, group, new[:alerts.MAX_ROWS])
    holes = incremental.holes(storage, cfg, group, new[:alerts.MAX_ROWS], located)
    report = storage.browser_link(outcome["report"], REPORT_LINK_S)
    message = alerts.audit_mismatch(group, new, located, link, report, REPORT_LINK_S,
                                    outcome["open"] - len(new), outcome["acknowledged"], holes)
    keys = [a.key for a in new]
    incremental.mark_mailed(storage, cfg, group, keys, runs.now_utc().isoformat(timespec="seconds"))
    try:
        alerting.send(cfg.alerts, message, context)
    except Exception:
        incremental.mark_mailed(storage, cfg, group, keys, None)
        raise


def preflight(run_id: str) -> dict:
    cfg = connections.load_config()
    return preflight_check.run(cfg, connections.storage(cfg.s3_conn_id), run_id,
                               connections.token_store(cfg),
                               lambda: connections.check_smtp(cfg.alerts.smtp_conn_id),
                               lambda conn_id: connections.check_spark_connect(cfg, conn_id))
