"""Benchmark: how fast does one archive run move Kafka data to S3, compared with Kafka's own
consumer on the same data?

    .venv/bin/python -m tests.support.bench.archive [--gigabytes 2.0] [--partitions 8]
        [--message-bytes 1024] [--driver-memory 2g] [--conf KEY=VALUE ...] [--partitioned]
        [--level N] [--plan-partitions N] [--skip-peer] [--skip-tiny] [--keep]
        [--master spark://127.0.0.1:17077] [--replay]

What it does, against the local services (it starts Kafka and S3 with
tests/support/localservices.py if they are not running, and stops only what it started):

1. Makes a fresh topic `bench-<timestamp>` with --partitions partitions and fills it with
   --gigabytes GiB of JSON log lines, each exactly --message-bytes bytes, no key. Kafka's own
   `ProducerPerformance` sends them (acks=1, no compression): it picks each message at
   random from a pool of 50,000 distinct generated log lines (timestamps, levels, services,
   trace ids, HTTP fields, free text), so the data compresses like real logs, not like
   repeated bytes. kafka-python manages only ~5k messages/s here, which would make the
   producing step take minutes for 2 GiB.
2. Consumer baseline: Kafka's `ConsumerPerformance` (same jars as the broker) reads the whole
   topic; run once before and once after the archive runs, and the faster of the two is the
   baseline (the machine is noisy; the faster run makes the ratios conservative).
3. For each compression (`none`, then the default codec `default`): a config with its own
   archive root `s3://kafka-archive/bench-<timestamp>-<compression>` and its own local token
   root, one group `backup` selecting only the topic, per-run caps large enough for one run.
   It times the three steps of the DAG, calling the library directly (not through Airflow, so
   task start-up is not counted): `tasks.plan`, then `spark-submit spark_jobs/archive.py`
   with the command line and environment `ArchiveOperator` builds (`--master local[2]`, the
   same connection the local Airflow uses), then `tasks.commit`. While the Spark job runs it
   samples, every 0.2 s (psutil), the resident memory (RSS) of the spark-submit process tree
   (the JVM, the Python driver, PySpark's Python workers) and the CPU time each used.
4. Fixed cost of a run with nothing to archive: `tasks.plan` again on the archived topic
   (it returns None, so the DAG skips archive and commit), in this process (warm) and in a
   fresh Python process (cold: interpreter, library and Airflow imports included).
   Spark start-up overhead: a full run on a one-message topic.
   The peer (issue 14) runs right after each: the Structured Streaming query a user would
   write instead (tests/support/bench/peer.py, availableNow, same master and jars) on the same
   topic, to local text after compression `none`, to parquet (Spark's default codec) after
   the first compressed run (--compressions, default none,fast,snappy,default); with
   `table` among them, the group as an Iceberg table (commit included) beside the peer
   writing an Iceberg table through Iceberg's Spark runtime (both on a SQLite catalog).
5. Prints a table: throughput of spark-submit alone, of the Spark job without its start-up
   (the job's own clock from its SparkContext ready to its manifest written, which it
   prints) and of plan+archive+commit, in MiB/s and messages/s; the ratios archive/consumer
   and archive/peer and whether issue 22's targets hold (TARGET_* below); output size, peak memory, and CPU seconds of the JVM, of Python, of the broker
   and MinIO, and of everything else on the machine (the noise); `uptime` with each figure.
   --plan-partitions N: planning N partitions from synthetic offsets (target < 5 s).
With --partitioned, also the partitioned group (JSON parser on each line's `ts`, hourly
event-time layout, default codec) on the same topic, reported next to the backup job with
the default codec (target: at least 0.7 of its throughput).
6. With --master (a Spark master URL), the default-codec run once more on that cluster, same
   topic, printed next to the local[2] run: seconds, throughput, tasks per executor and the
   per-task skew (from both runs' Spark event logs), and whether both wrote the same bytes
   (the manifests' CRC32C). For the local standalone cluster of tests/support/localservices.py
   (`start spark`) it starts the cluster if needed and gives the job its executors' Python;
   for another cluster, pass what its executors need with --conf. Memory figures there cover
   only the driver (the executors are the workers' children, not spark-submit's).
7. With --replay, the default-codec archive is replayed (`spark_jobs/replay.py`, one task
   per partition, librdkafka's idempotent producer) into a new topic
   `bench-<timestamp>-replay` with as many partitions; its end offsets are checked against
   the source's and the throughput printed: of spark-submit whole and of the replay's
   Spark job (the job's own summary line, from the session's start), beside Kafka's
   ProducerPerformance sending as many messages from the same pool with the replay's
   producer settings (acks=all, idempotence, batching) into a topic of as many partitions.
8. Deletes its S3 objects and topics unless --keep.

Units: "MiB" is 2**20 bytes, which is what Kafka's tools call "MB". Throughput counts message
payload (key + value bytes; keys are null here), not the size of the files written.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from tests.support import localservices
from tests.support.bench.kafka_data import (
    MIB, POOL_SIZE, ConsumerRun, Throughput, consumer_perf, create_topic, delete_topics,
    end_offsets, produce, write_pool)
from tests.support.bench.processes import (
    TreeSample, TreeSampler, describe_profile, service_cpu_s, uptime)

BUCKET_PREFIX = "bench-"
GROUP = "backup"
PARTITIONED = "partitioned"
TABLE = "table"  # a --compressions entry: the group as an Iceberg table (parquet key_value)
ICEBERG_JARS = localservices.CACHE / "jars" / "spark-iceberg"
TARGET_PARTITIONED_RATIO = 0.7  # partitioned job's throughput / the backup job's
# issue 14: the bar is the Structured Streaming query a user would write instead
# issue 22's targets: throughput ratios to the peer without start-up, and whole
TARGET_PEER_QUERY = 3.0      # archive / peer, Spark job against the query, both w/o start-up
TARGET_PEER_QUERY_TEXT = 2.0  # likewise, compression none against the peer writing text
TARGET_PEER_WHOLE = 2.0      # archive / peer, whole spark-submit
TARGET_CONSUMER = 0.5        # archive w/o start-up / ConsumerPerformance on the same topic
TARGET_REPLAY_PRODUCER = 0.8  # replay / ProducerPerformance with acks=all and idempotence
TARGET_PEAK_RSS_MIB = 1536   # with 1 GiB slices
TARGET_FIXED_COST_S = 10.0   # a whole run archiving one message, idle machine
# each compression's run, and the peer sink it is compared with: text beside none, parquet
# (Spark's default codec, Snappy) beside the compressed ones
PEER_SINK = {"none": "text", "fast": "parquet", "snappy": "parquet", "default": "parquet",
             "gzip": "parquet", TABLE: "iceberg"}
TARGET_PLAN_S = 5.0          # planning --plan-partitions partitions


# --- the Spark job and its memory ----------------------------------------------------------

@dataclass
class SparkLog:
    """What the archive job's own summary line says (progress.summary_line): its time from
    the Spark session ready to the manifest written, and the session's start."""
    job_s: float | None = None       # reading the plan, the Spark job, the manifest
    session_s: float | None = None   # building the SparkSession (after the JVM and Python start)

    @classmethod
    def parse(cls, text: str) -> SparkLog:
        log = cls()
        if m := re.search(r"Spark session ([\d.]+) s, the job without it ([\d.]+) s", text):
            log.session_s, log.job_s = float(m[1]), float(m[2])
        return log


@dataclass
class SparkRun:
    seconds: float
    memory: TreeSample
    services_cpu_s: dict[str, float]
    log: SparkLog


