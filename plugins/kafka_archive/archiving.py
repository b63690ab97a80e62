"""The archive job: read exactly the planned slices with Spark's Kafka source and write
each slice to one file at its deterministic path, then the manifest.

Runs inside `spark-submit` (spark_jobs/archive.py). Records stream from Kafka through
Arrow batches into the file writer on the executors; only one manifest row per slice
comes back to the driver.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Iterator

from kafka_archive import brokers, layout, records
from kafka_archive.config import Config
from kafka_archive.errors import TransientError
from kafka_archive.planning import Anomaly, Plan, RetentionGapError
from kafka_archive.storage import Storage

# One manifest row per slice, as Spark (DDL) and Arrow (what the executors yield) see it
_MANIFEST_FIELDS = [("topic", "string"), ("partition", "int"), ("start", "long"), ("end", "long"),
                    ("cut", "boolean"), ("records", "long"), ("bytes", "long"),
                    ("sha256", "string"), ("url", "string"), ("min_timestamp_ms", "long"),
                    ("max_timestamp_ms", "long"), ("gaps", "string")]
MANIFEST_SCHEMA = ", ".join(f"{name} {kind}" for name, kind in _MANIFEST_FIELDS)


def _arrow_schema(pa):
    kinds = {"string": pa.string(), "int": pa.int32(), "long": pa.int64(), "boolean": pa.bool_()}
    return pa.schema([(name, kinds[kind]) for name, kind in _MANIFEST_FIELDS])


def run(spark, config: Config, plan_url: str) -> dict:
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
        writer = SliceWriter(config.archive_root, plan)
        rows = [r.asDict() for r in frame.mapInArrow(writer, MANIFEST_SCHEMA).collect()]
    for row in rows:
        row["gaps"] = json.loads(row["gaps"])
    _fail_on_retention_loss(config, to_read, rows)
    rows += rows_for_empty_slices(to_read, rows)
    manifest = {"run_id": plan.run_id, "group": plan.group, "slices": rows, "vanished": vanished}
    storage.put_bytes(layout.run_file(config.archive_root, plan.group, plan.run_id, "manifest.json"),
                      json.dumps(manifest, indent=1, sort_keys=True).encode())
    return manifest


def _existing_partitions(config: Config, topics: set[str]) -> set[tuple[str, int]]:
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
             "cut": False, "records": 0, "bytes": 0, "sha256": None, "url": None,
             "min_timestamp_ms": None, "max_timestamp_ms": None, "gaps": [[s.start, s.end]]}
            for s in slices if (s.topic, s.partition) not in seen]


def _fail_on_retention_loss(config: Config, slices, rows: list[dict]) -> None:
    """A slice whose first records are missing because retention deleted them after the
    plan was made has lost data: fail, naming the range. Other gaps are Kafka's own."""
    planned = {(s.topic, s.partition): s for s in slices}
    leading = {(r["topic"], r["partition"]) for r in rows
               if r["gaps"] and r["gaps"][0][0] == r["start"]}
    suspects = leading | (set(planned) - {(r["topic"], r["partition"]) for r in rows})
    if not suspects:
        return
    from kafka import TopicPartition

    consumer = brokers.consumer(config)
    try:
        earliest = consumer.beginning_offsets([TopicPartition(t, p) for t, p in suspects])
    finally:
        consumer.close()
    lost = [Anomaly("retention_gap", tp.topic, tp.partition, s.start, min(first, s.end), "failed")
            for tp, first in earliest.items()
            if first > (s := planned[(tp.topic, tp.partition)]).start]
    if lost:
        raise RetentionGapError(lost)


