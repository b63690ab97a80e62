"""The compaction benchmark (issue 44): a day of 15-minute runs of a key_value table
group (96 runs of 8 partitions by default) on a simulated clock, each run the library's
own plan, the archive job's tasks (in this process: no Spark start per run) and commit,
against the local Kafka, a local archive root and a SQLite Iceberg catalog; then the
group's compaction at the end of the day. Prints the table's files before and after
against the issue's bound (8 x ceil(bytes / target) + the files of the last
compact_after), and Spark SQL through Iceberg's runtime, in one session: a count and a
filtered scan (one Kafka partition, an offset range) over the day's last run snapshot
(time travel) and over the compacted one, best and median of 5 each.

With --peers, the same day for the two peers, and the files each leaves in its table's
current snapshot: Structured Streaming into Iceberg (tests/support/bench/peer.py's query)
with one micro-batch per 15 minutes of data (availableNow with maxOffsetsPerTrigger of a
run's messages, over the same topic), and Iceberg's Kafka Connect sink committing once per
run's messages (a topic of its own, fed a run at a time, each waited for in the table).

    python -m tests.support.bench.compaction [--runs 96] [--partitions 8] [--kib-per-run 512]
        [--peers]
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import statistics
import subprocess
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from tests.support import localservices
from tests.support.bench.connect_peer import ConnectSink
from tests.support.bench.kafka_data import create_topic, write_pool

START = datetime(2026, 3, 1, tzinfo=timezone.utc)
EVERY = timedelta(minutes=15)
GROUP = "day"
ICEBERG_JARS = localservices.CACHE / "jars" / "spark-iceberg"


def write_config(work: Path, topic: str, target: int) -> Path:
    path = work / "kafka-archive.yaml"
    path.write_text(f"""\
kafka: {{bootstrap_servers: "{localservices.kafka_bootstrap(localservices.local_env())}"}}
archive_root: file://{work}/archive
token_root: {work}/tokens
iceberg_catalogs: {{local: {{type: sql, uri: 'sqlite:///{work}/catalog.db'}}}}
groups:
  {GROUP}:
    topics: {{include: ["{topic}"]}}
    format: {{kind: parquet}}
    table: {{namespace: bench, compact_after: 1h, target_file_size: {target}}}
""")
    return path


def produce(bootstrap: str, topic: str, partitions: int, lines: list[bytes], count: int,
            offset: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "1"})
    for i in range(count):
        producer.produce(topic, lines[(offset + i) % len(lines)], partition=i % partitions)
        if i % 10_000 == 0:
            producer.poll(0)
    producer.flush()


def a_day(config, storage, tables, tokens, runs: int, bootstrap: str, topic: str,
          partitions: int, lines: list[bytes], per_run: int) -> float:
    """The day's runs; seconds they took (producing excluded)."""
    from kafka_archive import brokers, layout
    from kafka_archive.archive import job
    from kafka_archive.commit import protocol
    from kafka_archive.plan import runs as starting

    took = 0.0
    for i in range(runs):
        produce(bootstrap, topic, partitions, lines, per_run, i * per_run)
        now = START + i * EVERY
        started = time.perf_counter()
        consumer = brokers.consumer(config)
        try:
            plan = starting.start(config, GROUP, f"run-{i:03d}", storage, tokens, consumer, now,
                                  tables=tables)
        finally:
            consumer.close()
        url = layout.run_file(config.archive_root, GROUP, plan.run_id, "plan.json")
        job.archive_plan(config, url, storage, lambda: brokers.consumer(config),
                         lambda p, slices: list(job.ArchiveTask(config, p, [slices])(0)))
        protocol.commit(config, plan, storage, tokens, now, tables)
        took += time.perf_counter() - started
    return took


