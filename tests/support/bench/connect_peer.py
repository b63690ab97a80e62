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
        --rows N --work DIR [--commit-interval-ms 10000] [--tasks 2] [--avro REGISTRY]

With --avro (the Apicurio registry's base URL, http://host:port), the values are Avro in
the Confluent wire format (issue 58): read by Apicurio's Connect converter
(.cache/jars/apicurio-converter, a plugin of its own) by their schema in that registry,
the table's columns the record's fields (the sink's auto-create), beside `kafka`.

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
AVRO_PLUGIN = localservices.CACHE / "jars" / "apicurio-converter"
TASK_STARTED = re.compile(r"WorkerSinkTask\{id=iceberg-peer-\d+-\d+\} (Sink task )?[Ff]inished "
                          r"initialization and start")


def properties(path: Path, values: dict[str, object]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    return path


class ConnectSink:
    """A standalone Connect worker running the sink on `topic` (its own consumer group and
    control topic), started on entering and stopped on leaving; `committed()` reads the
    table's rows and files as its commits left them."""

    def __init__(self, bootstrap: str, topic: str, work: Path, commit_interval_ms: int,
                 tasks: int, avro_registry: str | None = None):
        for needed in (PLUGIN, *((AVRO_PLUGIN,) if avro_registry else ())):
            if not needed.is_dir():
                raise SystemExit(f"no {needed}: run scripts/install --for-peers")
        self.bootstrap, self.topic, self.work = bootstrap, topic, work
        self.avro_registry = avro_registry
        self.commit_interval_ms, self.tasks = commit_interval_ms, tasks
        self.started_at: float | None = None  # when its first task started (perf_counter)
        self.catalog_db, self.warehouse = work / "connect-catalog.db", work / "warehouse"

    def __enter__(self) -> ConnectSink:
        work = self.work
        (work / "plugins").mkdir(parents=True, exist_ok=True)
        for name, folder in (("iceberg", PLUGIN), ("apicurio", AVRO_PLUGIN)):
            if not (work / "plugins" / name).exists():
                (work / "plugins" / name).symlink_to(folder)
        name = f"iceberg-peer-{os.getpid()}"  # a consumer group and control topic of its own
        control = f"{self.topic}-{name}-control"
        from kafka import KafkaAdminClient
        from kafka.admin import NewTopic

        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap)
        admin.create_topics([NewTopic(control, 1, 1)])
        admin.close()
        worker = properties(work / "worker.properties", {
            "bootstrap.servers": self.bootstrap, "plugin.path": work / "plugins",
            "key.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
            "value.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
            "offset.storage.file.filename": work / "connect.offsets",
            # the sink handles the coordinator's events when Connect hands it records or asks
            # it to commit offsets: at the default minute an idle task answers a commit that late
            "offset.flush.interval.ms": 1000,
            "listeners": "http://127.0.0.1:0"})
        sink = properties(work / "sink.properties", {
            "name": name, "connector.class": "org.apache.iceberg.connect.IcebergSinkConnector",
            "tasks.max": self.tasks, "topics": self.topic,
            "consumer.override.auto.offset.reset": "earliest",
            **(self._avro() if self.avro_registry else {
                "transforms": "hoist,meta",
                "transforms.hoist.type": "org.apache.kafka.connect.transforms.HoistField$Value",
                "transforms.hoist.field": "value"}),
            "transforms.meta.type": "org.apache.iceberg.connect.transforms.KafkaMetadataTransform",
            "transforms.meta.field_name": "kafka", "transforms.meta.nested": "true",
            "iceberg.tables": "peer.events", "iceberg.tables.auto-create-enabled": "true",
            "iceberg.tables.default-partition-by": "kafka.partition",
            "iceberg.control.topic": control,
            "iceberg.control.commit.interval-ms": self.commit_interval_ms,
            "iceberg.catalog": "peer",  # the JdbcCatalog's name, as pyiceberg reads it below
            "iceberg.catalog.catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog",
            "iceberg.catalog.uri": f"jdbc:sqlite:{self.catalog_db}",
            "iceberg.catalog.jdbc.schema-version": "V1",
            "iceberg.catalog.warehouse": f"file://{self.warehouse}"})
        log4j = work / "connect-log4j2.properties"
        log4j.write_text("rootLogger.level=INFO\nrootLogger.appenderRef.out.ref=out\n"
                         "appender.out.type=Console\nappender.out.name=out\n"
                         "appender.out.layout.type=PatternLayout\n"
                         "appender.out.layout.pattern=%d %p %c{1} %m%n\n")
        command = ["java", "-Xmx1g", f"-Dlog4j2.configurationFile={log4j}", "-cp",
                   f"{KAFKA_JARS}/*", "org.apache.kafka.connect.cli.ConnectStandalone",
                   str(worker), str(sink)]
        self.log = open(work / "connect.log", "w")
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True)
        threading.Thread(target=self._follow, daemon=True).start()
        from pyiceberg.catalog.sql import SqlCatalog

        self.catalog = SqlCatalog("peer", uri=f"sqlite:///{self.catalog_db}",
                                  warehouse=f"file://{self.warehouse}")
        return self

    def _avro(self) -> dict:
        """The record's fields as columns: Apicurio's converter (2.6, whose serde reads the
        registry's v2 API) on the Confluent wire format's 4-byte ids, which the registry's
        Confluent-compatible API gives out as content ids."""
        prefix = "value.converter"
        return {prefix: "io.apicurio.registry.utils.converter.AvroConverter",
                f"{prefix}.apicurio.registry.url": f"{self.avro_registry}/apis/registry/v2",
                f"{prefix}.apicurio.registry.as-confluent": "true",
                f"{prefix}.apicurio.registry.use-id": "contentId",
                "transforms": "meta"}

    def _follow(self) -> None:
        for line in self.process.stdout:
            self.log.write(line)
            if self.started_at is None and TASK_STARTED.search(line):
                self.started_at = time.perf_counter()

    def committed(self, rows: int, timeout_s: float = 1800):
        """The table once its commits hold at least `rows` rows."""
        deadline, found = time.monotonic() + timeout_s, 0
        while True:
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the Connect worker ended (or took too long) with {found} "
                                 f"rows committed; its log: {self.work / 'connect.log'}")
            try:
                table = self.catalog.load_table(("peer", "events"))
            except Exception:  # not made yet  # noqa: BLE001
                table = None
            current = table and table.current_snapshot()
            found = int(current.summary["total-records"]) if current else 0
            if found >= rows:
                return table
            time.sleep(0.2)  # the table's commits come every commit interval

    def __exit__(self, *exc) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()


