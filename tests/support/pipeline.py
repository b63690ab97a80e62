"""Drives the real backup pipeline for integration tests: a config of its own (unique
archive root and topics), the DAG through `airflow dags test`, or its three steps one by
one so a test can stop between them, as a crash would."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Iterable
from unittest import mock

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions, NewTopic

from kafka_archive import config, formats, layout, spark
from kafka_archive.airflow import tasks
from kafka_archive.archive import job as archive_job
from kafka_archive.airflow.operators import submit_environment
from kafka_archive.tokens import LocalTokenStore

GROUP = "backup"


def airflow(env: dict[str, str], *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """Run the airflow CLI of this venv; fail the test with its output if it fails."""
    result = subprocess.run([str(Path(sys.executable).parent / "airflow"), *args], env=env,
                            capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        pytest.fail(f"airflow {' '.join(args)} exited {result.returncode}:\n"
                    f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


class Pipeline:
    def __init__(self, env: dict[str, str], kafka: str, s3, prefix: str, tmp_path: Path,
                 policy: str = "", group_extra: str = "", name: str = "main", extra: str = "",
                 kafka_properties: dict | None = None, bootstrap: str | None = None,
                 kafka_conn_id: str | None = None):
        """Topics are named <prefix>-*; `name` tells apart archives of the same topics;
        `extra` is YAML added at the config's top level (e.g. an `audit:` or `spark:`
        section); `kafka_properties`: the config's kafka.properties (Java names);
        `bootstrap`: the archive's own listener, if not `kafka` (the test's clients use `kafka`);
        `kafka_conn_id`: the archive's Kafka settings from this Airflow connection instead."""
        self.kafka, self.s3, self.prefix = kafka, s3, prefix
        self.root_key = f"{prefix}/{name}"
        self.root = f"s3://{s3.bucket}/{self.root_key}"
        self.token_root = tmp_path / name / "tokens"
        self.config_path = tmp_path / name / "kafka-archive.yaml"
        self.config_path.parent.mkdir(parents=True, exist_ok=True)
        source = (f"conn_id: {kafka_conn_id}" if kafka_conn_id
                  else f'bootstrap_servers: "{bootstrap or kafka}"')
        self.config_path.write_text(textwrap.dedent(f"""\
            kafka: {{{source}, properties: {json.dumps(kafka_properties or {})}}}
            archive_root: {self.root}
            token_root: {self.token_root}
            """) + extra + textwrap.dedent(f"""\
            groups:
              {GROUP}:
                topics: {{include: ["{prefix}-.*"]}}
                policy: {{{policy}}}
            """) + textwrap.indent(group_extra, "    "))
        self.env = {**env, "KAFKA_ARCHIVE_CONFIG": str(self.config_path)}
        self.tokens = LocalTokenStore(self.token_root)
        self.runs = 0  # made by run()

    # --- Kafka -------------------------------------------------------------------------
    def create_topic(self, name: str, partitions: int, **config) -> str:
        topic = f"{self.prefix}-{name}"
        admin = KafkaAdminClient(bootstrap_servers=self.kafka)
        admin.create_topics([NewTopic(topic, partitions, 1,
                                      topic_configs={k: str(v) for k, v in config.items()})])
        admin.close()
        return topic

    def add_partitions(self, topic: str, total: int) -> None:
        admin = KafkaAdminClient(bootstrap_servers=self.kafka)
        admin.create_partitions({topic: NewPartitions(total)})
        admin.close()

    def produce(self, messages) -> None:
        """messages: (topic, partition, key, value, headers[, timestamp_ms]) tuples."""
        producer = KafkaProducer(bootstrap_servers=self.kafka, acks="all", linger_ms=5)
        for topic, partition, key, value, headers, *timestamp in messages:
            producer.send(topic, key=key, value=value, partition=partition, headers=headers,
                          timestamp_ms=timestamp[0] if timestamp else None)
        producer.flush()
        producer.close()

    # --- the run, whole or step by step --------------------------------------------------
    def run_dag(self):
        return airflow(self.env, "dags", "test", f"kafka_archive_{GROUP}")

    def in_env(self, monkeypatch) -> None:
        """For calling the library in this process as the Airflow tasks would."""
        for name, value in self.env.items():
            monkeypatch.setenv(name, value)

    def plan(self, run_id: str) -> str | None:
        return tasks.plan(GROUP, run_id)

    def archive(self, plan_url: str, master: str | None = None) -> subprocess.Popen:
        """Start the Spark job as the archive task would (on `master`, else the config's or
        local[2]); its output goes to job.log (a pipe nobody reads would fill up and stall
        the job)."""
        cfg = config.load(self.config_path)
        env = submit_environment(cfg, master)
        self.job_log = self.config_path.parent / "job.log"
        command = spark.archive_command(cfg, plan_url, master)
        with open(self.job_log, "ab") as log:
            return subprocess.Popen(command,
                                    env=env, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)

    def archive_to_end(self, plan_url: str, master: str | None = None,
                       spark_submit: bool = False) -> None:
        """Run the Spark job to its end: the job's own `job.main` in the session's
        long-lived local SparkContext (shared_context: no JVM and Spark start per run,
        ~8 s each), or, when asked for, on a master, or with the config's Spark settings,
        in a spark-submit as the archive task runs it."""
        cfg = config.load(self.config_path)
        if spark_submit or master or cfg.spark != config.SparkSettings():
            job = self.archive(plan_url, master)
            assert job.wait(timeout=600) == 0, self.job_log.read_text()[-3000:]
            return
        context = shared_context()
        # the driver's (this process) and its Python workers' S3 and Kafka settings
        settings = {k: v for k, v in submit_environment(cfg).items()
                    if k.startswith(("AWS_", "AIRFLOW_CONN_"))}
        context.environment.update(settings)
        with mock.patch.dict(os.environ, settings):
            archive_job.main(shared_session(), str(self.config_path), plan_url)

    def commit(self, plan_url: str) -> dict:
        return tasks.commit(plan_url)

    def run(self, run_id: str | None = None) -> dict:
        """One run's plan, job and commit in this process, as the DAG's three tasks (the
        job in the shared SparkContext), for a test whose subject is not Airflow: ~3 s
        against ~30 s for `airflow dags test`, which imports Airflow and starts a
        spark-submit JVM. The commit's summary; the run must find something to archive."""
        self.runs += 1
        run_id = run_id or f"in-process-{self.runs}"
        with mock.patch.dict(os.environ, self.env):
            plan_url = self.plan(run_id)
            assert plan_url, f"run {run_id} planned nothing"
            self.archive_to_end(plan_url)
            return self.commit(plan_url)

    # --- what is in the archive ----------------------------------------------------------
    def data_files(self) -> dict[str, bytes]:
        """Archived data files (not metadata), by path below the archive root."""
        return objects(self.s3, self.root_key, f"{GROUP}/")

    def archived_records(self) -> list[tuple]:
        """(topic, partition, offset, key, value, timestamp, headers) of every archived
        message, read with our reader; duplicates are kept, so a test can count them."""
        found = []
        for path, data in self.data_files().items():
            _, topic, partition_dir, _ = path.split("/")
            partition = int(partition_dir.split("=")[1])
            for r in formats.read(io.BytesIO(data)):
                found.append((topic, partition, r.offset, r.key, r.value, r.timestamp_ms,
                              tuple(r.headers)))
        return found

    def token_offsets(self) -> dict[str, dict[int, int]]:
        return {t: dict(self.tokens.read(GROUP, t).token.offsets) for t in self.tokens.topics(GROUP)}