def spark_session(work: Path):
    """local[2] with Iceberg's runtime and Spark's Kafka source; the catalog `local` is the
    group's (pyiceberg's, config), `peer` the Structured Streaming peer's."""
    from kafka_archive import spark as spark_module
    from pyspark.sql import SparkSession

    jars = [*map(str, sorted(ICEBERG_JARS.glob("*.jar"))), *spark_module.kafka_source_jars()]
    builder = (SparkSession.builder.master("local[2]").appName("compaction-benchmark")
               .config("spark.jars", ",".join(jars)).config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false"))
    for name, database, warehouse in (("local", "catalog.db", "archive"),
                                      ("peer", "peer-catalog.db", "peer-warehouse")):
        prefix = f"spark.sql.catalog.{name}"
        builder = (builder.config(prefix, "org.apache.iceberg.spark.SparkCatalog")
                   .config(f"{prefix}.type", "jdbc").config(f"{prefix}.jdbc.schema-version", "V1")
                   .config(f"{prefix}.uri", f"jdbc:sqlite:{work}/{database}")
                   .config(f"{prefix}.warehouse", f"file://{work}/{warehouse}")
                   .config(f"{prefix}.cache-enabled", "false"))
    return builder.getOrCreate()


def streaming_day(spark, bootstrap: str, topic: str, per_run: int, work: Path) -> dict:
    """peer.py's Iceberg query over the day's topic, a run's messages a micro-batch: what a
    15-minute processing-time trigger commits in a day. Its table's files and snapshots."""
    started = time.perf_counter()
    query = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", topic).option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", per_run).option("includeHeaders", "true").load()
             .writeStream.option("checkpointLocation", str(work / "peer-checkpoint"))
             .trigger(availableNow=True).format("iceberg").outputMode("append")
             .partitionBy("partition").option("fanout-enabled", "true")
             .toTable("peer.bench.events"))
    query.awaitTermination()
    seconds = time.perf_counter() - started
    files = spark.sql("SELECT count(*) AS n FROM peer.bench.events.files").first().n
    snapshots = spark.sql("SELECT count(*) AS n FROM peer.bench.events.snapshots").first().n
    rows = spark.sql("SELECT count(*) AS n FROM peer.bench.events").first().n
    return {"files": files, "snapshots": snapshots, "rows": rows, "seconds": seconds}


def connect_day(bootstrap: str, topic: str, partitions: int, lines: list[bytes], runs: int,
                per_run: int, work: Path) -> dict:
    """Iceberg's Kafka Connect sink on a topic of its own, fed a run's messages at a time,
    each waited for in the table before the next: a commit per run, as at a 15-minute
    commit interval (its default is 5 minutes: three a run)."""
    create_topic(bootstrap, topic, partitions)
    started = time.perf_counter()
    with ConnectSink(bootstrap, topic, work, commit_interval_ms=1000, tasks=2) as sink:
        for i in range(runs):
            produce(bootstrap, topic, partitions, lines, per_run, i * per_run)
            table = sink.committed((i + 1) * per_run)
        return {"files": len(list(table.scan().plan_files())),
                "snapshots": len(table.metadata.snapshots),
                "rows": int(table.current_snapshot().summary["total-records"]),
                "seconds": time.perf_counter() - started}