def spark_submit(config_path: Path, plan_url: str, spark_args: list[str],
                 log_path: Path, master: str | None = None,
                 profile: Path | None = None) -> SparkRun:
    """spark-submit of spark_jobs/archive.py: the settings ArchiveOperator.execute passes
    through SparkSubmitHook (spark.archive_submit: master local[2] as the kafka_archive_spark
    connection says, or `master`; --name, --jars, --py-files, --files, the config's spark
    conf) and the same environment (operators.submit_environment: the S3 credentials of the
    Airflow connection). spark_args: what --driver-memory and --conf of this script add (nothing by
    default). profile: py-spy records the Python processes of the tree into this file."""
    from kafka_archive import config, spark
    from kafka_archive.airflow import operators

    cfg = config.load(config_path)
    command = spark.archive_command(cfg, plan_url, master, extra=spark_args)
    return sampled_spark_submit(command, operators.submit_environment(cfg, master), log_path,
                                profile)


def connect_client(config_path: Path, plan_url: str, url: str, log_path: Path) -> SparkRun:
    """The archive task's part over Spark Connect in a process of its own (connect_client),
    sampled like a spark-submit: what it costs on the Airflow worker. The server's CPU is
    among the services' (spark-connect)."""
    from kafka_archive import config
    from kafka_archive.airflow import operators

    env = operators.submit_environment(config.load(config_path))
    command = [sys.executable, "-m", "tests.support.bench.connect_client", "--config",
               str(config_path), "--plan", plan_url, "--url", url]
    return _sampled(command, env, log_path)


def sampled_spark_submit(command: list[str], env: dict[str, str], log_path: Path,
                         profile: Path | None = None) -> SparkRun:
    """Run `command` (a spark-submit) sampling its process tree; with `profile`, under
    py-spy recording its Python processes into that file, summarized when it ends."""
    if profile is not None:
        profile.parent.mkdir(parents=True, exist_ok=True)
        command = [str(Path(sys.executable).parent / "py-spy"), "record", "--subprocesses",
                   "--nonblocking", "--format", "raw", "--rate", "200", "--output",
                   str(profile), "--", *command]
    run = _sampled(command, env, log_path)
    if profile is not None:
        say(describe_profile(profile))
    return run


def _sampled(command: list[str], env: dict[str, str], log_path: Path) -> SparkRun:
    """Run a spark-submit command line, sampling its process tree; fail with its log's tail."""
    services_before = service_cpu_s()
    with open(log_path, "wb") as log:
        started = time.perf_counter()
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                stdin=subprocess.DEVNULL,
                                cwd=log_path.parent if command[0] != sys.executable else localservices.ROOT)
        sampler = TreeSampler(proc.pid)
        sampler.start()
        returncode = proc.wait()
        seconds = time.perf_counter() - started
    memory = sampler.stop()
    services = {k: v - services_before.get(k, 0.0) for k, v in service_cpu_s().items()}
    text = log_path.read_text(errors="replace")
    if returncode != 0:
        tail = "\n".join(text.splitlines()[-40:])
        raise RuntimeError(f"spark-submit exited {returncode}; log {log_path}:\n{tail}")
    return SparkRun(seconds, memory, services, SparkLog.parse(text))


# --- the peer: the Structured Streaming query users would write instead ----------------------

@dataclass
class PeerRun:
    sink: str          # parquet | text
    spark: SparkRun
    query_s: float     # from the query's start() to its end: without Spark's start-up
    output_bytes: int
    load: str          # `uptime` when it finished
    columns: dict[str, str] = field(default_factory=dict)  # a table peer's, as it made them


def peer_run(sink: str, bootstrap: str, topic: str, expected_records: int,
             spark_args: list[str], work: Path) -> PeerRun:
    """tests/support/bench/peer.py: an availableNow Structured Streaming query from the topic
    to local files, with the archive job's master, jars, environment and spark_args."""
    from kafka_archive import spark

    output = work / f"peer-{sink}"
    jars = spark.kafka_source_jars()
    if sink == "iceberg":  # Iceberg's JdbcCatalog on SQLite, its warehouse the output folder
        jars = [*jars, *map(str, sorted(ICEBERG_JARS.glob("*.jar")))]
        catalog = {"": "org.apache.iceberg.spark.SparkCatalog", ".type": "jdbc",
                   ".uri": f"jdbc:sqlite:{work}/peer-catalog.db", ".jdbc.schema-version": "V1",
                   ".warehouse": f"file://{output}"}
        spark_args = [*spark_args, *(a for k, v in catalog.items()
                                     for a in ("--conf", f"spark.sql.catalog.peer{k}={v}"))]
    command = [str(spark.spark_home() / "bin" / "spark-submit"), "--master", "local[2]",
               "--name", f"kafka-archive-peer-{sink}", *spark_args,
               "--jars", ",".join(jars), str(Path(__file__).with_name("peer.py")),
               "--bootstrap", bootstrap, "--topic", topic, "--sink", sink, "--output", str(output)]
    run = sampled_spark_submit(command, {**os.environ, **spark.submit_env()},
                               work / f"spark-peer-{sink}.log")
    text = (work / f"spark-peer-{sink}.log").read_text(errors="replace")
    result = json.loads(re.search(r"^peer-result (.*)$", text, re.M)[1])
    if result["rows"] != expected_records:
        raise RuntimeError(f"peer {sink} read {result['rows']} rows, expected {expected_records}")
    size = sum(f.stat().st_size for f in output.rglob("*") if f.is_file())
    shutil.rmtree(output, ignore_errors=True)
    shutil.rmtree(f"{output}-checkpoint", ignore_errors=True)
    return PeerRun(sink, run, result["query_s"], size, uptime())


CONNECT_PEER = "iceberg-connect"  # beside the table run: Iceberg's Kafka Connect sink


def connect_peer_run(bootstrap: str, topic: str, expected_records: int, work: Path,
                     avro_registry: str | None = None) -> PeerRun:
    """tests/support/bench/connect_peer.py: Iceberg's Kafka Connect sink draining the topic
    into a table, its worker's process tree sampled as a spark-submit's is (with
    `avro_registry`, Avro values through Apicurio's converter: the record's columns)."""
    folder = work / f"peer-{CONNECT_PEER}"
    log_path = work / f"peer-{CONNECT_PEER}.log"
    run = _sampled([sys.executable, "-m", "tests.support.bench.connect_peer", "--bootstrap",
                    bootstrap, "--topic", topic, "--rows", str(expected_records), "--work",
                    str(folder), *(("--avro", avro_registry) if avro_registry else ())],
                   dict(os.environ), log_path)
    result = json.loads(re.search(r"^peer-result (.*)$", log_path.read_text(errors="replace"),
                                  re.M)[1])
    if result["rows"] != expected_records:
        raise RuntimeError(f"peer {CONNECT_PEER} committed {result['rows']} rows, expected "
                           f"{expected_records}")
    size = sum(f.stat().st_size for f in (folder / "warehouse").rglob("*") if f.is_file())
    say(f"  {CONNECT_PEER}: {result['files']} data files in {result['snapshots']} snapshots")
    shutil.rmtree(folder, ignore_errors=True)
    return PeerRun(CONNECT_PEER, run, result["query_s"], size, uptime(),
                   result.get("columns", {}))


def peer_cpu_per_gib(peer: PeerRun, mib: float) -> float:
    """A peer's processes and the broker per GiB, as cpu_per_gib; the Connect peer's Python
    process is this benchmark's poller of its table, not the peer: left out."""
    if peer.sink == CONNECT_PEER:
        jvm = peer.spark.memory.cpu_s.get("jvm", 0.0)
        return (jvm + peer.spark.services_cpu_s.get("kafka", 0.0)) / (mib / 1024)
    return cpu_per_gib(peer.spark, mib)


def describe_peer(peer: PeerRun, payload_bytes: int) -> None:
    s, m = peer.spark, peer.spark.memory
    cpu = ", ".join(f"{k} {v:,.1f}" for k, v in sorted(m.cpu_s.items()) if v >= 0.05)
    say(f"  spark-submit {s.seconds:6.1f} s ({payload_bytes / MIB / s.seconds:,.1f} MiB/s); the "
        f"query without start-up {peer.query_s:.1f} s ({payload_bytes / MIB / peer.query_s:,.1f} "
        f"MiB/s); {peer.output_bytes / MIB:,.1f} MiB written; peak RSS {m.peak_total_mib:,.0f} MiB; "
        f"CPU seconds {cpu}, broker {s.services_cpu_s.get('kafka', 0.0):,.1f}, everything else "
        f"{other_cpu_s(s):,.1f}; {peer_cpu_per_gib(peer, payload_bytes / MIB):,.1f} CPU-s/GiB; "
        f"uptime: {peer.load}")