_CONTEXT: list = []  # the session's SparkContext, once made


def shared_context():
    """One local SparkContext for the test session (Spark allows one per process): for
    reading what the pipeline wrote with Hadoop's own readers, and for running archive
    jobs without a spark-submit each. Stopped by stop_shared_context."""
    if not _CONTEXT:
        from pyspark import SparkConf, SparkContext

        with mock.patch.dict(os.environ, spark.submit_env()):
            _CONTEXT.append(SparkContext.getOrCreate(
                SparkConf().setMaster("local[2]").setAppName("kafka-archive-tests")
                .set("spark.ui.enabled", "false")))
    return _CONTEXT[0]


def shared_session():
    """The SparkSession over shared_context: the archive and replay jobs run on Spark's
    DataFrame API."""
    from pyspark.sql import SparkSession

    shared_context()
    return SparkSession.builder.getOrCreate()


def stop_shared_context() -> None:
    """Stop the session's SparkContext, and pyspark's gateway JVM with it (stop() leaves
    it running until this process exits: the suite would leave a process behind)."""
    if _CONTEXT:
        context = _CONTEXT.pop()
        gateway = context._gateway
        context.stop()
        gateway.shutdown()
        gateway.proc.stdin.close()  # it exits when its stdin closes
        gateway.proc.wait(timeout=60)


