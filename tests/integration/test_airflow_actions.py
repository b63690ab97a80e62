"""Airflow's own actions on committed and running runs, through the real REST API as the
UI sends them (issue 41 §3), for a file group and a table group: Clear the commit task of
a committed run after a newer one committed, Clear a whole committed run, two run ids
that differ only in a character the run folder's name replaces, a running run marked
failed, an older copy of a token put back, a topic named like a dead-letter table; then
more runs. No run stuck, no mail blaming a wrong cause, each commit's Asset event once,
and the archive read by Hadoop's reader (files) or Spark's Iceberg reader (tables): every
message Kafka holds, each once; `verify --full` finds no error.

The protocol simulation (tests/support/sim) explores these actions' interleavings with
kills; this is the same on the real scheduler, once per action."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import msgpack
import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic
from test_airflow_rest import run_to_end
from test_assets import asset_events
from test_backup_archive import consumed
from test_iceberg_tables import ICEBERG_JARS
from test_rewind_cli import CLI

from kafka_archive import spark
from kafka_archive.airflow import connections
from kafka_archive.formats.sequencefile import BYTES_WRITABLE
from tests.support import localservices

PARTITIONS = 2
GROUPS = {"backup": "kafka_archive_backup", "tables": "kafka_archive_tables"}


class Actions:
    """One group's DAG on the stack, and its topics' messages."""

    def __init__(self, stack, kafka: str, group: str, topics: list[str]):
        self.stack, self.kafka, self.group, self.dag = stack, kafka, group, GROUPS[group]
        self.topics, self.produced = topics, 0
        admin = KafkaAdminClient(bootstrap_servers=kafka)
        admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in topics])
        admin.close()
        stack.unpause(self.dag)

    def produce(self, count: int) -> None:
        producer = KafkaProducer(bootstrap_servers=self.kafka, acks="all")
        for i in range(count):
            for topic in self.topics:
                producer.send(topic, key=f"k{self.produced + i}".encode(),
                              value=f"{topic} message {self.produced + i}".encode(),
                              partition=i % PARTITIONS)
        producer.flush()
        producer.close()
        self.produced += count

    def run(self, run_id: str | None = None) -> str:
        return run_to_end(self.stack, {"topics": self.topics}, run_id, dag=self.dag)

    def clear(self, run_id: str, task_ids: list[str] | None = None) -> None:
        """The UI's Clear: of some tasks of the run, or (task_ids None) of the whole run."""
        if task_ids is None:
            r = self.stack.api.post(f"/api/v2/dags/{self.dag}/dagRuns/{run_id}/clear",
                                    json={"dry_run": False})
        else:
            r = self.stack.api.post(f"/api/v2/dags/{self.dag}/clearTaskInstances", json={
                "dry_run": False, "dag_run_id": run_id, "task_ids": task_ids,
                "only_failed": False, "reset_dag_runs": True})
        assert r.status_code == 200, r.text
        self.wait_until_finished(run_id)

    def wait_until_finished(self, run_id: str) -> dict:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:  # a cleared run is queued again first
            states = self.stack.task_states(self.dag, run_id)
            if states and all(s in ("success", "failed", "upstream_failed", "skipped")
                              for s in states.values()):
                return self.stack.wait_for_run(self.dag, run_id)
            time.sleep(1)
        pytest.fail(f"run {run_id} not finished: {self.stack.task_states(self.dag, run_id)}")

    def log(self, run_id: str, task: str, attempt: int) -> str:
        """The attempt's whole log, with each line's fields (an error's detail too)."""
        r = self.stack.api.get(f"/api/v2/dags/{self.dag}/dagRuns/{run_id}/taskInstances/"
                               f"{task}/logs/{attempt}", headers={"Accept": "application/json"})
        assert r.status_code == 200, r.text
        return json.dumps(r.json()["content"])

    def events(self, run_id: str) -> Counter:
        return Counter(e["name"] for topic in self.topics
                       for e in asset_events(self.stack, topic, run_id, self.dag,
                                             f"kafka_archive/{self.group}/{{topic}}"))