# --- one archive run ------------------------------------------------------------------------

def write_config(folder: Path, topic: str, archive_root: str, compression: str,
                 group: str = GROUP, spark_conf: dict | None = None,
                 level: int | None = None, parser: dict | None = None,
                 top: dict | None = None) -> Path:
    """group PARTITIONED: the event-time layout, by hour, with the JSON parser on the log
    lines' `ts` (ISO-8601 text). spark_conf: the config's spark.conf. With compression
    TABLE and `parser`, an event-time table group (the parsed shape) reading values with
    it; `top`: more top-level settings (a schema_registry)."""
    event_time = ({"layout": {"kind": "event_time", "granularity": "hour"},
                   "parser": parser or {"kind": "json", "field": "ts", "unit": "iso8601"}}
                  if group == PARTITIONED or parser else {})
    fmt = {"kind": "sequencefile", "key": "msgpack", "compression": compression,
           **({"level": level} if level is not None else {})}
    table = {}
    if compression == TABLE:  # one Iceberg table, its catalog on SQLite in the work folder
        fmt, table = {"kind": "parquet"}, {"table": {"namespace": "bench"}}
        table_catalog = {"iceberg_catalogs": {
            "local": {"type": "sql", "uri": f"sqlite:///{folder}/catalog.db"}}}
    else:
        table_catalog = {}
    config = {
        "kafka": {"bootstrap_servers": "${KAFKA_ARCHIVE_BOOTSTRAP}"},
        "archive_root": archive_root,
        "token_root": str(folder / "offsets"),
        "s3_conn_id": "kafka_archive_s3",
        "generation": 1,
        "audit": {"groups": [group]},
        "groups": {group: {
            **event_time,
            "topics": {"include": [re.escape(topic)], "exclude": []},
            "start_from": "earliest",
            "format": fmt, **table,
            # everything in one run: no per-run cap reached, no waiting for more data
            "policy": {"max_records": 100_000_000, "max_bytes": 100_000_000_000,
                       "min_records": 1, "max_delay": 0},
        }},
        **({"spark": {"conf": spark_conf}} if spark_conf else {}), **table_catalog,
        **(top or {}),
    }
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "kafka-archive.yaml"
    path.write_text(json.dumps(config, indent=1))  # JSON is YAML
    return path


@dataclass
class ArchiveRun:
    label: str
    plan_s: float
    spark: SparkRun
    commit_s: float
    records: int
    files: int
    output_bytes: int
    idle_plan_warm_s: list[float] = field(default_factory=list)
    idle_plan_cold_s: float | None = None
    plan_url: str = ""
    load: str = ""  # `uptime` right after spark-submit
    largest_slice: int = 0  # messages in the plan's largest slice
    slices: int = 0  # the plan's slices (Spark tasks: as many or more, job.task_slices)

    @property
    def total_s(self) -> float:
        return self.plan_s + self.spark.seconds + self.commit_s


def timed(fn, *args):
    started = time.perf_counter()
    value = fn(*args)
    return value, time.perf_counter() - started


def archive_run(label: str, config_path: Path, expected_records: int, spark_args: list[str],
                work: Path, measure_idle: bool = False, group: str = GROUP,
                master: str | None = None, profile: Path | None = None,
                connect: str | None = None) -> ArchiveRun:
    """plan, spark-submit (or, with `connect`, the job as a client of that Spark Connect
    server: connect_client), commit, as the DAG runs them; then optionally plan again with
    nothing left to archive."""
    from kafka_archive import config as config_module
    from kafka_archive.airflow import connections, tasks

    os.environ["KAFKA_ARCHIVE_CONFIG"] = str(config_path)
    cfg = config_module.load()
    run_id = f"bench__{label}__{datetime.now(timezone.utc):%Y%m%dT%H%M%S}"
    plan_url, plan_s = timed(tasks.plan, group, run_id)
    if plan_url is None:
        raise RuntimeError(f"{label}: the plan found nothing to archive")
    if connect:
        spark_run = connect_client(config_path, plan_url, connect,
                                   work / f"connect-{label}.log")
    else:
        spark_run = spark_submit(config_path, plan_url, spark_args,
                                 work / f"spark-{label}.log", master,
                                 profile / f"{label}.txt" if profile else None)
    load = uptime()
    summary, commit_s = timed(tasks.commit, plan_url)
    if summary["records"] != expected_records:
        raise RuntimeError(f"{label}: committed {summary['records']} records, "
                           f"expected {expected_records}")
    if summary["quarantined"]:
        raise RuntimeError(f"{label}: {summary['quarantined']} messages quarantined: the "
                           "parser did not read them, so this is not the parsing path")
    storage = connections.storage(cfg.s3_conn_id)
    output = sum(size for _, size in storage.list(f"{cfg.archive_root}/{group}"))
    plan = json.loads(storage.get_bytes(plan_url))
    run = ArchiveRun(label, plan_s, spark_run, commit_s, summary["records"], summary["files"],
                     output, plan_url=plan_url, load=load,
                     largest_slice=max(s["end"] - s["start"] for s in plan["slices"]),
                     slices=len(plan["slices"]))
    if measure_idle:
        for i in range(3):
            again, seconds = timed(tasks.plan, GROUP, f"{run_id}__idle{i}")
            if again is not None:
                raise RuntimeError(f"{label}: a second plan found work: {again}")
            run.idle_plan_warm_s.append(seconds)
        run.idle_plan_cold_s = cold_plan(config_path, f"{run_id}__idle-cold")
    return run


def replay_run(config_path: Path, topic: str, target: str, partitions: int, bootstrap: str,
               messages: int, payload: int, spark_args: list[str], work: Path,
               pool: Path, message_bytes: int, profile: Path | None = None) -> None:
    """Replay the archive of config_path's group into a new topic `target`, as
    `kafka-archive replay` does (tasks.replay_prepare, then spark-submit of
    spark_jobs/replay.py with the archive job's settings), and print its throughput beside
    ProducerPerformance's sending as many messages of the same size as the replay's
    producer does (acks=all, idempotence) into a topic of as many partitions."""
    peer_topic = f"{target}-peer"
    create_topic(bootstrap, peer_topic, partitions)
    try:
        peer, _ = produce(bootstrap, peer_topic, messages, pool, message_bytes, idempotent=True)
    finally:
        delete_topics(bootstrap, [peer_topic])
    say(f"  ProducerPerformance, acks=all and idempotence: {peer.seconds:.1f} s with its JVM's "
        f"start, {peer.msg_s:,.0f} msg/s ({peer.tool_msg_s or 0:,.0f} msg/s by its own clock); "
        f"uptime: {uptime()}")
    from kafka_archive import config, spark
    from kafka_archive.airflow import operators, tasks
    from kafka_archive.tools import replay

    os.environ["KAFKA_ARCHIVE_CONFIG"] = str(config_path)
    cfg = config.load(config_path)
    create_topic(bootstrap, target, partitions)
    url, prepare_s = timed(tasks.replay_prepare, replay.Request(GROUP, topic, target), False, cfg)
    command = spark.replay_command(cfg, url, extra=spark_args)
    run = sampled_spark_submit(command, operators.submit_environment(cfg),
                               work / "spark-replay.log", profile and profile / "replay.txt")
    landed = sum(end_offsets(bootstrap, target).values())
    if landed != messages:
        raise RuntimeError(f"replay: {landed} messages in {target}, expected {messages}")
    text = (work / "spark-replay.log").read_text(errors="replace")
    job = re.search(r"^replayed (\d+) messages, (\d+) bytes in ([\d.]+) s", text, re.M)
    job_s = float(job[3])
    cpu = ", ".join(f"{k} {v:,.1f}" for k, v in sorted(run.memory.cpu_s.items()) if v >= 0.05)
    say(f"  prepare {prepare_s:.2f} s | spark-submit {run.seconds:.1f} s: "
        f"{payload / MIB / run.seconds:,.1f} MiB/s, {messages / run.seconds:,.0f} msg/s | the "
        f"replay job (session start to end) {job_s:.1f} s: {payload / MIB / job_s:,.1f} MiB/s, "
        f"{messages / job_s:,.0f} msg/s; {landed:,} messages in {target}")
    say(f"  CPU seconds: {cpu}; broker {run.services_cpu_s.get('kafka', 0.0):,.1f}, MinIO "
        f"{run.services_cpu_s.get('s3', 0.0):,.1f}; {cpu_per_gib(run, payload / MIB):,.1f} per "
        f"GiB (its processes + broker); peak RSS {run.memory.peak_total_mib:,.0f} "
        f"MiB; uptime: {uptime()}")
    verdict("replay job (session start to end) / ProducerPerformance (JVM start to end), "
            "messages/s", messages / job_s / peer.msg_s, TARGET_REPLAY_PRODUCER)


