"""The archive job: Spark schedules the plan's slices as tasks; each task reads exactly
its slices' offset ranges from Kafka with librdkafka (kafka_archive.archive.source) and
writes each slice to its files at their deterministic paths (kafka_archive.archive.
slice_writer: one file per slice, or per (slice, time partition) for the event-time
layout). Only one manifest row per slice (listing its files) comes back to the driver,
which writes the manifest.

Runs inside `spark-submit` (spark_jobs/archive.py). Camus, Gobblin and Secor's MapReduce
mode worked the same way: the engine schedules the ranges, each task reads its own.
"""

from __future__ import annotations

import dataclasses
import gc
import heapq
import json
import logging
import math
from typing import Callable, Iterable, Iterator

# kafka-python (brokers) only where the driver asks Kafka: the Python workers that write
# the files import this module and should not pay for it
from kafka_archive import catalog, layout, spark
from kafka_archive.archive import earlier, slice_writer, source, table_files
from kafka_archive.catalog.pieces import merged
from kafka_archive.config import Config, load as load_config
from kafka_archive.errors import ArchiveError, TerminalError, TransientError
from kafka_archive.formats import columns, parsers
from kafka_archive.manifest import (Manifest, SliceRow, read as read_manifest, row_files,
                                    write as write_manifest)
from kafka_archive.plan import inflight
from kafka_archive.plan.planning import Anomaly, Plan, Slice
from kafka_archive.storage import Storage

class PlanNotInFlight(TerminalError):
    """The job of a plan that is no longer the group's plan in flight."""


SLICES_PER_TASK = 16  # at most, when a plan has many more slices than Spark runs at once
TASKS_PER_CORE = 64   # one slice a task up to this many slices per core

log = logging.getLogger(__name__)
# a task's row for a slice that archived nothing: Kafka holds other messages than the
# archived ones it was to replace (earlier.OffsetsReused); the offset of the first
REUSED = "offsets_reused_at"


def main(session, config_path: str, plan_url: str) -> Manifest:
    """The job as spark-submit runs it (spark_jobs/archive.py): the config read, its
    Kafka and Schema Registry connections resolved, the plan archived; a classified failure is recorded beside
    the plan for ArchiveOperator (terminal or transient) before it is raised."""
    from kafka_archive import kafka_connection, registry_connection  # the driver's only

    config = registry_connection.connected(kafka_connection.connected(load_config(config_path)))
    return recorded(session, config, plan_url, Storage.from_environment())


def recorded(session, config: Config, plan_url: str, storage: Storage) -> Manifest:
    """run, a classified failure recorded beside the plan (for job.launched) and raised."""
    try:
        return run(session, config, plan_url, storage)
    except ArchiveError as failed:
        record_failure(storage, plan_url, failed)
        raise


def run(session, config: Config, plan_url: str, storage: Storage | None = None) -> Manifest:
    """The plan archived by Spark's tasks (a classic driver's or a Spark Connect client's
    session), the driver asking Kafka with kafka-python."""
    from kafka_archive import brokers

    def archived(plan: Plan, slices: list[Slice]) -> list[SliceRow]:
        tasks = task_slices(slices, spark.parallelism(session))
        return spark.mapped(session, len(tasks), ArchiveTask(config, plan, tasks),
                            "the archive job")
    return archive_plan(config, plan_url, storage or Storage.from_environment(),
                        lambda: brokers.consumer(config), archived)


