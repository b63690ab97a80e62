"""The archive job: read exactly the planned slices with Spark's Kafka source and write
each slice to its files at their deterministic paths (kafka_archive.archive.slice_writer: one file per
slice, or per (slice, time partition) for the event-time layout), then the manifest.

Runs inside `spark-submit` (spark_jobs/archive.py). Records stream from Kafka through
Arrow batches into the file writers on the executors; only one manifest row per slice
(listing its files) comes back to the driver.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Iterator

# kafka-python (brokers) only where the driver asks Kafka: the Python workers that write
# the files import this module and should not pay for it
from kafka_archive import layout
from kafka_archive.archive import parsers, slice_writer
from kafka_archive.config import Config
from kafka_archive.plan.planning import Anomaly, Plan
from kafka_archive.storage import Storage

# One manifest row per slice, as Spark (DDL) and Arrow (what the executors yield) see it
_MANIFEST_FIELDS = [("topic", "string"), ("partition", "int"), ("start", "long"), ("end", "long"),
                    ("cut", "boolean"), ("records", "long"), ("quarantined", "long"),
                    ("late", "long"), ("bytes", "long"), ("sha256", "string"),
                    ("url", "string"), ("files", "string"), ("errors", "string"),
                    ("min_timestamp_ms", "long"),
                    ("max_timestamp_ms", "long"), ("gaps", "string"), ("audit", "string")]
MANIFEST_SCHEMA = ", ".join(f"{name} {kind}" for name, kind in _MANIFEST_FIELDS)


def _arrow_schema(pa):
    kinds = {"string": pa.string(), "int": pa.int32(), "long": pa.int64(), "boolean": pa.bool_()}
    return pa.schema([(name, kinds[kind]) for name, kind in _MANIFEST_FIELDS])


def run(spark, config: Config, plan_url: str) -> dict:
    from kafka_archive import brokers

    storage = Storage.from_environment()
    plan = Plan.from_json(storage.get_bytes(plan_url))
    to_read = [s for s in plan.slices if s.end > s.start]
    # a topic deleted since the plan was made cannot be read; without this the in-flight
    # plan would fail on every re-run and block the group for good
    present = _existing_partitions(config, {s.topic for s in to_read})
    vanished = [[s.topic, s.partition] for s in to_read if (s.topic, s.partition) not in present]
    to_read = [s for s in to_read if (s.topic, s.partition) in present]
    rows = []
    if to_read:
        frame = (spark.read.format("kafka").options(**brokers.spark_options(config))
                 .options(**_offset_ranges(to_read))
                 .option("includeHeaders", "true")
                 # gaps are Kafka's own (compaction, transaction markers) or retention;
                 # the manifest records them and the check below tells them apart
                 .option("failOnDataLoss", "false")
                 .load()
                 .selectExpr("topic", "partition", "offset", "key", "value",
                             "unix_millis(timestamp) AS timestamp_ms", "headers"))
        writer = SliceWriter(config, plan)
        rows = [r.asDict() for r in frame.mapInArrow(writer, MANIFEST_SCHEMA).collect()]
    for row in rows:
        for name in ("gaps", "audit", "files", "errors"):
            row[name] = json.loads(row[name])
    lost = retention_losses(config, to_read, rows)
    lost_at = {(a.topic, a.partition) for a in lost}
    rows = _drop_slices(storage, rows, lost_at)
    rows += rows_for_empty_slices([s for s in to_read if (s.topic, s.partition) not in lost_at],
                                  rows)
    manifest = {"run_id": plan.run_id, "group": plan.group, "slices": rows, "vanished": vanished,
                "retention_lost": [asdict(a) for a in lost]}
    storage.put_bytes(layout.run_file(config.archive_root, plan.group, plan.run_id, "manifest.json"),
                      json.dumps(manifest, indent=1, sort_keys=True).encode())
    return manifest


def _existing_partitions(config: Config, topics: set[str]) -> set[tuple[str, int]]:
    from kafka_archive import brokers

    consumer = brokers.consumer(config)
    try:
        existing = consumer.topics()
        return {(t, p) for t in topics & existing for p in consumer.partitions_for_topic(t) or ()}
    finally:
        consumer.close()


def _offset_ranges(slices) -> dict[str, str]:
    """Spark Kafka source options selecting exactly these [start, end) ranges."""
    assign, starts, ends = {}, {}, {}
    for s in slices:
        assign.setdefault(s.topic, []).append(s.partition)
        starts.setdefault(s.topic, {})[str(s.partition)] = s.start
        ends.setdefault(s.topic, {})[str(s.partition)] = s.end
    return {"assign": json.dumps(assign), "startingOffsets": json.dumps(starts),
            "endingOffsets": json.dumps(ends)}


def rows_for_empty_slices(slices, rows: list[dict]) -> list[dict]:
    """Manifest rows for slices Spark returned no record for: offsets Kafka holds no
    message at (a range of transaction markers, a compacted-away range). Without a row
    the commit could never account for them and the plan would stay stuck in flight."""
    seen = {(r["topic"], r["partition"]) for r in rows}
    return [{"topic": s.topic, "partition": s.partition, "start": s.start, "end": s.end,
             "cut": False, "records": 0, "quarantined": 0, "late": 0, "bytes": 0,
             "sha256": None, "url": None, "files": [], "errors": [], "min_timestamp_ms": None, "max_timestamp_ms": None, "gaps": [[s.start, s.end]],
             "audit": []}
            for s in slices if (s.topic, s.partition) not in seen]


def retention_losses(config: Config, slices, rows: list[dict]) -> list[Anomaly]:
    """Slices whose first records retention deleted after the plan was made: lost data,
    one anomaly each, from the planned start to Kafka's earliest offset now. Gaps elsewhere
    are Kafka's own (compaction, transaction markers)."""
    planned = {(s.topic, s.partition): s for s in slices}
    leading = {(r["topic"], r["partition"]) for r in rows
               if r["gaps"] and r["gaps"][0][0] == r["start"]}
    suspects = leading | (set(planned) - {(r["topic"], r["partition"]) for r in rows})
    if not suspects:
        return []
    from kafka import TopicPartition

    from kafka_archive import brokers

    consumer = brokers.consumer(config)
    try:
        earliest = consumer.beginning_offsets([TopicPartition(t, p) for t, p in suspects])
    finally:
        consumer.close()
    return sorted((Anomaly("retention_gap", tp.topic, tp.partition, s.start, first, "failed",
                           "deleted after the run was planned")
                   for tp, first in earliest.items()
                   if first > (s := planned[(tp.topic, tp.partition)]).start),
                  key=lambda a: (a.topic, a.partition))


