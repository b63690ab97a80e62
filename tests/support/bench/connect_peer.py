"""The peer users pick for tables today (issue 44): Iceberg's own Kafka Connect sink,
run by a standalone Connect worker of the broker's version (.cache/jars/kafka) with the
sink as a plugin (.cache/jars/iceberg-connect, `scripts/install --for-peers`), draining a
topic once into an Iceberg table of the key_value shape's columns (the value as bytes,
the Kafka metadata as a struct `kafka`: Connect's HoistField and the sink's
KafkaMetadataTransform), partitioned by Kafka partition, in a JdbcCatalog on SQLite
whose warehouse is a local folder. Exactly once as its docs give it: the sink's control
topic (made here, one partition, as they ask) and its coordinator's commits, which move
the consumer offsets in the same Kafka transaction (KIP-447).

    python -m tests.support.bench.connect_peer --bootstrap HOST:PORT --topic TOPIC \\
        --rows N --work DIR [--commit-interval-ms 10000] [--tasks 2]

Prints one line `peer-result {"query_s": ..., "rows": ..., "files": ..., "snapshots": ...}`:
query_s from the sink task's start (the worker's log says it) to the commit that made
the table hold every row, without the worker's start-up; then stops the worker.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import threading
import time
from pathlib import Path

from tests.support import localservices

KAFKA_JARS = localservices.CACHE / "jars" / "kafka"
PLUGIN = localservices.CACHE / "jars" / "iceberg-connect"
TASK_STARTED = re.compile(r"WorkerSinkTask\{id=iceberg-peer-\d+-\d+\} (Sink task )?[Ff]inished "
                          r"initialization and start")


def properties(path: Path, values: dict[str, object]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    return path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--commit-interval-ms", type=int, default=10_000)
    parser.add_argument("--tasks", type=int, default=2)
    args = parser.parse_args()
    if not (PLUGIN / "iceberg-kafka-connect-1.12.0.jar").exists():
        raise SystemExit(f"no {PLUGIN}: run scripts/install --for-peers")
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    (work / "plugins").mkdir(exist_ok=True)
    if not (work / "plugins" / "iceberg").exists():
        (work / "plugins" / "iceberg").symlink_to(PLUGIN)
    name = f"iceberg-peer-{os.getpid()}"  # a consumer group and control topic of its own
    control = f"{args.topic}-{name}-control"
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=args.bootstrap)
    admin.create_topics([NewTopic(control, 1, 1)])
    admin.close()
    catalog_db, warehouse = work / "connect-catalog.db", work / "warehouse"
    worker = properties(work / "worker.properties", {
        "bootstrap.servers": args.bootstrap, "plugin.path": work / "plugins",
        "key.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
        "value.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
        "offset.storage.file.filename": work / "connect.offsets",
        # the sink handles the coordinator's events when Connect hands it records or asks it
        # to commit offsets: at the default minute an idle task answers a commit that late
        "offset.flush.interval.ms": 1000,
        "listeners": "http://127.0.0.1:0"})
    sink = properties(work / "sink.properties", {
        "name": name, "connector.class": "org.apache.iceberg.connect.IcebergSinkConnector",
        "tasks.max": args.tasks, "topics": args.topic,
        "consumer.override.auto.offset.reset": "earliest",
        "transforms": "hoist,meta",
        "transforms.hoist.type": "org.apache.kafka.connect.transforms.HoistField$Value",
        "transforms.hoist.field": "value",
        "transforms.meta.type": "org.apache.iceberg.connect.transforms.KafkaMetadataTransform",
        "transforms.meta.field_name": "kafka", "transforms.meta.nested": "true",
        "iceberg.tables": "peer.events", "iceberg.tables.auto-create-enabled": "true",
        "iceberg.tables.default-partition-by": "kafka.partition",
        "iceberg.control.topic": control,
        "iceberg.control.commit.interval-ms": args.commit_interval_ms,
        "iceberg.catalog": "peer",  # the JdbcCatalog's name, as pyiceberg reads it below
        "iceberg.catalog.catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog",
        "iceberg.catalog.uri": f"jdbc:sqlite:{catalog_db}",
        "iceberg.catalog.jdbc.schema-version": "V1",
        "iceberg.catalog.warehouse": f"file://{warehouse}"})
    log4j = work / "connect-log4j2.properties"
    log4j.write_text("rootLogger.level=INFO\nrootLogger.appenderRef.out.ref=out\n"
                     "appender.out.type=Console\nappender.out.name=out\n"
                     "appender.out.layout.type=PatternLayout\n"
                     "appender.out.layout.pattern=%d %p %c{1} %m%n\n")
    command = ["java", "-Xmx1g", f"-Dlog4j2.configurationFile={log4j}", "-cp",
               f"{KAFKA_JARS}/*", "org.apache.kafka.connect.cli.ConnectStandalone",
               str(worker), str(sink)]
    started = threading.Event()
    at: list[float] = []
    with open(work / "connect.log", "w") as log:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True)

        def follow():
            for line in process.stdout:
                log.write(line)
                if not started.is_set() and TASK_STARTED.search(line):
                    at.append(time.perf_counter())
                    started.set()
        reader = threading.Thread(target=follow, daemon=True)
        reader.start()
        try:
            from pyiceberg.catalog.sql import SqlCatalog

            catalog = SqlCatalog("peer", uri=f"sqlite:///{catalog_db}", warehouse=f"file://{warehouse}")
            deadline = time.monotonic() + 1800
            rows, table = 0, None
            while rows < args.rows:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the Connect worker ended (or took too long) with "
                                     f"{rows} rows committed; its log: {work / 'connect.log'}")
                time.sleep(0.5)  # the table's commits come every commit interval
                try:
                    table = catalog.load_table(("peer", "events"))
                except Exception:  # not made yet  # noqa: BLE001
                    continue
                current = table.current_snapshot()
                rows = int(current.summary["total-records"]) if current else 0
            done = time.perf_counter()
            files = len(list(table.scan().plan_files()))
            print("peer-result " + json.dumps({
                "query_s": done - at[0] if at else None, "rows": rows, "files": files,
                "snapshots": len(table.metadata.snapshots)}), flush=True)
        finally:
            process.terminate()
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
