"""The archive DAG of one group, built from config: plan >> archive >> commit."""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG, Param, task

from kafka_archive import config as config_module, tasks
from kafka_archive.operators import ArchiveOperator


def archive_dag(group_name: str) -> DAG:
    cfg = config_module.load()
    group = cfg.group(group_name)
    with DAG(
        dag_id=f"kafka_archive_{group.name}",
        description=f"Archive Kafka topics of group {group.name} to {cfg.archive_root}",
        schedule=group.schedule,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
        max_active_runs=1,  # plans must not overlap: one in flight at a time
        default_args={"retries": 2, "retry_delay": timedelta(minutes=1)},
        params={"dry_run": Param(False, type="boolean",
                                 description="Only compute and print the plan")},
        tags=["kafka-archive", group.name],
    ) as dag:

        @task.short_circuit(retries=0)
        def plan(dag_run=None, params=None) -> str | None:
            return tasks.plan(group.name, dag_run.run_id, dry_run=params["dry_run"])

        @task
        def commit(plan_url: str) -> dict:
            return tasks.commit(plan_url)

        plan_url = plan()
        archive = ArchiveOperator(task_id="archive", plan_url=plan_url, config_path=str(cfg.path),
                                  s3_conn_id=cfg.s3_conn_id, conn_id="kafka_archive_spark")
        archive >> commit(plan_url)
    return dag