def test_airflow_actions_on_committed_and_running_runs_lose_and_repeat_nothing(
        airflow_stack, airflow_env, kafka, s3, smtp_maildir, sc, unique, tmp_path, monkeypatch):
    """Both groups at once, each on its own DAG and topics: the scheduler runs their tasks
    side by side, and each group's sequence waits on its own runs only."""
    for name, value in airflow_env.items():  # the S3 connection, as the tasks find it
        monkeypatch.setenv(name, value)
    with ThreadPoolExecutor(len(GROUPS)) as pool:
        acting = [pool.submit(act_and_check, group, airflow_stack, airflow_env, kafka, s3,
                              smtp_maildir, sc, unique, tmp_path) for group in sorted(GROUPS)]
    for done in acting:
        done.result()  # a group's failure, as raised


def act_and_check(group, airflow_stack, airflow_env, kafka, s3, smtp_maildir, sc, unique,
                  tmp_path) -> None:
    topic = f"act{group[0]}-{unique}"
    actions = Actions(airflow_stack, kafka, group, [topic, f"{topic}_dlq"])
    cfg = airflow_stack.config()
    token_file = Path(cfg.token_root) / group / f"{topic}.token"
    committed: list[str] = []
    since = time.time()

    actions.produce(6)
    committed.append(actions.run())
    older_token = token_file.read_bytes()
    actions.produce(6)
    committed.append(actions.run())

    # Clear of the first run's commit, after the second committed: its stored outcome
    actions.clear(committed[0], ["commit"])
    assert airflow_stack.task_states(actions.dag, committed[0])["commit"] == "success"
    assert "nothing changed, nothing is mailed again" in actions.log(committed[0], "commit", 2)

    # Clear of the whole second run: every task finds its outcome stored
    actions.clear(committed[1])
    states = airflow_stack.task_states(actions.dag, committed[1])
    assert [states[t] for t in ("plan", "archive", "commit")] == ["success"] * 3, states

    # two run ids, one run folder: the second is refused, naming both; the group goes on
    actions.produce(4)
    committed.append(actions.run(f"manual__{unique}:1"))
    refused = airflow_stack.trigger(actions.dag, {"topics": actions.topics},
                                    f"manual__{unique}_1").json()["dag_run_id"]
    assert airflow_stack.wait_for_run(actions.dag, refused)["state"] == "failed"
    assert f"run 'manual__{unique}:1' planned there first" in actions.log(refused, "plan", 1)

    # a running run marked failed while its job runs: the next run finishes its plan
    actions.produce(4)
    failed = airflow_stack.trigger(actions.dag, {"topics": actions.topics}).json()["dag_run_id"]
    deadline = time.monotonic() + 300
    while airflow_stack.task_states(actions.dag, failed).get("archive") != "running":
        assert time.monotonic() < deadline, airflow_stack.task_states(actions.dag, failed)
        time.sleep(0.2)
    r = airflow_stack.api.patch(f"/api/v2/dags/{actions.dag}/dagRuns/{failed}",
                                json={"state": "failed"})
    assert r.status_code == 200, r.text
    assert actions.wait_until_finished(failed)["state"] == "failed"
    committed.append(actions.run())

    # an older copy of a token put back (a person's restore): archived again from there
    token_file.write_bytes(older_token)
    actions.produce(3)
    committed.append(actions.run())
    actions.produce(3)
    committed.append(actions.run())

    # each commit announced once, never again by the Clears
    for run_id in committed:
        assert actions.events(run_id) == {f"kafka_archive/{group}/{t}": 1
                                          for t in actions.topics}, run_id
    # no mail blamed a hand-removed mark, a lost race or a stray manifest
    for mail in mails_naming(smtp_maildir, unique, since):
        for wrong in ("_inflight.json", "another run committed", "ManifestMismatch",
                      "TokenConflict"):
            assert wrong not in mail, mail[:3000]
    # the archive: what Kafka holds, each message once, and verify agrees
    expected = Counter((t, p, o) for t, p, o, *_ in consumed(kafka, actions.topics))
    assert sum(expected.values()) == 2 * actions.produced
    assert (hadoop_reads if group == "backup" else iceberg_reads)(
        actions, cfg, s3, sc, tmp_path) == expected
    for t in actions.topics:
        done = subprocess.run([CLI, "verify", "--group", group, "--topic", t, "--full"],
                              env={**airflow_env, "KAFKA_ARCHIVE_CONFIG": str(
                                  airflow_stack.config_file)},
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0 and "0 errors" in done.stdout, done.stdout[-3000:] + (
            done.stderr[-2000:])


def mails_naming(maildir: Path, text: str, since: float) -> list[str]:
    """Subject and body of each mail that arrived after `since` and names `text`."""
    import email
    from email import policy

    found = []
    for path in sorted(maildir.glob("*.eml")):
        if int(path.name.split("-")[0]) / 1e9 < since:
            continue
        message = email.message_from_bytes(path.read_bytes(), policy=policy.default)
        body = message.get_body(("plain", "html"))
        whole = f"{message['Subject']}\n{body.get_content() if body else ''}"
        if text in whole:
            found.append(whole)
    return found


def hadoop_reads(actions: Actions, cfg, s3, sc, tmp_path: Path) -> Counter:
    """(topic, partition, offset) of every message in the topics' current folders, read
    by Hadoop's own SequenceFile reader."""
    found: Counter = Counter()
    prefix = cfg.archive_root.removeprefix(f"s3://{s3.bucket}/")
    for topic in actions.topics:
        listing = s3.client.get_paginator("list_objects_v2").paginate(
            Bucket=s3.bucket, Prefix=f"{prefix}/{actions.group}/{topic}/")
        for page in listing:
            for i, obj in enumerate(page.get("Contents", [])):
                local = tmp_path / f"{topic}-{i}.seq"
                local.write_bytes(s3.client.get_object(Bucket=s3.bucket,
                                                       Key=obj["Key"])["Body"].read())
                partition = int(obj["Key"].rsplit("/", 1)[-1].split("_")[1])
                for key, _ in sc.sequenceFile(str(local), BYTES_WRITABLE,
                                              BYTES_WRITABLE).collect():
                    offset = msgpack.unpackb(bytes(key), strict_map_key=False)[1]
                    found[(topic, partition, offset)] += 1
    return found


def iceberg_reads(actions: Actions, cfg, s3, sc, tmp_path: Path) -> Counter:
    """(topic, partition, offset) of every row of the topics' tables, read by Spark SQL
    through Iceberg's own runtime (JdbcCatalog on the stack's SQLite catalog)."""
    uri = cfg.iceberg_catalogs["local"]["uri"]
    namespace = cfg.group(actions.group).table.namespace
    out = tmp_path / "spark-read.json"
    result = subprocess.run(
        [str(spark.spark_home() / "bin" / "spark-submit"), "--master", "local[1]",
         "--conf", "spark.ui.enabled=false",
         "--driver-java-options", " ".join(localservices.jvm_trust_options()),
         "--jars", ",".join(str(j) for j in sorted(ICEBERG_JARS.glob("*.jar"))),
         str(Path(__file__).parent / "jobs" / "read_iceberg_table.py"),
         "jdbc:sqlite:" + uri.removeprefix("sqlite:///"), cfg.archive_root,
         localservices.s3_endpoint(localservices.local_env()), namespace, str(out),
         *actions.topics],
        env={**os.environ, **spark.submit_env(),
             **connections.s3_environment("kafka_archive_s3")},
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, (result.stdout + result.stderr)[-5000:]
    return Counter((topic, p, o) for topic, read in json.loads(out.read_text()).items()
                   for p, o, _ in read["rows"])