def archive_plan(config: Config, plan_url: str, storage: Storage, kafka: Callable[[], object],
                 archived: Callable[[Plan, list[Slice]], list[SliceRow]]) -> Manifest:
    """The driver's part of the job, whatever runs the tasks: `archived(plan, slices)`
    writes the slices and returns their manifest rows (Spark's tasks, or the protocol
    simulation's in-process calls); `kafka()` opens a client with kafka-python's API
    (topics, partitions_for_topic, beginning_offsets, close) for what the driver asks."""
    storage.delete(failure_url(plan_url))  # an earlier try's: this one says for itself
    plan = Plan.from_json(storage.get_bytes(plan_url))
    done = read_manifest(storage, config.archive_root, plan.group, plan.run_id)
    if done is not None:
        # the job finished before and the run failed after it (a commit killed half way
        # is the case that matters): its files are final, tokens may cover some already,
        # and Kafka may no longer hold what they hold; writing them again could only lose
        log.warning("run %s was archived before: its manifest stands, nothing is read or "
                    "written again", plan.run_id)
        return done
    if (holder := inflight.holding(storage, config.archive_root, plan.group)) != plan.run_id:
        # a plan only writes while it is the one in flight: re-executed after its mark was
        # deleted by hand (or after another plan took over), its files would be nobody's
        raise PlanNotInFlight(
            f"run {plan.run_id} of group {plan.group} is not the plan in flight "
            f"({'run ' + holder + ' is' if holder else 'none is'}): its job writes nothing; "
            "the group's next run plans what is left to archive")
    # an earlier attempt of this job may have written files under names this one does not
    # write again (an event-time file is named by its first message in its hour, and
    # Kafka's log cleaner or retention may have removed that message since), or files this
    # one does not write at all (an unclean election cut what the slice held)
    retried = storage.size(attempt_url(plan_url)) is not None
    if not retried:
        storage.put_bytes(attempt_url(plan_url), b"{}")
    to_read = [s for s in plan.slices if s.end > s.start]
    # a topic deleted since the plan was made cannot be read; without this the in-flight
    # plan would fail on every re-run and block the group for good
    present = _existing_partitions(kafka, {s.topic for s in to_read})
    vanished = [[s.topic, s.partition] for s in to_read if (s.topic, s.partition) not in present]
    gone = [s for s in to_read if (s.topic, s.partition) not in present]
    to_read = [s for s in to_read if (s.topic, s.partition) in present]
    rows = archived(plan, to_read) if to_read else []
    if config.group(plan.group).parsed_table:
        rows = _agreeing(archived, plan, to_read, rows, storage)
    reused = [Anomaly("offsets_reused", r["topic"], r["partition"], r[REUSED], r[REUSED] + 1,
                      "failed") for r in rows if REUSED in r]
    reused_at = {(a.topic, a.partition) for a in reused}
    rows = [r for r in rows if REUSED not in r]
    lost = retention_losses(kafka, [s for s in to_read if (s.topic, s.partition) not in reused_at],
                            rows)
    missed = reused_at | {(a.topic, a.partition) for a in lost}
    rows = _drop_slices(storage, rows, missed)
    _drop_earlier_attempts(config, plan, storage, gone + [
        s for s in to_read if (s.topic, s.partition) in missed or retried],
        {f["url"] for r in rows for f in row_files(r)})
    archived = {(s.topic, s.partition) for s in to_read} - missed
    manifest: Manifest = {"run_id": plan.run_id, "group": plan.group, "slices": rows,
                          "vanished": vanished, "retention_lost": [dataclasses.asdict(a) for a in lost],
                          "offsets_reused": [dataclasses.asdict(a) for a in reused],
                          **({"kept": kept_of_cuts(config, plan, storage, archived)}
                             if plan.cuts else {})}
    write_manifest(storage, config.archive_root, manifest)
    return manifest


def kept_of_cuts(config: Config, plan: Plan, storage: Storage,
                 archived: set[tuple[str, int]]) -> list[SliceRow]:
    """What the plan's rewind keeps of compacted rows (Plan.cuts) where its slices were
    archived: each row's rows below the cut, written again (a copy of its files without the
    rest: copy-on-write) into this run's folder, as one row of the pieces kept. The
    driver's work: a rewind is rare, and a compacted file is at most a target size."""
    from kafka_archive.formats import parquet  # pyarrow: the driver's, for a rare rewind

    kept = []
    for cut in plan.cuts:
        if (cut["topic"], cut["partition"]) not in archived:
            continue  # not archived again: the compacted row stays as it is
        row, below = cut["row"], cut["below"]
        files = [f for out in table_files.outputs(config, plan.group, plan.run_id, [row])
                 if (f := table_files.rewrite(storage, out, parquet.below(below))) is not None]
        pieces = [{**p, "topic": row["topic"], "partition": row["partition"],
                   "_generation": row["_generation"]} for p in row["pieces"] if p["end"] <= below]
        made = merged(pieces, files, "")
        if sum(f["records"] for f in files) != made["records"]:
            raise TerminalError(f"{row['topic']} partition {row['partition']}: the compacted "
                                f"files {[f['url'] for f in row_files(row)]} hold "
                                f"{sum(f['records'] for f in files)} rows below offset {below}, "
                                f"its pieces say {made['records']}")
        kept.append({k: v for k, v in made.items() if k not in ("_run", "_generation")})
    return kept


