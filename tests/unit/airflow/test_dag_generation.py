"""The DAG folder from config alone: Airflow's own DagBag loads dags/ over three configs
and finds exactly the DAGs each asks for, with no import error; a default names no group."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from kafka_archive import config

BASE = "kafka: {bootstrap_servers: 'b:9092'}\narchive_root: s3://bucket/archive\n"
EVENT_TIME = "{layout: {kind: event_time}, parser: {kind: json, field: ts}}"
CONFIGS = {
    "backup only": (BASE + "groups: {backup: {}}\n",
                    ["kafka_archive_backup", "kafka_archive_replay"]),
    "partitioned only": (BASE + f"groups: {{partitioned: {EVENT_TIME}}}\n",
                         ["kafka_archive_backfill", "kafka_archive_partitioned"]),
    "five groups": (BASE + "audit: {groups: [raw, clicks]}\ngroups:\n"
                    "  raw: {}\n  clicks: {}\n  payments: {topics: {include: ['pay.*']}}\n"
                    f"  by_hour: {EVENT_TIME}\n  by_day: {EVENT_TIME}\n",
                    ["kafka_archive_audit", "kafka_archive_backfill", "kafka_archive_by_day",
                     "kafka_archive_by_hour", "kafka_archive_clicks", "kafka_archive_payments",
                     "kafka_archive_raw", "kafka_archive_replay"]),
}


def dag_bag(tmp_path, text: str) -> dict:
    """DAG ids and import errors of the repo's dags/ folder over the config text."""
    path = tmp_path / "kafka-archive.yaml"
    path.write_text(text)
    code = textwrap.dedent(f"""
        import json
        from airflow.dag_processing.dagbag import DagBag
        bag = DagBag(dag_folder={str(config.REPO / "dags")!r})
        print("RESULT:", json.dumps({{"ids": sorted(bag.dag_ids),
                                      "after_commit": {{i: sorted(d.get_task("commit").downstream_task_ids)
                                                       for i, d in bag.dags.items() if "commit" in d.task_ids}},
                                      "connect": {{i: d.get_task("archive").connect_conn_id
                                                  for i, d in bag.dags.items() if "archive" in d.task_ids
                                                  and hasattr(d.get_task("archive"), "connect_conn_id")}},
                                      "errors": {{k: v[-300:] for k, v in bag.import_errors.items()}}}}))
    """)
    env = {**os.environ, "KAFKA_ARCHIVE_CONFIG": str(path), "AIRFLOW_HOME": str(tmp_path / "af")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=180)
    [line] = [x for x in out.stdout.splitlines() if x.startswith("RESULT: ")] or [
        pytest.fail(out.stdout[-2000:] + out.stderr[-3000:])]
    return json.loads(line[len("RESULT: "):])


def test_a_table_groups_dag_expires_snapshots_and_compacts_after_commit(tmp_path):
    found = dag_bag(tmp_path, BASE + "groups:\n  raw: {}\n"
                              "  tables: {format: {kind: parquet}, table: {}}\n")
    assert found["errors"] == {}
    assert found["after_commit"]["kafka_archive_tables"] == [
        "compact", "expire_snapshots", "freshness", "held_topics"]
    assert found["after_commit"]["kafka_archive_raw"] == ["freshness", "held_topics"]


def test_a_group_with_spark_connect_runs_its_job_over_that_connection(tmp_path):
    found = dag_bag(tmp_path, BASE + "groups:\n  raw: {}\n"
                              "  remote: {spark_connect: shared_connect}\n")
    assert found["errors"] == {}
    assert found["connect"]["kafka_archive_remote"] == "shared_connect"
    assert found["connect"]["kafka_archive_raw"] is None  # spark-submit


@pytest.mark.parametrize("name", CONFIGS)
def test_the_dag_folder_holds_exactly_the_dags_the_config_asks_for(tmp_path, name):
    text, expected = CONFIGS[name]
    found = dag_bag(tmp_path, text)
    assert found["errors"] == {}
    assert found["ids"] == sorted(expected + ["kafka_archive_preflight"])


def test_a_config_without_an_audit_section_audits_nothing_and_is_accepted(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text(BASE + f"groups: {{partitioned: {EVENT_TIME}}}\n")
    assert config.load(path).audit.groups == ()


def test_one_groups_config_problem_stays_with_that_group(tmp_path):
    """A typo in one group takes only that group's DAG: it stays listed (a trigger is no
    404) with a task that fails naming the key; the other groups' DAGs are whole."""
    found = dag_bag(tmp_path, BASE + "groups:\n  raw: {}\n"
                              "  clicks: {policy: {max_recrods: 5}}\n  payments: {}\n")
    assert found["errors"] == {}
    assert found["ids"] == ["kafka_archive_clicks", "kafka_archive_payments",
                            "kafka_archive_preflight", "kafka_archive_raw", "kafka_archive_replay"]
    assert found["after_commit"].keys() == {"kafka_archive_payments", "kafka_archive_raw"}


def test_the_config_beside_the_dag_file_needs_no_variable(tmp_path):
    """A deployment's two-line DAG file, its config in the DAGs folder and nothing set."""
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "archive.py").write_text("from kafka_archive.airflow import dags_from_config\n"
                                     "globals().update(dags_from_config())\n")
    (dags / "kafka-archive.yaml").write_text(BASE + "groups: {billing: {}}\n")
    code = ("from airflow.dag_processing.dagbag import DagBag\n"
            f"bag = DagBag(dag_folder={str(dags)!r})\n"
            "print('RESULT:', sorted(bag.dag_ids), bag.import_errors)\n")
    env = {k: v for k, v in os.environ.items() if k != "KAFKA_ARCHIVE_CONFIG"}
    env |= {"AIRFLOW_HOME": str(tmp_path / "af"), "AIRFLOW__CORE__DAGS_FOLDER": str(dags)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=180)
    assert "RESULT: ['kafka_archive_billing', 'kafka_archive_preflight', 'kafka_archive_replay'] {}" \
        in out.stdout, \
        out.stdout[-2000:] + out.stderr[-2000:]