def objects(s3, root_key: str, below: str = "") -> dict[str, bytes]:
    """The objects under <root_key>/<below>, by key relative to root_key."""
    out = {}
    paginator = s3.client.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=s3.bucket, Prefix=f"{root_key}/{below}"):
        for obj in page.get("Contents", []):
            out[obj["Key"][len(root_key) + 1:]] = s3.client.get_object(
                Bucket=s3.bucket, Key=obj["Key"])["Body"].read()
    return out


def forget_job(s3, plan_url: str, root_key: str, data_files: Iterable[str]) -> None:
    """Delete a run's manifest and its data files (paths below root_key), and mark its plan
    in flight again, so that running its job again writes every file anew: a job whose
    manifest exists does nothing, and one whose plan is not in flight writes nothing."""
    plan_key = plan_url.removeprefix(f"s3://{s3.bucket}/")
    manifest = plan_key.replace("plan.json", "manifest.json")
    for key in [manifest, *(f"{root_key}/{path}" for path in data_files)]:
        s3.client.delete_object(Bucket=s3.bucket, Key=key)
    plan = json.loads(s3.client.get_object(Bucket=s3.bucket, Key=plan_key)["Body"].read())
    marker = layout.inflight_marker(f"s3://{s3.bucket}/{root_key}", plan["group"])
    s3.client.put_object(Bucket=s3.bucket, Key=marker.removeprefix(f"s3://{s3.bucket}/"),
                         Body=json.dumps({"run_id": plan["run_id"], "plan": plan_url}).encode())


def lose_to_retention(kafka: str, topic: str, restore: bool = False) -> int:
    """Retention deletes partition 0 from offset 5 on, before it is archived: each new
    message rolls a segment, and the broker deletes expired segments every second. With
    `restore`, retention is then turned off and one more message kept. Returns the
    earliest offset left."""
    def set_retention(ms: str, segment_ms: str) -> None:
        admin = KafkaAdminClient(bootstrap_servers=kafka)
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                            configs={"retention.ms": ms, "segment.ms": segment_ms})])
        admin.close()

    set_retention("1000", "100")
    producer = KafkaProducer(bootstrap_servers=kafka, acks="all")
    consumer = KafkaConsumer(bootstrap_servers=kafka)
    tp, deadline = TopicPartition(topic, 0), time.monotonic() + 120
    while consumer.beginning_offsets([tp])[tp] <= 5:
        assert time.monotonic() < deadline, "retention did not delete anything in 120 s"
        producer.send(topic, value=b"doomed", partition=0).get()
        time.sleep(0.2)  # pacing the producer, not waiting for readiness
    earliest = consumer.beginning_offsets([tp])[tp]
    consumer.close()
    if restore:
        set_retention("-1", "604800000")
        producer.send(topic, value=b"kept", partition=0).get()
    producer.close()
    return earliest


def run_dag(pipeline: Pipeline) -> subprocess.CompletedProcess:
    """`airflow dags test`, whatever its outcome (a failing run exits non-zero)."""
    result = subprocess.run([str(Path(sys.executable).parent / "airflow"), "dags", "test",
                             f"kafka_archive_{GROUP}"], env=pipeline.env, capture_output=True,
                            text=True, timeout=900)
    pipeline.dag_output = result.stdout + result.stderr
    return result


def compact_log(kafka: str, topic: str, below: int) -> int:
    """The log cleaner compacts partition 0 of a topic whose messages below offset `below`
    repeat keys: the topic turns compacted, and each new message (of a key seen before)
    rolls a segment, until the cleaner has removed some offset below `below`. Returns how
    many of those offsets Kafka still holds."""
    admin = KafkaAdminClient(bootstrap_servers=kafka)
    admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs={
        "cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01",
        "min.compaction.lag.ms": "0"})])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=kafka, acks="all")
    deadline = time.monotonic() + 120
    while (held := _offsets_held(kafka, topic, below)) >= below:
        assert time.monotonic() < deadline, "the log cleaner removed nothing in 120 s"
        producer.send(topic, key=b"roll", value=b"rolls a segment", partition=0).get()
        time.sleep(0.2)  # pacing the producer, not waiting for readiness
    producer.close()
    return held


def _offsets_held(kafka: str, topic: str, below: int) -> int:
    consumer = KafkaConsumer(bootstrap_servers=kafka, enable_auto_commit=False,
                             consumer_timeout_ms=1000)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    held = 0
    for r in consumer:
        if r.offset >= below:
            break
        held += 1
    consumer.close()
    return held