def _agreeing(archived: Callable[[Plan, list[Slice]], list[SliceRow]], plan: Plan,
              slices: list[Slice], rows: list[SliceRow], storage: Storage) -> list[SliceRow]:
    """The parsed shape's new columns are typed by each file's own values (or schema);
    where the files of a run disagree on one beyond what the table's evolution reconciles
    (formats.columns.promoted: a count that is 3 in one Kafka partition, 2.5 in another;
    a field that is a long in one schema version and text in another), the column takes
    the first file's type (by partition and offset) or a wider one that holds both, and
    the slices of the files that had it otherwise are written again with
    every column of the topic fixed (their values that do not fit go to the dead
    letters), so one table commit can add the column. Deterministic: the same messages
    give the same files, whoever runs them."""
    agreed: dict[str, dict[str, str]] = {}
    origins: dict[str, dict[str, str]] = {}  # a typed table's: which schema id set each
    # a typed one's: column -> the identities of the field it holds (schemas.fit)
    identities: dict[str, dict[str, tuple[str, ...]]] = {}
    for topic in plan.topics():
        types: dict[str, str] = {}
        held = identities.setdefault(topic, {c: tuple(i) for c, i in
                                             plan.column_identities.get(topic, {}).items()})
        disagree = False
        for row in sorted((r for r in rows if r["topic"] == topic),
                          key=lambda r: (r["partition"], r["start"])):
            for f in row_files(row):
                # a field renamed between files: its column keeps the first file's name
                renamed = _renamed(held, types, f)
                disagree = disagree or bool(renamed)
                for name, kind in f.get("columns", ()):
                    name = renamed.get(name, name)
                    seen = types.setdefault(name, kind)
                    if (merged := columns.promoted(seen, kind)) is not None:
                        types[name] = merged  # the table evolves so: no file changes
                    else:
                        types[name] = columns.widened(seen, kind) or seen
                        disagree = True
                    if types[name] == kind and (origin := f.get("origins", {}).get(name)):
                        origins.setdefault(topic, {}).setdefault(name, origin)
        if disagree:
            agreed[topic] = types
    if not agreed:
        return rows

    def fits(row: SliceRow) -> bool:
        want = agreed.get(row["topic"])
        return want is None or all(
            all(n in want and columns.promoted(want[n], k) == want[n]
                for n, k in f.get("columns", ()))
            and not _renamed(dict(identities[row["topic"]]), want, f) for f in row_files(row))

    again = {(r["topic"], r["partition"], r["start"]) for r in rows if not fits(r)}
    log.warning("run %s: files disagree on the type or the field of new columns (%s); %d "
                "slices written again with them fixed", plan.run_id, "; ".join(
                    f"{t}: {', '.join(f'{n} {k}' for n, k in c.items())}"
                    for t, c in agreed.items()), len(again))
    fixed = dataclasses.replace(plan, columns={**plan.columns, **{
        t: [[n, k] for n, k in c.items()] for t, c in agreed.items()}}, column_origins={
        **plan.column_origins, **{t: {**plan.column_origins.get(t, {}), **origins.get(t, {})}
                                  for t in agreed}},
        column_identities={**plan.column_identities,
                           **{t: identities[t] for t in agreed if identities[t]}})
    rewritten = archived(fixed, [s for s in slices if (s.topic, s.partition, s.start) in again])
    kept = {f["url"] for r in rewritten for f in row_files(r)}
    for row in rows:  # a rewritten slice's file may start elsewhere now: the old one goes
        if (row["topic"], row["partition"], row["start"]) in again:
            for f in row_files(row):
                if f["url"] not in kept:
                    storage.delete(f["url"])
    return [r for r in rows if (r["topic"], r["partition"], r["start"]) not in again] + rewritten


