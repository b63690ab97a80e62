"""Every DAG of kafka-archive, built from the config: `dags_from_config`, which a
deployment's DAG file calls, and per group its archive DAG (plan >> archive >> commit >>
freshness, and finalize or a table group's expire_snapshots after commit), the audit DAG,
and the manual backfill and replay DAGs."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pendulum
from airflow.sdk import DAG, Param, get_current_context, task
from airflow.sdk.exceptions import AirflowFailException

from kafka_archive import config as config_module
from kafka_archive.airflow import alerting, assets, connections, lazy_module
from kafka_archive.airflow.operators import ArchiveOperator, CommitOperator, ReplayOperator
from kafka_archive.airflow import params as trigger

# the task bodies and what they import (Kafka's clients, the commit protocol, the audit)
# are a task's cost, not every DAG file parse's
tasks = lazy_module("kafka_archive.airflow.tasks")
replaying = lazy_module("kafka_archive.tools.replay")


def dags_from_config(path: str | Path | None = None) -> dict[str, DAG]:
    """The DAGs of the config (`path`, else connections.config_path's), for a DAG file of
    two lines:

        from kafka_archive.airflow import dags_from_config
        globals().update(dags_from_config())

    A group with a problem of its own gets a DAG whose one task fails with that problem;
    the other groups' DAGs are unaffected. A path given here becomes this process's
    KAFKA_ARCHIVE_CONFIG, so the tasks (Airflow parses the file again in a task's process)
    read the same config."""
    if path is not None:
        os.environ["KAFKA_ARCHIVE_CONFIG"] = str(path)
    cfg = config_module.load(path or connections.config_path(), groups_apart=True)
    return all_dags(cfg) | {dag.dag_id: dag for dag in map(broken_dag, cfg.broken_groups.items())}


def broken_dag(group_error: tuple[str, str]) -> DAG:
    """The DAG of a group whose config has a problem: it stays listed (a trigger or the
    schedule does not 404) and its one task fails with the problem, file and key."""
    group, error = group_error
    with DAG(dag_id=f"kafka_archive_{group}", schedule=None, catchup=False,
             start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
             description=f"Config problem: {error.splitlines()[0]}",
             doc_md=f"**This group's config has a problem; fix it:**\n\n```\n{error}\n```",
             tags=["kafka-archive", group, "config-error"]) as dag:

        @task(retries=0)
        def config_problem() -> None:
            raise AirflowFailException(error)

        config_problem()
    return dag


def all_dags(cfg: config_module.Config | None = None) -> dict[str, DAG]:
    """DAG id -> DAG of every DAG the config asks for: the preflight check, one archive
    DAG per group; the audit DAG when audit.groups names a group; backfill when a group is laid out by event
    time, replay when one is laid out by partition (each serves its groups by param)."""
    cfg = cfg or config_module.load()
    made = [preflight_dag(), *(archive_dag(name, cfg) for name in cfg.groups)]
    kinds = {g.layout.kind for g in cfg.groups.values()}
    made += [audit_dag(cfg)] if cfg.audit.groups else []
    made += [backfill_dag(cfg)] if "event_time" in kinds else []
    made += [replay_dag(cfg)] if "partition" in kinds else []
    return {dag.dag_id: dag for dag in made}


def preflight_dag() -> DAG:
    """Checks that Kafka, the archive root, the token store and the mail server are
    reachable; trigger it after any change of connections or config."""
    with DAG(dag_id="kafka_archive_preflight", schedule=None, catchup=False,
             start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), tags=["kafka-archive"],
             doc_md=preflight_dag.__doc__) as dag:

        @task
        def check(dag_run=None) -> dict:
            return tasks.preflight(dag_run.run_id)

        check()
    return dag


def archive_dag(group_name: str, cfg: config_module.Config | None = None) -> DAG:
    cfg = cfg or config_module.load()
    group = cfg.group(group_name)
    with DAG(
        dag_id=f"kafka_archive_{group.name}",
        description=f"Archive Kafka topics of group {group.name} to {cfg.archive_root}",
        schedule=group.schedule,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
        max_active_runs=1,  # plans must not overlap: one in flight at a time
        # retries for transient failures only: a terminal one fails its task at once
        default_args={"retries": 2, "retry_delay": timedelta(minutes=1),
                      "on_failure_callback": alerting.on_task_failure},
        deadline=alerting.deadline_alert(cfg, group),
        # a run failed by a task whose own callback never ran (killed) is mailed here
        on_failure_callback=alerting.on_run_failure,
        params={name: Param(default, **schema)  # validated on trigger; the UI's form
                for name, (default, schema) in trigger.SCHEMAS.items()},
        tags=["kafka-archive", group.name],
        doc_md=f"Lag, last runs and audit of group `{group.name}`: the DAG's **Kafka archive** "
               f"tab, or [its page]({alerting.page_link(f'kafka_archive_{group.name}')}).",
    ) as dag:

        @task.short_circuit  # retried like the others: it resumes its own plan
        @alerting.fails_at_once_when_terminal
        def plan(dag_run=None, params=None) -> str | None:
            return tasks.plan(group.name, dag_run.run_id, **trigger.plan_arguments(params),
                              accepted_by=_who(dag_run))

        plan_url = plan()
        archive = ArchiveOperator(task_id="archive", plan_url=plan_url, config_path=str(cfg.path),
                                  s3_conn_id=cfg.s3_conn_id, conn_id="kafka_archive_spark",
                                  connect_conn_id=group.spark_connect)
        commit = CommitOperator(task_id="commit", group=group.name, plan_url=plan_url,
                                config_path=str(cfg.path), s3_conn_id=cfg.s3_conn_id)
        committed = commit.output
        archive >> commit

        # fails (after its mail) when a topic is past its SLA or lost data to retention,
        # so the run shows red; the data this run archived is committed either way
        @task(retries=0, on_failure_callback=None)
        def freshness(summary: dict, dag_run=None, params=None) -> dict:
            lags = alerting.check_freshness(group.name, dag_run.run_id, summary,
                                            topics=params["topics"])  # a run's subset, or all
            if problems := alerting.not_green(lags, summary):
                raise AirflowFailException(problems)
            return lags

        freshness(committed)

        @task(retries=0)  # topics held out for an anomaly: mailed when found, failed here
        def held_topics(plan_url: str, summary: dict) -> None:
            tasks.check_held(plan_url, summary)

        held_topics(plan_url, committed)
        if group.layout.kind == "event_time" and not group.parsed_table:
            # a table's hours need no `_SUCCESS`: a reader sees each run's snapshot whole
            @task(outlets=[assets.alias(group.name)])  # an event per partition finalized
            @alerting.fails_at_once_when_terminal
            def finalize(summary: dict, dag_run=None) -> dict:
                finalized = tasks.finalize(group.name, dag_run.run_id)
                events = assets.finalize_events(cfg, group.name, dag_run.run_id,
                                                finalized["paths"], finalized["again"])
                assets.add(get_current_context()["outlet_events"], group.name, events)
                return finalized

            finalize(committed)
        if group.table is not None:
            @task
            @alerting.fails_at_once_when_terminal
            def expire_snapshots(summary: dict) -> dict:
                return tasks.expire_snapshots(group.name)

            expire_snapshots(committed)

            # also when the run failed: a plan gives way to a killed compaction's lease
            # until a compact task finishes that compaction's work
            @task(trigger_rule="all_done")
            @alerting.fails_at_once_when_terminal
            def compact(dag_run=None) -> dict:
                return tasks.compact(group.name, dag_run.run_id)

            committed >> compact()
    return dag


def _who(dag_run) -> str:
    """Who accepts a loss through a trigger: the triggering user, as Airflow knows them."""
    user = getattr(dag_run, "triggering_user_name", None)
    return f"{user or 'unknown user'} (Airflow run {dag_run.run_id})"


def audit_dag(cfg: config_module.Config | None = None) -> DAG:
    """Reconcile producers' counts with what each audited group archived."""
    cfg = cfg or config_module.load()
    when = {"anyOf": [{"type": "null"}, *trigger.TIME["anyOf"]]}
    with DAG(
        dag_id="kafka_archive_audit",
        description=f"Reconcile {cfg.audit.topic} counts with groups {', '.join(cfg.audit.groups)}",
        schedule=cfg.audit.schedule,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
        max_active_runs=1,  # the monitoring token moves by compare-and-swap: one reader
        default_args={"retries": 1, "retry_delay": timedelta(minutes=1)},
        params={"since": Param(None, **when, description="Only windows starting at or after "
                                                         "this time (UTC; empty: all)"),
                "until": Param(None, **when, description="Only windows starting before this time"),
                "rescan": Param(False, type="boolean",
                                description="Count the archived files themselves instead of "
                                            "trusting the manifests")},
        tags=["kafka-archive", "audit"],
    ) as dag:

        @task
        def ingest(dag_run=None) -> int:
            return tasks.audit_ingest(dag_run.run_id)

        @task(retries=0)  # a mismatch is a finding, not a transient failure
        def reconcile(group: str, dag_run=None, params=None) -> dict:
            since, until = (None if params[k] is None else trigger.epoch_ms(params[k])
                            for k in ("since", "until"))
            outcome = tasks.audit_reconcile(group, dag_run.run_id, since, until, params["rescan"])
            if outcome["new"]:  # mailed once; open or acknowledged ones leave the task green
                tasks.audit_alert(outcome, alerting.link_for(dag_run.dag_id, dag_run.run_id),
                                  get_current_context())
                raise AirflowFailException(outcome["summary"])
            return outcome

        ingest() >> [reconcile.override(task_id=f"reconcile_{g}")(g) for g in cfg.audit.groups]
    return dag


def manual_dag(dag_id: str, description: str, tag: str, params: dict) -> DAG:
    """A DAG that only a person triggers (no schedule), one run at a time, no retries."""
    return DAG(dag_id=dag_id, description=description, schedule=None,
               start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False,
               max_active_runs=1, default_args={"retries": 0}, params=params,
               tags=["kafka-archive", tag])


def range_params(what: str) -> dict[str, Param]:
    """An offset range (every partition) or a Kafka-timestamp range of `what`."""
    offset = {"type": ["null", "integer"], "minimum": 0}
    when = {"anyOf": [{"type": "null"}, *trigger.TIME["anyOf"]]}
    return {"from_offset": Param(None, **offset, description="first offset (all partitions)"),
            "to_offset": Param(None, **offset, description="end offset, exclusive"),
            "since": Param(None, **when, description=f"or: {what} at or after this Kafka "
                                                     "timestamp"),
            "until": Param(None, **when, description="... and before this one")}


def time_range(params: dict) -> tuple[int | None, int | None]:
    """since and until of a manual run's params, as epoch ms."""
    return tuple(None if params[k] is None else trigger.epoch_ms(params[k])
                 for k in ("since", "until"))


def backfill_dag(cfg: config_module.Config | None = None) -> DAG:
    """Manually triggered: rebuild an event-time group's files of a topic from the backup."""
    cfg = cfg or config_module.load()
    targets = [g.name for g in cfg.groups.values() if g.layout.kind == "event_time"]
    sources = [g.name for g in cfg.groups.values() if g.layout.kind == "partition"] or ["backup"]
    with manual_dag("kafka_archive_backfill",
                    "Rebuild partitioned output of a topic from the backup archive", "backfill", {
                        "group": Param(targets[0], enum=targets, description="event-time group"),
                        "topic": Param("", type="string", minLength=1,
                                       description="topic to rebuild"),
                        "source": Param(sources[0], enum=sources,
                                        description="the group laid out by partition to read"),
                        **range_params("slices with a message")}) as dag:

        @task
        def backfill(dag_run=None, params=None) -> dict:
            since, until = time_range(params)
            return tasks.backfill(params["group"], params["topic"], dag_run.run_id,
                                  params["from_offset"], params["to_offset"], since, until,
                                  params["source"])

        backfill()
    return dag


def replay_dag(cfg: config_module.Config | None = None) -> DAG:
    """Manually triggered: produce archived messages of a range back into a Kafka topic."""
    cfg = cfg or config_module.load()
    sources = [g.name for g in cfg.groups.values() if g.layout.kind == "partition"]
    # one run at a time: two runs of one replay would both write its target; triggering
    # the same params again resumes it
    with manual_dag("kafka_archive_replay",
                    "Replay archived messages of a range into a Kafka topic", "replay", {
            "group": Param(sources[0], enum=sources, description="the group to read"),
            "topic": Param("", type="string", minLength=1, description="the archived topic"),
            "partition": Param(None, type=["null", "integer"], minimum=0,
                               description="only this partition (empty: all)"),
            **range_params("messages"),
            "to_topic": Param("", type="string", minLength=1,
                              description="the target topic (it must exist)"),
            "bootstrap": Param(None, type=["null", "string"], minLength=1,
                               description="the target cluster (empty: the archive's)"),
            "hash_by_key": Param(False, type="boolean",
                                 description="let the producer choose partitions by key"),
            "allow_archived_target": Param(False, type="boolean",
                                           description="allow a target the archive archives"),
            "max_rate": Param(None, type=["null", "integer"], minimum=1,
                              description="messages per second per source partition"),
            "dry_run": Param(False, type="boolean",
                             description="only check and print the plan")}) as dag:

        @task.short_circuit
        def prepare(params=None) -> str | None:
            return tasks.replay_prepare(replay_request(params), params["dry_run"])

        replay_url = prepare()
        ReplayOperator(task_id="replay", plan_url=replay_url, config_path=str(cfg.path),
                       s3_conn_id=cfg.s3_conn_id, conn_id="kafka_archive_spark")
    return dag


def replay_request(params: dict):
    since, until = time_range(params)
    return replaying.Request(
        group=params["group"], topic=params["topic"], to_topic=params["to_topic"],
        partition=params["partition"], from_offset=params["from_offset"],
        to_offset=params["to_offset"], since_ms=since, until_ms=until,
        bootstrap=params["bootstrap"], hash_by_key=params["hash_by_key"],
        allow_archived_target=params["allow_archived_target"])