def cold_plan(config_path: Path, run_id: str) -> float:
    """tasks.plan in a fresh interpreter, as a task process would run it (minus Airflow's
    own task runner): imports included."""
    code = ("import sys; from kafka_archive.airflow import tasks; "
            f"sys.exit(0 if tasks.plan({GROUP!r}, {run_id!r}) is None else 3)")
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env={**os.environ, "KAFKA_ARCHIVE_CONFIG": str(config_path)})
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        raise RuntimeError(f"cold plan exited {result.returncode}:\n{result.stderr[-2000:]}")
    return seconds


# --- planning many partitions --------------------------------------------------------------

def plan_benchmark(partitions: int, work: Path) -> float:
    """Seconds to plan `partitions` partitions (20 per topic) from synthetic offsets and
    tokens, with the pure steps of a plan task and of the job's set-up: the group's topic
    selection, planning.decide, the plan to JSON and back, the Kafka source's offset options."""
    from kafka_archive import config as config_module
    from kafka_archive.archive import job
    from kafka_archive.plan import planning

    rng = random.Random(partitions)
    topics = [f"events.service-{i:05d}" for i in range(max(partitions // 20, 1))]
    states = [planning.PartitionState(t, p, e, e + rng.randrange(1, 1_000_000))
              for t in topics for p in range(20)
              for e in [rng.randrange(1 << 40)]][:partitions]
    tokens: dict[str, dict[int, int]] = {}
    for s in states:
        if rng.random() < 0.95:  # a few partitions are new: no token yet
            tokens.setdefault(s.topic, {})[s.partition] = rng.randrange(s.earliest, s.latest)
    path = work / "plan-bench.yaml"
    path.write_text(json.dumps({"kafka": {"bootstrap_servers": "127.0.0.1:9"},
                                "archive_root": "s3://b/bench", "token_root": str(work),
                                "groups": {GROUP: {"topics": {"include": [r"events\.service-\d+"]},
                                                   "policy": {"min_records": 1}}}}))
    group = config_module.load(path).group(GROUP)
    started = time.perf_counter()
    selected = [s for s in states if group.selects(s.topic)]
    slices, anomalies, waiting = planning.decide(group, selected, tokens, 0, lambda *a: None)
    plan = planning.Plan(group=GROUP, run_id="bench", created_at="", bootstrap="b",
                         generation=1, format=group.format.__dict__, slices=tuple(slices),
                         token_versions={t: None for t in topics},
                         base_offsets={t: {str(p): o for p, o in tokens.get(t, {}).items()}
                                       for t in topics})
    again = planning.Plan.from_json(plan.to_json())
    options = job._offset_ranges(again.slices)
    seconds = time.perf_counter() - started
    if len(slices) != len(states) or len(json.loads(options["assign"])) != len(topics):
        raise RuntimeError(f"planned {len(slices)} slices of {len(states)} partitions")
    say(f"planning {len(states):,} partitions ({len(topics):,} topics x 20): {seconds:.2f} s "
        f"(select, decide, plan JSON {len(plan.to_json()) / MIB:,.1f} MiB out and back, "
        f"Kafka source options)")
    verdict(f"planning {len(states):,} partitions, seconds", seconds, TARGET_PLAN_S,
            higher_is_better=False)
    return seconds


# --- S3 clean-up -------------------------------------------------------------------------------

def delete_prefix(s3, bucket: str, prefix: str) -> int:
    deleted = 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if keys:
            s3.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
            deleted += len(keys)
    return deleted


# --- output ------------------------------------------------------------------------------------

def quiet_logging() -> None:
    """Importing Airflow sets up its logging at INFO: keep the clients' chatter out."""
    logging.getLogger().setLevel(logging.WARNING)
    for name in ("kafka", "botocore", "boto3", "airflow", "kafka_archive"):
        logging.getLogger(name).setLevel(logging.WARNING)


def say(text: str = "") -> None:
    print(text, flush=True)


def describe_spark(run: ArchiveRun, payload_bytes: int) -> None:
    s, m = run.spark, run.spark.memory
    say(f"  plan {run.plan_s:6.2f} s | spark-submit {s.seconds:6.1f} s | commit "
        f"{run.commit_s:5.2f} s | {run.records:,} records in {run.files} files, "
        f"{run.output_bytes / MIB:,.1f} MiB written"
        f" ({run.output_bytes / payload_bytes:.1%} of payload)")
    at_peak = ", ".join(f"{k} {v:,.0f}" for k, v in sorted(m.at_peak.items()) if v >= 1)
    say(f"  Spark job memory: peak RSS {m.peak_total_mib:,.0f} MiB ({at_peak}); "
        f"JVM alone peaked at {m.peak_jvm_mib:,.0f} MiB, Python at {m.peak_python_mib:,.0f} MiB; "
        f"up to {m.max_processes} processes; {len(m.python_worker_pids)} Python worker "
        f"processes (PySpark's daemon included) for {run.slices} plan slices")
    cpu = ", ".join(f"{k} {v:,.1f}" for k, v in sorted(m.cpu_s.items()) if v >= 0.05)
    services = {"broker": s.services_cpu_s.get("kafka", 0.0),
                "MinIO": s.services_cpu_s.get("s3", 0.0)}
    if s.log.job_s is not None:
        say(f"  the job's own clock: from the Spark session ready to the manifest written (plan "
            f"read, the tasks' Kafka reads, encoding and uploads, manifest) {s.log.job_s:.1f} s "
            f"({payload_bytes / MIB / s.log.job_s:,.1f} MiB/s); the SparkContext took "
            f"{s.log.session_s:.1f} s; the JVM's and Python's start and shut-down the other "
            f"{s.seconds - s.log.job_s - s.log.session_s:.1f} s")
    say(f"  CPU seconds during spark-submit: {cpu}; broker {services['broker']:,.1f}, MinIO "
        f"{services['MinIO']:,.1f}; everything else on the machine {other_cpu_s(s):,.1f} "
        f"(of {os.cpu_count()} cores x {s.seconds:.1f} s = {os.cpu_count() * s.seconds:,.0f})")
    say(f"  uptime: {run.load}")


def other_cpu_s(run: SparkRun) -> float:
    """CPU time that neither the Spark job nor the broker nor MinIO used while the job ran:
    the machine's noise."""
    ours = sum(run.memory.cpu_s.values()) + sum(v for k, v in run.services_cpu_s.items()
                                                 if k != "machine")
    return max(run.services_cpu_s["machine"] - ours, 0.0)


def row(name: str, *values: str) -> None:
    say(f"  {name:<50}" + "".join(f"{v:>16}" for v in values))


def describe_consumer(i: int, c: ConsumerRun) -> None:
    say(f"consumer baseline {i}: {c.mib_s:,.1f} MiB/s, {c.msg_s:,.0f} msg/s "
        f"(fetch only, without the group join: {c.fetch_mib_s:,.1f} MiB/s, "
        f"{c.fetch_msg_s:,.0f} msg/s)")


def report(args, topic: str, messages: int, payload: int, produced: Throughput,
           consumers: list[ConsumerRun], runs: dict[str, ArchiveRun],
           tiny: ArchiveRun | None, peers: dict[str, PeerRun]) -> None:
    best = max(consumers, key=lambda c: c.mib_s)
    mib = payload / MIB
    say()
    say(f"== Results: {mib:,.0f} MiB, {messages:,} messages of {args.message_bytes} B, "
        f"{args.partitions} partitions, topic {topic}; Spark local[2], driver memory "
        f"{args.driver_memory or 'Spark default (1g)'}"
        + "".join(f", --conf {c}" for c in args.conf))
    say(f"  produce (ProducerPerformance): {produced.mib_s:,.1f} MiB/s, "
        f"{produced.msg_s:,.0f} msg/s")
    say(f"  consumer baseline (ConsumerPerformance, faster of {len(consumers)} runs): "
        f"{best.mib_s:,.1f} MiB/s, {best.msg_s:,.0f} msg/s")
    order = [runs[c] for c in args.compressions]
    row("", *(f"compression={r.label}" for r in order))
    job = all(r.spark.log.job_s for r in order)
    rows = [
        ("archive, spark-submit alone: seconds", lambda r: f"{r.spark.seconds:,.1f}"),
        ("archive, spark-submit alone: MiB/s", lambda r: f"{mib / r.spark.seconds:,.1f}"),
        ("archive, spark-submit alone: messages/s", lambda r: f"{messages / r.spark.seconds:,.0f}"),
        ("archive, plan+archive+commit: seconds", lambda r: f"{r.total_s:,.1f}"),
        ("archive, plan+archive+commit: MiB/s", lambda r: f"{mib / r.total_s:,.1f}"),
        ("archive, plan+archive+commit: messages/s", lambda r: f"{messages / r.total_s:,.0f}"),
    ]
    if job:
        rows.append(("archive, Spark job without start-up: MiB/s",
                     lambda r: f"{mib / r.spark.log.job_s:,.1f}"))
    rows += [
        ("ratio archive/consumer, spark-submit alone",
         lambda r: f"{mib / r.spark.seconds / best.mib_s:.3f}"),
        ("ratio archive/consumer, plan+archive+commit",
         lambda r: f"{mib / r.total_s / best.mib_s:.3f}"),
    ]
    if job:
        rows.append(("ratio archive/consumer, Spark job w/o start-up",
                     lambda r: f"{mib / r.spark.log.job_s / best.mib_s:.3f}"))
    rows += [
        ("written to S3, MiB", lambda r: f"{r.output_bytes / MIB:,.1f}"),
        ("Spark job peak RSS, process tree, MiB",
         lambda r: f"{r.spark.memory.peak_total_mib:,.0f}"),
        ("Spark job peak RSS, JVM alone, MiB", lambda r: f"{r.spark.memory.peak_jvm_mib:,.0f}"),
        ("CPU seconds: Spark JVM", lambda r: f"{r.spark.memory.cpu_s.get('jvm', 0):,.1f}"),
        ("CPU seconds: Spark Python (driver + workers)",
         lambda r: f"{sum(v for k, v in r.spark.memory.cpu_s.items() if 'python' in k):,.1f}"),
        ("CPU seconds: broker + MinIO",
         lambda r: f"{sum(r.spark.services_cpu_s.get(k, 0) for k in ('kafka', 's3')):,.1f}"),
        ("CPU seconds: everything else (noise)", lambda r: f"{other_cpu_s(r.spark):,.1f}"),
    ]
    for name, value in rows:
        row(name, *(value(r) for r in order))
    if peers:
        peer_rows(peers, runs, mib, best)
    row("uptime after spark-submit", "")
    for r in order:
        say(f"    {r.label}: {r.load}")
    first = runs[args.compressions[0]]
    warm = first.idle_plan_warm_s
    say(f"  fixed cost of a run with nothing to archive (plan returns None; archive and commit "
        f"are skipped): {statistics.median(warm):.2f} s in a warm process (median of "
        f"{', '.join(f'{s:.2f}' for s in warm)}), {first.idle_plan_cold_s:.2f} s in a "
        f"fresh Python process (imports included)")
    if tiny is not None:
        say(f"  Spark start-up overhead (a run archiving 1 message): spark-submit "
            f"{tiny.spark.seconds:.1f} s ({sum(tiny.spark.memory.cpu_s.values()):.1f} CPU-s), "
            f"plan {tiny.plan_s:.2f} s, commit {tiny.commit_s:.2f} s; "
            f"peak RSS {tiny.spark.memory.peak_total_mib:,.0f} MiB; uptime: {tiny.load}")
        verdict("fixed cost of a whole run archiving one message (plan + spark-submit + "
                "commit), seconds", tiny.total_s, TARGET_FIXED_COST_S, higher_is_better=False)
    for r, peer in [(r, peers.get(PEER_SINK[r.label])) for r in order] + [
            (r, peers.get(CONNECT_PEER)) for r in order if r.label == TABLE]:
        if peer is None:
            continue
        what = f"archive ({r.label}) / peer ({peer.sink}) throughput"
        verdict(f"{what}, whole spark-submit", peer.spark.seconds / r.spark.seconds,
                TARGET_PEER_WHOLE)
        if r.spark.log.job_s:
            verdict(f"{what}, without start-up", peer.query_s / r.spark.log.job_s,
                    TARGET_PEER_QUERY_TEXT if peer.sink == "text" else TARGET_PEER_QUERY)
        if r.label != "none":
            verdict(f"archive ({r.label}) output / peer ({peer.sink}) output",
                    r.output_bytes / peer.output_bytes, 1.0, higher_is_better=False)
        say(f"  CPU seconds per GiB (processes + broker): archive ({r.label}) "
            f"{cpu_per_gib(r.spark, mib):,.1f}, peer ({peer.sink}) "
            f"{peer_cpu_per_gib(peer, mib):,.1f}")
    for r in order:
        if r.spark.log.job_s:
            verdict(f"archive ({r.label}) without start-up / ConsumerPerformance",
                    mib / r.spark.log.job_s / best.mib_s, TARGET_CONSUMER)
    largest = max(r.largest_slice for r in order) * args.message_bytes
    verdict(f"peak RSS of the Spark job's process tree, MiB, largest slice "
            f"{largest / MIB:,.0f} MiB", max(r.spark.memory.peak_total_mib for r in order),
            TARGET_PEAK_RSS_MIB, higher_is_better=False)
    if PARTITIONED in runs:
        describe_partitioned(runs[PARTITIONED], runs["default"], mib, messages)


def peer_rows(peers: dict[str, PeerRun], runs: dict[str, ArchiveRun], mib: float,
              best: ConsumerRun) -> None:
    """The peer beside each archive run: text beside compression none, parquet (Spark's
    default codec, snappy) beside the compressed ones."""
    pairs = [(r, peers.get(PEER_SINK[r.label])) for r in runs.values()
             if r.label in PEER_SINK]
    rows = [
        ("peer (Structured Streaming availableNow) sink", lambda r, p: p.sink),
        ("peer, spark-submit alone: seconds", lambda r, p: f"{p.spark.seconds:,.1f}"),
        ("peer, spark-submit alone: MiB/s", lambda r, p: f"{mib / p.spark.seconds:,.1f}"),
        ("peer, query without start-up: MiB/s", lambda r, p: f"{mib / p.query_s:,.1f}"),
        ("ratio peer/consumer, spark-submit alone",
         lambda r, p: f"{mib / p.spark.seconds / best.mib_s:.3f}"),
        ("ratio archive/peer, spark-submit alone",
         lambda r, p: f"{p.spark.seconds / r.spark.seconds:.3f}"),
        ("ratio archive/peer, spark-submit + our commit",
         lambda r, p: f"{p.spark.seconds / (r.spark.seconds + r.commit_s):.3f}"),
        ("ratio archive/peer, without start-up",
         lambda r, p: f"{p.query_s / r.spark.log.job_s:.3f}" if r.spark.log.job_s else "?"),
        # CPU seconds of each spark-submit's processes: what a busy machine's noise inflates least
        ("ratio archive/peer, CPU seconds (peer's/archive's)",
         lambda r, p: f"{sum(p.spark.memory.cpu_s.values()) / sum(r.spark.memory.cpu_s.values()):.3f}"),
        # CPU seconds per GiB of payload, every process of each spark-submit plus the broker
        ("archive: CPU seconds per GiB (its processes + broker)",
         lambda r, p: f"{cpu_per_gib(r.spark, mib):,.1f}"),
        ("peer: CPU seconds per GiB (its processes + broker)",
         lambda r, p: f"{cpu_per_gib(p.spark, mib):,.1f}"),
        ("archive: written, MiB", lambda r, p: f"{r.output_bytes / MIB:,.1f}"),
        ("peer: written locally, MiB", lambda r, p: f"{p.output_bytes / MIB:,.1f}"),
        ("peer: peak RSS, process tree, MiB", lambda r, p: f"{p.spark.memory.peak_total_mib:,.0f}"),
        ("peer: CPU seconds, Spark JVM", lambda r, p: f"{p.spark.memory.cpu_s.get('jvm', 0):,.1f}"),
        ("peer: CPU seconds, broker", lambda r, p: f"{p.spark.services_cpu_s.get('kafka', 0):,.1f}"),
    ]
    for name, value in rows:
        row(name, *(value(r, p) if p else "-" for r, p in pairs))
    row("uptime after the peer's spark-submit", "")
    for p in {p.sink: p for _, p in pairs if p}.values():
        say(f"    {p.sink}: {p.load}")


def cpu_per_gib(run: SparkRun, mib: float) -> float:
    """The archive's processes (spark-submit's tree, or the Connect client and server) and
    the broker, per GiB."""
    return (sum(run.memory.cpu_s.values()) + run.services_cpu_s.get("kafka", 0.0)
            + run.services_cpu_s.get("spark-connect", 0.0)) / (mib / 1024)


def one_message(bootstrap: str, topic: str, pool: Path, size: int, create: bool) -> None:
    """One message of `size` bytes into `topic` (made first if `create`)."""
    from kafka import KafkaProducer

    if create:
        create_topic(bootstrap, topic, 1)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, enable_idempotence=False)
    producer.send(topic, pool.read_bytes()[:size])
    producer.flush()
    producer.close()


def describe_connect(connect: dict[str, ArchiveRun], runs: dict[str, ArchiveRun],
                     tiny: ArchiveRun | None, tiny_connect: ArchiveRun | None,
                     tiny_connect_cold: ArchiveRun | None, peers: dict[str, PeerRun],
                     mib: float) -> None:
    """Issue 43's figures: each run over Spark Connect beside the same run's spark-submit
    and the peer, one invocation."""
    say("over Spark Connect (the client a process of its own, as the Airflow task; the "
        "server's CPU counted):")
    row("", "whole s", "job s", "client RSS MiB", "CPU-s/GiB", "x spark-submit")
    for label, run in connect.items():
        classic = runs.get(label)
        row(label, f"{run.total_s:.2f}", f"{run.spark.log.job_s or 0:.2f}",
            f"{run.spark.memory.peak_total_mib:,.0f}", f"{cpu_per_gib(run.spark, mib):.1f}",
            f"{classic.total_s / run.total_s:.2f}" if classic else "-")
        if classic:
            row(f"  {label}, spark-submit", f"{classic.total_s:.2f}",
                f"{classic.spark.log.job_s or 0:.2f}",
                f"{classic.spark.memory.peak_total_mib:,.0f}",
                f"{cpu_per_gib(classic.spark, mib):.1f}", "")
        peer = peers.get("parquet")
        if peer is not None and label != "none":  # issue 43: 3x at 512 MiB, 2x at 2 GiB
            verdict(f"{label}: whole run over Connect vs the parquet peer's, x",
                    (peer.spark.seconds) / run.total_s, 3.0 if mib < 1536 else 2.0)
        if mib >= 1536:
            verdict(f"{label}: CPU seconds per GiB over Connect", cpu_per_gib(run.spark, mib),
                    7.0, higher_is_better=False)
        verdict(f"{label}: the client's peak RSS, MiB", run.spark.memory.peak_total_mib, 300,
                higher_is_better=False)
    if tiny is not None and tiny_connect is not None:
        row("one message", f"{tiny_connect.total_s:.2f}", "", f"{tiny_connect.spark.memory.peak_total_mib:,.0f}",
            "", f"{tiny.total_s / tiny_connect.total_s:.2f}")
        row("  one message, spark-submit", f"{tiny.total_s:.2f}", "",
            f"{tiny.spark.memory.peak_total_mib:,.0f}", "", "")
        if tiny_connect_cold is not None:
            row("  one message, the session's first job", f"{tiny_connect_cold.total_s:.2f}",
                "", f"{tiny_connect_cold.spark.memory.peak_total_mib:,.0f}", "", "")
        say(f"  one message over Connect: plan {tiny_connect.plan_s:.2f} s, client "
            f"{tiny_connect.spark.seconds:.2f} s (of which connect "
            f"{tiny_connect.spark.log.session_s or 0:.2f} s, job "
            f"{tiny_connect.spark.log.job_s or 0:.2f} s), commit {tiny_connect.commit_s:.2f} s")
        verdict("one-message run over Connect (plan + job + commit), seconds",
                tiny_connect.total_s, 2.0, higher_is_better=False)
    say(f"  uptime: {uptime()}")


def verdict(what: str, value: float, target: float, higher_is_better: bool = True) -> None:
    met = value >= target if higher_is_better else value <= target
    say(f"  target {what} {'>=' if higher_is_better else '<='} {target}: "
        f"{'MET' if met else 'NOT MET'} ({value:.3f}); uptime: {uptime()}")


# --- the same run on a cluster -----------------------------------------------------------

def event_log_conf(folder: Path) -> dict[str, str]:
    """An uncompressed, single-file event log: where the per-task figures come from."""
    folder.mkdir(parents=True, exist_ok=True)
    return {"spark.eventLog.enabled": "true", "spark.eventLog.dir": f"file://{folder}",
            "spark.eventLog.compress": "false", "spark.eventLog.rolling.enabled": "false"}


@dataclass
class TaskSpread:
    """The archive stage's tasks as Spark's event log records them."""
    executors: dict[str, list[float]]  # executor id -> its successful tasks' seconds
    failed: int

    @classmethod
    def read(cls, folder: Path) -> TaskSpread:
        executors, failed = {}, 0
        for path in folder.glob("[!.]*"):  # app-<id> on a cluster, local-<id> in local mode
            for line in path.read_text().splitlines():
                event = json.loads(line)
                if event["Event"] != "SparkListenerTaskEnd":
                    continue
                info = event["Task Info"]
                if event["Task End Reason"]["Reason"] != "Success":
                    failed += 1
                    continue
                executors.setdefault(info["Executor ID"], []).append(
                    (info["Finish Time"] - info["Launch Time"]) / 1000)
        return cls(executors, failed)

    @property
    def durations(self) -> list[float]:
        return sorted(d for ds in self.executors.values() for d in ds)

    def describe(self) -> str:
        d = self.durations
        if not d:
            return "no task in the event log"
        median = statistics.median(d)
        busy = {ex: sum(ds) for ex, ds in sorted(self.executors.items())}
        return (f"{len(d)} tasks: " + ", ".join(f"executor {ex} {len(self.executors[ex])} "
                                                 f"({busy[ex]:.1f} s busy)" for ex in busy)
                + f"; task seconds min {d[0]:.1f} / median {median:.1f} / max {d[-1]:.1f}, "
                  f"skew max/median {d[-1] / median:.2f}; executors' busy time max/min "
                  f"{max(busy.values()) / max(min(busy.values()), 1e-9):.2f}"
                + (f"; {self.failed} failed attempts" if self.failed else ""))


def manifest_files(s3, plan_url: str, archive_root: str) -> dict[str, str]:
    """A run's files (path below its archive root) and their CRC32C, from its manifest."""
    bucket, key = plan_url[len("s3://"):].split("/", 1)
    manifest = json.loads(s3.get_object(Bucket=bucket, Key=key.replace("plan.json", "manifest.json"))
                          ["Body"].read())
    return {f["url"][len(archive_root) + 1:]: f["crc32c"]
            for row in manifest["slices"] for f in row["files"]}


def describe_cluster(master: str, local: ArchiveRun, cluster: ArchiveRun, spreads: dict,
                     same_bytes: bool, mib: float, messages: int) -> None:
    say()
    say(f"  cluster ({master}) vs local[2], both default codec, same topic:")
    row("", "local[2]", "cluster")
    for name, value in (("spark-submit alone", lambda r: r.spark.seconds),
                        ("Spark job without start-up", lambda r: r.spark.log.job_s)):
        a, b = value(local), value(cluster)
        if a and b:
            row(f"{name}: seconds", f"{a:,.1f}", f"{b:,.1f}")
            row(f"{name}: MiB/s", f"{mib / a:,.1f}", f"{mib / b:,.1f}")
            row(f"{name}: messages/s", f"{messages / a:,.0f}", f"{messages / b:,.0f}")
    row("files written", str(local.files), str(cluster.files))
    for label in ("local[2]", "cluster"):
        say(f"  tasks, {label}: {spreads[label].describe()}")
    say(f"  the cluster wrote the same bytes as local[2] (manifest CRC32C of every file): "
        f"{'yes' if same_bytes else 'NO'}")


def describe_partitioned(part: ArchiveRun, backup: ArchiveRun, mib: float, messages: int) -> None:
    """The partitioned job (JSON parser, hourly event-time layout) next to the backup job,
    both with the default codec, on the same topic."""
    say()
    say("  partitioned (JSON parser on ts, hourly) vs backup, both default codec:")
    row("", "backup", "partitioned", "ratio")
    for name, value in (("spark-submit alone", lambda r: r.spark.seconds),
                        ("Spark job without start-up", lambda r: r.spark.log.job_s)):
        b, p = value(backup), value(part)
        if b and p:
            row(f"{name}: MiB/s", f"{mib / b:,.1f}", f"{mib / p:,.1f}", f"{b / p:.3f}")
            row(f"{name}: messages/s", f"{messages / b:,.0f}", f"{messages / p:,.0f}", "")
    row("files written", str(backup.files), str(part.files), "")
    ratio = backup.spark.seconds / part.spark.seconds
    say(f"  target partitioned/backup >= {TARGET_PARTITIONED_RATIO}: "
        f"{'MET' if ratio >= TARGET_PARTITIONED_RATIO else 'NOT MET'} ({ratio:.3f}, "
        f"spark-submit alone)")


# --- main --------------------------------------------------------------------------------------

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gigabytes", type=float, default=2.0,
                        help="GiB of message payload to produce and archive (default 2.0)")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--message-bytes", type=int, default=1024)
    parser.add_argument("--driver-memory", default=None,
                        help="spark-submit --driver-memory (default: none, as the DAG: Spark's 1g)")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="extra spark-submit --conf (repeatable), to try a setting the DAG "
                             "does not use; none by default")
    parser.add_argument("--partitioned", action="store_true",
                        help="also run the partitioned group (JSON parser on the log lines' ts, "
                             "hourly event-time layout, default codec) on the same topic and "
                             "report its throughput next to the backup job's")
    parser.add_argument("--compressions", type=lambda text: text.split(","),
                        default=["none", "fast", "snappy", "default"],
                        help="the archive runs, in order (default none,fast,snappy,default): "
                             "the peer writes text beside none, parquet beside the first "
                             "compressed one; `table`: the group as an Iceberg table (parquet "
                             "key_value, SQLite catalog), the peer into an Iceberg table")
    parser.add_argument("--profile", type=Path, default=None, metavar="DIR",
                        help="record each archive run's spark-submit process tree with py-spy "
                             "(its Python driver and workers) into DIR/<compression>.txt "
                             "(collapsed stacks), and print the top functions")
    parser.add_argument("--skip-peer", action="store_true",
                        help="skip the Structured Streaming peer (text and parquet)")
    parser.add_argument("--level", type=int, default=None,
                        help="format.level of the default codec's zlib (default: the config's "
                             "default, 6)")
    parser.add_argument("--plan-partitions", type=int, default=None, metavar="N",
                        help="also time planning N partitions (20 per topic) from synthetic "
                             "offsets; with --gigabytes 0, only that")
    parser.add_argument("--skip-tiny", action="store_true",
                        help="skip the one-message run that measures Spark start-up")
    parser.add_argument("--keep", action="store_true",
                        help="keep the topics and the S3 objects (printed at the end)")
    parser.add_argument("--master", default=None,
                        help="also run the default-codec archive on this Spark master (e.g. the "
                             "local standalone cluster, spark://127.0.0.1:17077) and print it "
                             "next to local[2], with the per-task skew")
    parser.add_argument("--connect", action="store_true",
                        help="also run each archive run, and the one-message run, over the "
                             "local Spark Connect server (localservices spark-connect, started "
                             "if needed): the client a process of its own, printed beside "
                             "spark-submit (issue 43)")
    parser.add_argument("--replay", action="store_true",
                        help="also replay the default-codec archive into a new topic and print "
                             "the replay's throughput")
    parser.add_argument("--format", choices=("json", "avro"), default="json",
                        help="avro (with --compressions table): the typed tables benchmark "
                             "(tests/support/bench/typed_tables.py) on --gigabytes of Avro "
                             "orders, beside their JSON and the Kafka Connect sink")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="  %(levelname)s %(name)s: %(message)s")
    if args.format == "avro":
        from tests.support.bench import typed_tables

        return typed_tables.main(["--megabytes", str(args.gigabytes * 1024), "--partitions",
                                  str(args.partitions), *(["--skip-peer"] if args.skip_peer
                                                          else []),
                                  *(["--keep"] if args.keep else [])])

    if args.plan_partitions:
        with tempfile.TemporaryDirectory() as scratch:
            plan_benchmark(args.plan_partitions, Path(scratch))
        if not args.gigabytes:
            return 0
    service_env = localservices.local_env()
    local_cluster = args.master == localservices.spark_master_url(service_env)
    wanted = (["kafka", "s3"] + ([s.name for s in localservices.SPARK_SERVICES] if local_cluster else [])
              + (["spark-connect"] if args.connect else []))
    connect_url = localservices.spark_connect_url(service_env) if args.connect else None
    started_services = [name for name in wanted if localservices.SERVICES[name].start(service_env)]
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    work = Path(tempfile.mkdtemp(prefix=f"kafka-archive-bench-{stamp}-"))
    # Airflow connections and config references, as the local Airflow gets them; set before
    # anything imports Airflow
    os.environ.update(localservices.client_env(service_env, work / "airflow-home"))
    os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")
    bootstrap = localservices.kafka_bootstrap(service_env)
    bucket = service_env["KAFKA_ARCHIVE_S3_BUCKET"]
    s3 = localservices.s3_client(service_env)
    topic, tiny_topic, replay_topic = f"bench-{stamp}", f"bench-{stamp}-tiny", f"bench-{stamp}-replay"
    prefix = f"{BUCKET_PREFIX}{stamp}-"

    spark_args = ["--driver-memory", args.driver_memory] if args.driver_memory else []
    for conf in args.conf:
        spark_args += ["--conf", conf]
    messages = int(args.gigabytes * (1 << 30)) // args.message_bytes
    payload = messages * args.message_bytes
    free = shutil.disk_usage(localservices.SERVICES_DIR).free
    needed = int(payload * 3.3)  # Kafka + uncompressed archive + compressed + temp files
    say(f"== kafka-archive benchmark {stamp}: {payload / MIB:,.0f} MiB as {messages:,} JSON log "
        f"lines of {args.message_bytes} B on {args.partitions} partitions (work dir {work})")
    if spark_args:
        say(f"  spark-submit gets, beyond what ArchiveOperator passes: {' '.join(spark_args)}")
    if started_services:
        say(f"  started {', '.join(started_services)} (will stop them at the end)")
    if free < needed:
        say(f"  not enough disk: {free / MIB:,.0f} MiB free, about {needed / MIB:,.0f} MiB needed")
        return 2

    finished = False
    try:
        # warm the imports so the first timed plan does not pay for them
        from kafka_archive.airflow import operators, tasks  # noqa: F401
        quiet_logging()

        pool = work / "payloads.jsonl"
        write_pool(pool, args.message_bytes)
        create_topic(bootstrap, topic, args.partitions)
        produced, per_partition = produce(bootstrap, topic, messages, pool, args.message_bytes)
        say(f"produce: {produced.seconds:.1f} s, {produced.msg_s:,.0f} msg/s, "
            f"{produced.mib_s:,.1f} MiB/s (Kafka ProducerPerformance, acks=1, no compression; "
            f"pool of {POOL_SIZE:,} distinct lines); messages per partition "
            f"{min(per_partition.values()):,} to {max(per_partition.values()):,}")

        consumers = [consumer_perf(bootstrap, topic, messages)]
        describe_consumer(1, consumers[0])

        runs, peers, connect = {}, {}, {}
        # over Connect, every run is a group of one deployment (one archive root): its
        # session, warm after its first job, as a scheduled deployment's is
        connect_root = f"s3://{bucket}/{prefix}connect"
        tiny_connect_cold = None
        if connect_url and not args.skip_tiny:
            say("archive over Spark Connect, one message, the deployment session's first job "
                "(its Python workers start):")
            one_message(bootstrap, tiny_topic, pool, args.message_bytes, create=True)
            tiny_connect_cold = archive_run(
                "tiny-first", write_config(work / "tiny-connect", tiny_topic, connect_root,
                                           "default", group="tiny"),
                1, spark_args, work, group="tiny", connect=connect_url)
            describe_spark(tiny_connect_cold, args.message_bytes)
        # each archive run and its peer back to back, so both see the same machine
        for compression in args.compressions:
            peer_sink = PEER_SINK[compression]
            # the default-codec run is the cluster's reference: its tasks are logged too
            events = event_log_conf(work / "events-local") if args.master and compression == "default" else None
            config_path = write_config(work / compression, topic,
                                       f"s3://{bucket}/{prefix}{compression}", compression,
                                       spark_conf=events, level=args.level)
            say(f"archive, compression={compression}:")
            runs[compression] = archive_run(compression, config_path, messages, spark_args,
                                            work, measure_idle=compression == args.compressions[0],
                                            profile=args.profile)
            describe_spark(runs[compression], payload)
            if connect_url:
                say(f"archive over Spark Connect, compression={compression}:")
                connect[compression] = archive_run(
                    compression, write_config(work / f"{compression}-connect", topic,
                                              connect_root, compression, group=compression,
                                              level=args.level),
                    messages, spark_args, work, group=compression, connect=connect_url)
                describe_spark(connect[compression], payload)
            if not args.skip_peer and peer_sink not in peers:
                say(f"peer, Structured Streaming availableNow -> {peer_sink}:")
                peers[peer_sink] = peer_run(peer_sink, bootstrap, topic, messages, spark_args,
                                            work)
                describe_peer(peers[peer_sink], payload)
            if not args.skip_peer and compression == TABLE:
                say("peer, Iceberg's Kafka Connect sink (standalone worker) -> iceberg:")
                peers[CONNECT_PEER] = connect_peer_run(bootstrap, topic, messages, work)
                describe_peer(peers[CONNECT_PEER], payload)

        if args.master:
            say(f"archive, default codec, on {args.master}:")
            conf = {**(localservices.spark_cluster_conf(service_env) if local_cluster else {}),
                    **event_log_conf(work / "events-cluster")}
            runs["cluster"] = archive_run(
                "cluster", write_config(work / "cluster", topic, f"s3://{bucket}/{prefix}cluster",
                                        "default", spark_conf=conf),
                messages, spark_args, work, master=args.master)
            describe_spark(runs["cluster"], payload)

        if args.partitioned:
            say("archive, partitioned group (JSON parser), default codec:")
            runs[PARTITIONED] = archive_run(
                PARTITIONED, write_config(work / PARTITIONED, topic,
                                          f"s3://{bucket}/{prefix}{PARTITIONED}", "default",
                                          PARTITIONED), messages, spark_args, work,
                group=PARTITIONED)
            describe_spark(runs[PARTITIONED], payload)

        if args.replay:
            say(f"replay of the default-codec archive into {replay_topic}:")
            replay_run(work / "default" / "kafka-archive.yaml", topic, replay_topic,
                       args.partitions, bootstrap, messages, payload, spark_args, work,
                       pool, args.message_bytes, args.profile)

        consumers.append(consumer_perf(bootstrap, topic, messages))
        describe_consumer(2, consumers[1])

        tiny = tiny_connect = None
        if not args.skip_tiny:
            one_message(bootstrap, tiny_topic, pool, args.message_bytes,
                        create=tiny_connect_cold is None)
            say("archive, one message (Spark start-up overhead):")
            tiny = archive_run("tiny", write_config(work / "tiny", tiny_topic,
                                                    f"s3://{bucket}/{prefix}tiny", "default"),
                               1 + (tiny_connect_cold is not None), spark_args, work)
            describe_spark(tiny, args.message_bytes)
            if connect_url:
                say("archive over Spark Connect, one message (the deployment's session warm):")
                tiny_connect = archive_run(
                    "tiny", work / "tiny-connect" / "kafka-archive.yaml", 1, spark_args, work,
                    group="tiny", connect=connect_url)
                describe_spark(tiny_connect, args.message_bytes)

        report(args, topic, messages, payload, produced, consumers, runs, tiny, peers)
        if connect_url:
            describe_connect(connect, runs, tiny, tiny_connect, tiny_connect_cold, peers,
                             payload / MIB)
        if args.master:
            same = (manifest_files(s3, runs["default"].plan_url, f"s3://{bucket}/{prefix}default")
                    == manifest_files(s3, runs["cluster"].plan_url, f"s3://{bucket}/{prefix}cluster"))
            describe_cluster(args.master, runs["default"], runs["cluster"],
                             {"local[2]": TaskSpread.read(work / "events-local"),
                              "cluster": TaskSpread.read(work / "events-cluster")},
                             same, payload / MIB, messages)
        finished = True
    finally:
        if args.keep:
            say(f"kept: topics {topic}, {tiny_topic}, {replay_topic}; s3://{bucket}/{prefix}*; "
                f"work dir {work}")
        else:
            deleted = delete_prefix(s3, bucket, prefix)
            delete_topics(bootstrap, [topic, tiny_topic, replay_topic])
            say(f"cleaned up: {deleted} S3 objects under s3://{bucket}/{prefix}*, "
                f"topics {topic}, {tiny_topic} and {replay_topic}")
            if finished:
                shutil.rmtree(work, ignore_errors=True)
            else:
                say(f"the run failed: logs are in {work}")
        for name in reversed(started_services):
            localservices.SERVICES[name].stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