def _renamed(held: dict[str, tuple[str, ...]], types: dict, f: dict) -> dict[str, str]:
    """A typed file's columns whose field another column holds (`held`: column -> field
    identities, the run's so far; a column without an entry: its name), with the file's
    identities added to `held`: the file's column -> the one that holds its field (itself
    for a Protobuf field with the name of another number's column: its rows will be dead
    letters)."""
    from kafka_archive.formats import schemas  # pyarrow: the job's, as the writer

    owners = schemas.owners_of(held, {**types, **held})
    renamed = {}
    for column, _ in f.get("columns", ()):
        own = f.get("identities", {}).get(column, [column])
        owner = next((owners[i] for i in own if i in owners), None)
        if owner is None and column in owners.values() and column in held:
            renamed[column] = column  # the name of another field's column
            continue
        owner = owner or column
        if owner != column:
            renamed[column] = owner
        if (grown := schemas.grown_identities(held, owner, owner in types, own)) != (owner,):
            held[owner] = grown
        owners.update((i, owner) for i in own)
    return renamed


def attempt_url(plan_url: str) -> str:
    """Beside the plan: an attempt of the job has begun (job._drop_earlier_attempts)."""
    return plan_url.rsplit("/", 1)[0] + "/job_attempt.json"


def failure_url(plan_url: str) -> str:
    """Where the driver records the classified error that ended the job (beside the plan):
    spark-submit's exit code alone cannot say whether Airflow should retry."""
    return plan_url.rsplit("/", 1)[0] + "/job_failure.json"


def record_failure(storage: Storage, plan_url: str, error: ArchiveError) -> None:
    storage.put_bytes(failure_url(plan_url), json.dumps({
        "class": type(error).__name__, "terminal": isinstance(error, TerminalError),
        "message": str(error)}).encode())


def launched(storage: Storage, plan_url: str, launch: Callable[[], object],
             launch_failed: type[BaseException] = Exception) -> None:
    """One attempt of the job through its launcher (spark-submit): a launch that fails
    raises the job's own classified error where this attempt's driver recorded one, else
    the launcher's. A failure record belongs to one attempt: an earlier one's is removed
    first, so a spark-submit that fails before the job starts is never taken for it."""
    storage.delete(failure_url(plan_url))
    try:
        launch()
    except launch_failed as exc:
        recorded = storage.get_or_none(failure_url(plan_url))
        if recorded is None:
            raise
        failure = json.loads(recorded)
        raise (TerminalError if failure["terminal"] else TransientError)(
            f"{failure['class']}: {failure['message']}") from exc


def task_slices(slices: list[Slice], parallelism: int) -> list[list[Slice]]:
    """The slices each Spark task reads: one slice a task, as long as there are not many
    more slices than Spark runs at once (TASKS_PER_CORE); beyond that, up to
    SLICES_PER_TASK slices a task (scheduling a task costs more than reading a small slice:
    a plan of 10,000 one-message slices), balanced by offset count, the longest first."""
    count = min(len(slices), max(TASKS_PER_CORE * parallelism,
                                 math.ceil(len(slices) / SLICES_PER_TASK)))
    tasks: list[list[Slice]] = [[] for _ in range(count)]
    loads = [(0, i) for i in range(count)]
    for s in sorted(slices, key=lambda s: (s.start - s.end, s.topic, s.partition)):
        load, i = heapq.heappop(loads)
        tasks[i].append(s)
        heapq.heappush(loads, (load + s.end - s.start, i))
    return tasks


def _existing_partitions(kafka: Callable[[], object], topics: set[str]) -> set[tuple[str, int]]:
    if not topics:
        return set()
    consumer = kafka()
    try:
        existing = consumer.topics()
        return {(t, p) for t in topics & existing for p in consumer.partitions_for_topic(t) or ()}
    finally:
        consumer.close()