def column_text(field_type) -> str:
    """An Iceberg type as text without its field ids: struct<name: string, vip: boolean>."""
    from pyiceberg.types import ListType, MapType, StructType

    if isinstance(field_type, StructType):
        return "struct<" + ", ".join(f"{f.name}: {column_text(f.field_type)}"
                                     for f in field_type.fields) + ">"
    if isinstance(field_type, ListType):
        return f"list<{column_text(field_type.element_type)}>"
    if isinstance(field_type, MapType):
        return f"map<{column_text(field_type.key_type)}, {column_text(field_type.value_type)}>"
    return str(field_type)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--commit-interval-ms", type=int, default=10_000)
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--avro", metavar="REGISTRY", default=None,
                        help="Avro values, by their schemas in this Apicurio (http://host:port)")
    args = parser.parse_args()
    with ConnectSink(args.bootstrap, args.topic, args.work, args.commit_interval_ms,
                     args.tasks, args.avro) as sink:
        table = sink.committed(args.rows)
        done = time.perf_counter()
        current = table.current_snapshot()
        print("peer-result " + json.dumps({
            "query_s": done - sink.started_at if sink.started_at else None,
            "rows": int(current.summary["total-records"]),
            "files": len(list(table.scan().plan_files())),
            "snapshots": len(table.metadata.snapshots),
            # the table's columns as the sink made them (its ids left out, for comparison)
            "columns": {f.name: column_text(f.field_type) for f in table.schema().fields}}),
            flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