def _drop_slices(storage: Storage, rows: list[dict], lost: set[tuple[str, int]]) -> list[dict]:
    """The rows of slices that lost data leave the run, and their files go: the run
    commits the other slices, the lost ones keep their token, and the next run holds the
    topic for the loss like any retention gap (until it is accepted, or skipped by config),
    instead of this run failing, and every run after it, on its in-flight plan."""
    from kafka_archive.catalog.state import row_files

    kept = []
    for row in rows:
        if (row["topic"], row["partition"]) in lost:
            for f in row_files(row):
                storage.delete(f["url"])
        else:
            kept.append(row)
    return kept


class SliceWriter:
    """mapInArrow function: one Spark partition of the Kafka source holds one slice."""

    def __init__(self, config: Config, plan: Plan):
        self.plan = plan
        self.slices = {(s.topic, s.partition): s for s in plan.slices}
        self.targets = {t: target(config, plan, t) for t in plan.topics()}

    def __call__(self, batches: Iterator) -> Iterator:
        self.open_slice = None
        try:
            yield from self._write(batches)
        finally:  # a failed or cancelled task leaves no temp file behind
            if self.open_slice is not None:
                self.open_slice.discard()

    def _write(self, batches: Iterator) -> Iterator:
        import pyarrow as pa

        from kafka_archive.formats.batch import Batch

        storage = Storage.from_environment()
        out = None
        for arrow_batch in batches:
            for topic, partition, start, stop in _runs_of_one_partition(arrow_batch):
                if out is None or (out.topic, out.partition) != (topic, partition):
                    if out is not None:
                        yield _row_batch(pa, out.finish(storage))
                    s = self.slices[(topic, partition)]
                    out = self.open_slice = slice_writer.OpenSlice(
                        self.targets[topic], partition, s.start, s.end, s.max_bytes)
                out.add_batch(Batch.from_arrow(arrow_batch.slice(start, stop - start)))
        if out is not None:
            yield _row_batch(pa, out.finish(storage))


def _runs_of_one_partition(batch) -> list[tuple[str, int, int, int]]:
    """(topic, partition, start, stop) of each run of rows from one Kafka partition. A Spark
    partition of the Kafka source reads one Kafka partition, so a batch is usually one run."""
    import numpy as np
    import pyarrow.compute as pc

    topics, partitions = batch.column("topic"), batch.column("partition")
    if not batch.num_rows:
        return []
    changes = np.flatnonzero(
        pc.or_(pc.not_equal(topics[1:], topics[:-1]),
               pc.not_equal(partitions[1:], partitions[:-1])).to_numpy(zero_copy_only=False)) + 1
    bounds = [0, *changes.tolist(), batch.num_rows]
    return [(topics[a].as_py(), partitions[a].as_py(), a, b) for a, b in zip(bounds, bounds[1:])]


def target(config: Config, plan: Plan, topic: str) -> slice_writer.Target:
    """Where and how a run writes a topic's slices: the plan's format, generation and
    finalized watermark; the group's layout and the topic's parser."""
    group = config.group(plan.group)
    event_time = group.layout.kind == "event_time"
    return slice_writer.Target(
        root=config.archive_root, group=plan.group, topic=topic, generation=plan.generation,
        format=plan.format_for(topic), layout=group.layout,
        parser=parsers.parser_for(group.parser_for(topic)) if event_time else None,
        finalized_ms=plan.finalized.get(topic), audit_header=config.audit.source_header,
        audit_window_ms=config.audit.window_s * 1000)


def _row_batch(pa, row: dict):
    return pa.RecordBatch.from_pylist([row], schema=_arrow_schema(pa))