def timed_queries(spark, table: str, snapshot: int, partition: int, low: int, high: int,
                  times: int = 5) -> dict[str, list[float]]:
    at = f"{table} VERSION AS OF {snapshot}"
    queries = {"count": f"SELECT count(*) FROM {at}",
               "filtered scan": f"SELECT count(*), sum(length(value)) FROM {at} WHERE "
                                f"kafka.partition = {partition} AND kafka.offset >= {low} "
                                f"AND kafka.offset < {high}"}
    found = {}
    for name, sql in queries.items():
        spark.sql(sql).collect()  # warm: the first planning loads classes
        seconds = []
        for _ in range(times):
            started = time.perf_counter()
            result = spark.sql(sql).collect()
            seconds.append(time.perf_counter() - started)
        found[name] = seconds
        found[name + " result"] = [tuple(r) for r in result]
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=96)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--kib-per-run", type=int, default=512)
    parser.add_argument("--message-bytes", type=int, default=1024)
    parser.add_argument("--target-file-size", type=int, default=256 << 20)
    parser.add_argument("--peers", action="store_true",
                        help="also a day of each peer, and the files it leaves")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    service_env = localservices.local_env()
    started_kafka = localservices.SERVICES["kafka"].start(service_env)
    work = Path(tempfile.mkdtemp(prefix="kafka-archive-compaction-bench-"))
    os.environ.update(localservices.client_env(service_env, work / "airflow-home"))
    try:
        from kafka_archive import config as config_module
        from kafka_archive.commit import compaction, iceberg
        from kafka_archive.storage import Storage
        from kafka_archive.tokens import LocalTokenStore

        bootstrap = localservices.kafka_bootstrap(service_env)
        topic = f"compaction-bench-{int(time.time())}"
        create_topic(bootstrap, topic, args.partitions)
        pool = work / "lines.jsonl"
        write_pool(pool, args.message_bytes)
        lines = pool.read_bytes().splitlines()
        config = config_module.load(write_config(work, topic, args.target_file_size))
        tables = iceberg.Tables(config)
        storage, tokens = Storage(), LocalTokenStore(work / "tokens")
        per_run = args.kib_per_run * 1024 // args.message_bytes
        print(f"== compaction benchmark: {args.runs} runs of {per_run:,} messages of "
              f"{args.message_bytes} B on {args.partitions} partitions, every 15 minutes of a "
              f"simulated day (work dir {work})")
        took = a_day(config, storage, tables, tokens, args.runs, bootstrap, topic,
                     args.partitions, lines, per_run)
        table = tables.find(GROUP, topic)
        before = table.current_snapshot().snapshot_id
        files_before = list(table.scan().plan_files())
        size = sum(t.file.file_size_in_bytes for t in files_before)
        print(f"the day's runs: {took:.1f} s ({took / args.runs:.2f} s a run: plan, tasks, commit)")

        end = START + args.runs * EVERY
        started = time.perf_counter()
        done = compaction.compact(config, storage, tables, GROUP, "end-of-day", end)
        compact_s = time.perf_counter() - started
        table.refresh()
        files_after = list(table.scan().plan_files())
        # files of runs planned within compact_after (1h) of the end: not compacted yet
        recent = args.partitions * sum(1 for i in range(args.runs)
                                       if START + i * EVERY >= end - timedelta(hours=1))
        bound = args.partitions * math.ceil(size / args.target_file_size) + recent
        print(f"compaction: {compact_s:.1f} s, {done['rows']} rows in {done['files_before']} "
              f"files -> {done['files_after']} files")
        print(f"files in the current snapshot: {len(files_before)} before, {len(files_after)} "
              f"after; bound {args.partitions} x ceil({size / 2**20:.1f} MiB / "
              f"{args.target_file_size / 2**20:.0f} MiB) + {recent} of the last hour = {bound}: "
              f"{'met' if len(files_after) <= bound else 'NOT met'}")

        spark = spark_session(work)
        try:
            name = f"local.bench.`{topic}`"
            ends = {r.p: r.n for r in spark.sql(
                f"SELECT kafka.partition AS p, max(kafka.offset) AS n FROM {name} "
                f"GROUP BY 1").collect()}
            partition = min(3, args.partitions - 1)
            low = ends[partition] // 2
            high = low + max(1, ends[partition] // args.runs)
            old = timed_queries(spark, name, before, partition, low, high)
            new = timed_queries(spark, name, table.current_snapshot().snapshot_id, partition,
                                low, high)
            peers = {}
            if args.peers:
                peers["Structured Streaming into Iceberg, a micro-batch a run"] = streaming_day(
                    spark, bootstrap, topic, per_run, work)
        finally:
            spark.stop()
        uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
        print(f"Spark SQL (local[2], Iceberg runtime), best / median of 5; uptime: {uptime}")
        for query in ("count", "filtered scan"):
            assert old[query + " result"] == new[query + " result"], (old, new)
            ratio = min(old[query]) / min(new[query])
            print(f"  {query:14} before {min(old[query]):6.3f} / {statistics.median(old[query]):6.3f} s"
                  f"   after {min(new[query]):6.3f} / {statistics.median(new[query]):6.3f} s"
                  f"   {ratio:5.1f}x faster (target 5x: {'met' if ratio >= 5 else 'NOT met'})"
                  f"   result {new[query + ' result'][0]}")
        if args.peers:
            peers["Iceberg's Kafka Connect sink, a commit a run"] = connect_day(
                bootstrap, topic + "-connect", args.partitions, lines, args.runs, per_run,
                work / "connect")
            print(f"files in the current snapshot after the day ({args.runs} runs of "
                  f"{per_run * args.runs:,} messages in all):")
            print(f"  kafka-archive's table group: {len(files_before)} before compaction, "
                  f"{len(files_after)} after")
            for name, peer in peers.items():
                assert peer["rows"] == per_run * args.runs, (name, peer)
                verdict = "met" if len(files_after) <= peer["files"] else "NOT met"
                print(f"  {name}: {peer['files']} files in {peer['snapshots']} snapshots, "
                      f"{peer['seconds']:.1f} s (ours after compaction <= theirs: {verdict})")
    finally:
        if started_kafka:
            localservices.SERVICES["kafka"].stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