def retention_losses(kafka: Callable[[], object], slices, rows: list[dict]) -> list[Anomaly]:
    """Slices whose first records retention deleted after the plan was made: lost data,
    one anomaly each, from the first offset only Kafka could give (kafka_from) to Kafka's
    earliest offset now. Gaps elsewhere are Kafka's own (compaction, transaction markers)."""
    planned = {(s.topic, s.partition): s for s in slices}
    first_of = {tp: kafka_from(s) for tp, s in planned.items()}
    leading = {(r["topic"], r["partition"]) for r in rows
               if any(a <= first_of[(r["topic"], r["partition"])] < b for a, b in r["gaps"])}
    suspects = leading | (set(planned) - {(r["topic"], r["partition"]) for r in rows})
    if not suspects:
        return []
    from kafka import TopicPartition

    consumer = kafka()
    try:
        earliest = consumer.beginning_offsets([TopicPartition(t, p) for t, p in suspects])
    finally:
        consumer.close()
    return sorted((Anomaly("retention_gap", tp.topic, tp.partition, start, first, "failed",
                           "deleted after the run was planned")
                   for tp, first in earliest.items()
                   if first > (start := first_of[(tp.topic, tp.partition)])),
                  key=lambda a: (a.topic, a.partition))


def kafka_from(s: Slice) -> int:
    """The first offset of the slice that only Kafka can give: past the rows a rewind
    archives again, when their files give what Kafka no longer has (archive.earlier)."""
    if s.archived_before and earlier.usable(s.earlier):
        return max(s.start, s.archived_before[-1][0])
    return s.start


def _drop_slices(storage: Storage, rows: list[SliceRow], lost: set[tuple[str, int]]
                 ) -> list[SliceRow]:
    """The rows of slices that lost data leave the run, and their files go: the run
    commits the other slices, the lost ones keep their token, and the next run holds the
    topic for the loss like any retention gap (until it is accepted, or skipped by config),
    instead of this run failing, and every run after it, on its in-flight plan."""
    kept = []
    for row in rows:
        if (row["topic"], row["partition"]) in lost:
            for f in row_files(row):
                storage.delete(f["url"])
        else:
            kept.append(row)
    return kept


def _drop_earlier_attempts(config: Config, plan: Plan, storage: Storage,
                           slices: list[Slice], written: set[str]) -> None:
    """The files an earlier attempt of the job wrote for the slices that this attempt
    did not write again (`written`): slices retention has since eaten into, or of a topic
    deleted since (this attempt, starting at Kafka's earliest offset, wrote and dropped
    other names, or none: the slice's messages are the run's loss, recorded; a deleted
    topic's slice is not archived, its token stays); any slice of a retried job (an
    event-time file whose first message Kafka removed since; a slice whose messages an
    unclean election cut, so none is written). Theirs would stay beside the catalog, read by the
    folders' readers. Only files no current row of the catalog names go (runs.unlisted):
    a committed run's file of the same name (its commit cut short, then found again by a
    rebuild) stays. A table group's files are under the run's folder (orphans, swept
    later)."""
    from kafka_archive.plan import runs  # the driver's, rarely: not in every Python worker

    group = config.group(plan.group)
    if group.table is not None or not slices:
        return
    cat, listings = catalog.open_catalog(storage, config, plan.group), {}
    for s in slices:
        for url in runs.unlisted(storage, config, group, cat, s, plan.generation, written,
                                 end=s.end, listings=listings):
            storage.delete(url)