class SliceWriter:
    """mapInArrow function: one Spark partition of the Kafka source holds one slice."""

    def __init__(self, archive_root: str, plan: Plan):
        self.archive_root = archive_root
        self.plan = plan
        self.slices = {(s.topic, s.partition): s for s in plan.slices}

    def __call__(self, batches: Iterator) -> Iterator:
        import pyarrow as pa

        storage = Storage.from_environment()
        out = None
        for batch in batches:
            columns = batch.to_pydict()
            for i in range(batch.num_rows):
                topic, partition = columns["topic"][i], columns["partition"][i]
                if out is None or (out.topic, out.partition) != (topic, partition):
                    if out is not None:
                        yield _row_batch(pa, out.finish(storage))
                    out = _OpenSlice(self.archive_root, self.plan, self.slices[(topic, partition)])
                if out.cut:
                    continue
                out.add(columns["offset"][i], columns["key"][i], columns["value"][i],
                        columns["timestamp_ms"][i], columns["headers"][i])
        if out is not None:
            yield _row_batch(pa, out.finish(storage))


class _OpenSlice:
    """The file being written for one slice: streamed to a local temp file, hashed on the
    way, uploaded to its final path when the slice is complete."""

    def __init__(self, root: str, plan: Plan, s):
        self.topic, self.partition, self.start, self.end = s.topic, s.partition, s.start, s.end
        self.max_bytes = s.max_bytes
        self.url = layout.data_file(root, plan.group, s.topic, s.partition, plan.generation,
                                    s.start, plan.format["kind"])
        fd, self.tmp_path = tempfile.mkstemp(prefix="kafka-archive-", suffix=".part")
        self.file = _HashingFile(os.fdopen(fd, "wb"))
        self.writer = records.open_writer(self.file, plan.format, self.url.rsplit("/", 1)[-1])
        self.next_offset, self.gaps, self.count, self.payload = s.start, [], 0, 0
        self.min_ts = self.max_ts = None
        self.cut = False

    def add(self, offset, key, value, timestamp_ms, headers) -> None:
        size = len(key or b"") + len(value or b"")
        if self.count and self.payload + size > self.max_bytes:
            # end right after the last record written, so a gap before `offset` is left
            # to the next run; deterministic: depends on the data only
            self.cut, self.end = True, self.next_offset
            return
        if offset > self.next_offset:
            self.gaps.append([self.next_offset, offset])
        try:
            self.writer.append(records.Record(offset, key, value, timestamp_ms,
                                              [(h["key"], h["value"]) for h in headers or ()]))
        except OSError as exc:
            raise TransientError(f"writing {self.url} ({self.topic} partition {self.partition}) "
                                 f"at offset {offset} to local {self.tmp_path} failed: {exc}") from exc
        self.count += 1
        self.payload += size
        self.next_offset = offset + 1
        self.min_ts = timestamp_ms if self.min_ts is None else min(self.min_ts, timestamp_ms)
        self.max_ts = timestamp_ms if self.max_ts is None else max(self.max_ts, timestamp_ms)

    def finish(self, storage: Storage) -> dict:
        if not self.cut and self.next_offset < self.end:
            self.gaps.append([self.next_offset, self.end])
        self.writer.close()
        self.file.close()
        try:
            if self.count:
                storage.upload_file(Path(self.tmp_path), self.url)
        finally:
            os.unlink(self.tmp_path)
        return {"topic": self.topic, "partition": self.partition, "start": self.start,
                "end": self.end, "cut": self.cut, "records": self.count,
                "bytes": self.file.size if self.count else 0, "sha256": self.file.sha256.hexdigest(),
                "url": self.url if self.count else None, "min_timestamp_ms": self.min_ts,
                "max_timestamp_ms": self.max_ts, "gaps": json.dumps(self.gaps)}


class _HashingFile:
    def __init__(self, raw):
        self.raw, self.sha256, self.size = raw, hashlib.sha256(), 0

    def write(self, data: bytes) -> int:
        self.sha256.update(data)
        self.size += len(data)
        return self.raw.write(data)

    def flush(self) -> None:
        self.raw.flush()

    def close(self) -> None:
        self.raw.flush()
        os.fsync(self.raw.fileno())
        self.raw.close()


def _row_batch(pa, row: dict):
    return pa.RecordBatch.from_pylist([row], schema=_arrow_schema(pa))