class ArchiveTask:
    """The body of Spark task i: archive each slice of tasks[i] and yield each slice's
    manifest row."""

    def __init__(self, config: Config, plan: Plan, tasks: list[list[Slice]] = ()):
        self.config = config
        self.targets = {t: target(config, plan, t) for t in plan.topics()}
        self.tasks = tasks
        group = config.group(plan.group)
        self.group, self.run_id, self.generation = group, plan.run_id, plan.generation

    def __call__(self, i: int) -> Iterator[dict]:
        storage = Storage.from_environment()
        consumer = _worker_consumer(self.config)
        # PySpark's worker runs a full garbage collection after each task: everything
        # loaded by now (modules, botocore's service model) lives as long as the worker,
        # so spare the collections walking it
        gc.freeze()
        try:
            for s in self.tasks[i]:
                yield self.archive(s, self.messages(consumer, s, storage), storage)
        except BaseException:  # a consumer in an unknown state is not handed to the next task
            _WORKER_CONSUMERS.pop(_consumer_key(self.config), None)
            consumer.close()
            raise

    def messages(self, consumer, s: Slice, storage: Storage) -> Iterator:
        """The slice's messages from Kafka; a rewind's with what only its earlier files
        still hold (archive.earlier)."""
        batches = source.read(consumer, s.topic, s.partition, s.start, s.end)
        where = f"{s.topic} partition {s.partition}"
        if s.earlier_last:  # (a parsed table's rows too: the job fingerprinted the messages)
            batches = earlier.agreeing_with_last(batches, s.earlier_last, where)
        if self.group.parsed_table or not earlier.usable(s.earlier):
            return batches  # (a parsed table's earlier rows: copied after, `archive`)
        # where the plan moved them aside, or (a table group's) still in place
        urls = [layout.superseded(self.config.archive_root, self.run_id, url)
                if self.group.table is None else url for url in s.earlier]
        return earlier.with_earlier(
            batches, lambda: earlier.records_of(storage, urls, s.start, s.end), s.start, s.end,
            where)

    def archive(self, s: Slice, batches: Iterator, storage: Storage) -> dict:
        """Write one slice from its messages (formats.batch.Batch, in offset order); its
        manifest row. Reading stops where the slice reaches its size cap."""
        elsewhere = earlier.HeldElsewhere.of(storage, s)
        out = slice_writer.OpenSlice(self.targets[s.topic], s.partition, s.start, s.end,
                                     s.max_bytes, s.archived_before, elsewhere)
        try:
            for batch in batches:
                out.add_batch(batch)
                if out.cut:  # the rest is the next run's
                    break
        except earlier.OffsetsReused as reused:  # replaces nothing: the commit keeps the rows
            out.discard()
            log.warning("%s", reused)
            return {"topic": s.topic, "partition": s.partition, "start": s.start,
                    REUSED: reused.offset}
        except BaseException:  # a failed or cancelled task leaves no temp file behind
            out.discard()
            raise
        finally:
            close = getattr(batches, "close", None)
            if close:  # ends the read (the consumer moves on to the next slice)
                close()
            if elsewhere is not None:
                elsewhere.close()
        row = out.finish(storage)
        if self.group.parsed_table and row["gaps"] and earlier.usable(s.earlier):
            return earlier.kept_in_table(storage, self.config.archive_root, self.group.name,
                                         self.group.layout, self.run_id, self.generation, s, row)
        return row


# One librdkafka consumer per Python worker and Kafka settings, reused by the worker's tasks
# (PySpark reuses workers): a consumer made and closed per task left the worker ~23 MB
# larger each time (librdkafka's buffers are not given back), 1.7 GiB for 8 slices on 2 cores
_WORKER_CONSUMERS: dict[str, object] = {}


def _consumer_key(config: Config) -> str:
    from kafka_archive import brokers

    return json.dumps(brokers.librdkafka_settings(config), sort_keys=True)


def _worker_consumer(config: Config):
    from kafka_archive import brokers

    key = _consumer_key(config)
    if key not in _WORKER_CONSUMERS:
        _WORKER_CONSUMERS[key] = brokers.range_consumer(config)
    return _WORKER_CONSUMERS[key]


def target(config: Config, plan: Plan, topic: str) -> slice_writer.Target:
    """Where and how a run writes a topic's slices: the plan's format, generation and
    finalized watermark; the group's layout and the topic's parser."""
    group = config.group(plan.group)
    event_time = group.layout.kind == "event_time"
    return slice_writer.Target(
        root=config.archive_root, group=plan.group, topic=topic, generation=plan.generation,
        format=plan.format_for(topic), layout=group.layout,
        parser=(parsers.parser_for(group.parser_for(topic), config.schema_registry, topic)
                if event_time else None),
        finalized_ms=plan.finalized.get(topic), audit_header=config.audit.source_header,
        audit_window_ms=config.audit.window_s * 1000,
        table_run=plan.run_id if group.table else None,
        columns=tuple(tuple(c) for c in plan.columns.get(topic, ())),
        column_origins=tuple(plan.column_origins.get(topic, {}).items()),
        column_identities=tuple((c, tuple(i)) for c, i in
                                plan.column_identities.get(topic, {}).items()))
