"""A run's files into an Iceberg table: one snapshot per run, at most once.

The token file stays the truth of what is archived; for a table group the commit adds the
run's Parquet files to the table before any token moves (commit.protocol, issue 32), in
one Iceberg commit that carries the run id in its snapshot summary. So:
- a reader of the table sees a run whole or not at all (one snapshot), and a rewind's
  removals and additions together (one overwrite snapshot: old or new, never neither);
- a commit re-run after a crash finds its snapshot and adds nothing;
- pyiceberg's own retry, which rebuilds a failed commit on the refreshed table without
  asking whether the run is in it already, is switched off for our tables
  (`commit.retry.num-retries` 0): on a lost compare-and-swap, commit_run reads the
  table again and looks for the run first. Two commits of one run at once (a zombie
  task) therefore add it once, which the Iceberg Kafka Connect sink cannot promise.

Pure Iceberg: no Kafka, no tokens; the catalog is pyiceberg's (SQL on SQLite or
PostgreSQL, or REST), chosen by the properties given. Expiry and orphans:
commit.table_maintenance.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

from kafka_archive import layout
from kafka_archive.config import Config, TableSpec
from kafka_archive.errors import TerminalError, TransientError
from kafka_archive.formats import columns
from kafka_archive.manifest import added_rows, not_archived, row_files
from kafka_archive.plan.planning import Plan

log = logging.getLogger(__name__)

RUN_ID = "kafka-archive.run-id"      # snapshot summary: the run the snapshot commits
OFFSETS = "kafka-archive.offsets"    # snapshot summary: the offset ranges it adds
COMPACTED = "kafka-archive.compacted"  # snapshot summary: a compaction's files, before -> after
# table property of a typed table (formats.schemas): column -> the schema id that set its
# type ("schema id 7"), for the reasons of messages whose schema cannot join it
ORIGINS = "kafka-archive.column-origins"
# table property of a typed table: column -> the identities of the field it holds where they
# are not just its name (a Protobuf number, an Avro field's aliases): a field renamed in a
# later version keeps its column (formats.schemas.fit)
IDENTITIES = "kafka-archive.column-identities"
ATTEMPTS = 5                         # lost compare-and-swap races before giving up
DEAD_LETTER_SUFFIX = layout.DEAD_LETTER_SUFFIX  # an event-time group's topic's dead letters
TABLE_PROPERTIES = {"commit.retry.num-retries": "0", "format-version": "2",
                    # one metadata file per commit: keep the last 20, not a year of them
                    "write.metadata.delete-after-commit.enabled": "true",
                    "write.metadata.previous-versions-max": "20"}


def key_value_schema():
    """The lossless shape, as the Parquet files have it (formats.parquet.KEY_VALUE, with
    the field ids a new table gives them): Kafka's metadata, key and value as bytes, the
    headers."""
    from pyiceberg.io.pyarrow import pyarrow_to_schema

    from kafka_archive.formats import parquet

    return pyarrow_to_schema(parquet.KEY_VALUE)


def key_value_spec():
    """key_value tables are partitioned by Kafka partition: each file holds one."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import IdentityTransform

    return PartitionSpec(PartitionField(source_id=6, field_id=1000, transform=IdentityTransform(),
                                        name="kafka_partition"))


def dead_letter_schema():
    """A dead-letter table's: the key_value shape and the reason (formats.parquet; its
    files carry no field ids, the table reads them by name)."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField, StringType

    return Schema(*key_value_schema().fields, NestedField(13, "reason", StringType(),
                                                          required=False))


def iceberg_type(kind: str):
    """The Iceberg type of a formats.columns type."""
    from pyiceberg import types

    return {"boolean": types.BooleanType(), "int": types.IntegerType(),
            "long": types.LongType(), "float": types.FloatType(), "double": types.DoubleType(),
            "string": types.StringType(), "timestamp": types.TimestamptzType(),
            "date": types.DateType()}[kind]


def column_type(field):
    """The formats.columns kind of an Iceberg field ("long", {"struct": ...}: a typed
    table's, formats.schemas); None for one we never make."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    from kafka_archive.formats import schemas

    try:
        return schemas.kind(schema_to_pyarrow(field.field_type))
    except schemas.UnsupportedSchema:
        return None


def parsed_schema(declared: tuple[tuple[str, str], ...]):
    """The parsed shape, as a new table has it: the Kafka metadata struct (key_value's,
    without key, value and headers), the event time, the declared columns. The files
    carry no field ids: the table reads them by name (its name mapping)."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import (IntegerType, LongType, NestedField, StringType, StructType,
                                 TimestamptzType)

    kafka = StructType(NestedField(2, "topic", StringType(), required=True),
                       NestedField(3, "partition", IntegerType(), required=True),
                       NestedField(4, "offset", LongType(), required=True),
                       NestedField(5, "timestamp", TimestamptzType(), required=False),
                       NestedField(6, "timestamp_type", StringType(), required=False))
    return Schema(NestedField(1, columns.KAFKA, kafka, required=True),
                  NestedField(7, columns.EVENT_TIME, TimestamptzType(), required=True),
                  *(NestedField(8 + i, name, iceberg_type(kind), required=False)
                    for i, (name, kind) in enumerate(declared)))


def parsed_spec(granularity: str):
    """Parsed tables are partitioned by the hour or day of the event time: each file
    holds one (the slice writer's time partition)."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import DayTransform, HourTransform

    transform = HourTransform() if granularity == "hour" else DayTransform()
    return PartitionSpec(PartitionField(source_id=7, field_id=1000, transform=transform,
                                        name=f"event_time_{granularity}"))


class Tables:
    """A config's table groups' tables in their groups' catalogs: the catalog's properties
    from the config, plus those of the Airflow connection its `conn_id` names (through
    `connection`: the catalog database's password, a REST catalog's credential), the
    FileIO's (S3 endpoint and credentials) from `file_io`. Both are looked up when a
    catalog is first needed (a commit of a group without tables looks up nothing), and
    never logged."""

    def __init__(self, config: Config, file_io: Callable[[], dict[str, str]] = dict,
                 connection: Callable[[str], dict[str, str]] | None = None):
        self.config, self._file_io, self._connection = config, file_io, connection
        self._catalogs = {}

    def __repr__(self) -> str:  # the FileIO properties hold secrets
        return f"Tables({', '.join(self.config.iceberg_catalogs)})"

    def table(self, group: str, topic: str, dead_letters: bool = False):
        """The topic's table (or its dead-letter table), created (with its namespace) when
        absent: for writers."""
        spec = self.spec(group)
        shape = self.config.group(group).layout
        if dead_letters:
            schema, partitioning = dead_letter_schema(), key_value_spec()
        elif shape.kind == "event_time":
            schema, partitioning = parsed_schema(spec.columns), parsed_spec(shape.granularity)
        else:
            schema, partitioning = key_value_schema(), key_value_spec()
        return open_table(self._catalog(spec.catalog), self.identifier(group, topic, dead_letters),
                          self.location(group, topic, dead_letters), schema, partitioning)

    def find(self, group: str, topic: str, dead_letters: bool = False):
        """The topic's table (or its dead-letter table), or None when there is none yet:
        for readers, who make none."""
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return self._catalog(self.spec(group).catalog).load_table(
                self.identifier(group, topic, dead_letters))
        except NoSuchTableError:
            return None

    def kinds(self, group: str) -> tuple[bool, ...]:
        """`dead_letters` values of a group's tables per topic: an event-time group's
        topic has a dead-letter table beside its table (first: see commit_tables)."""
        return (True, False) if self.config.group(group).layout.kind == "event_time" else (False,)

    def identifier(self, group: str, topic: str, dead_letters: bool = False) -> tuple[str, str]:
        """A tuple: a topic's dots stay in its table's name."""
        return self.spec(group).namespace, topic + DEAD_LETTER_SUFFIX if dead_letters else topic

    def location(self, group: str, topic: str, dead_letters: bool = False) -> str:
        root = self.config.archive_root
        return (layout.dead_letter_location(root, group, topic) if dead_letters
                else layout.table_location(root, group, topic))

    def withdraw_run(self, plan: Plan, manifest: dict, topic: str) -> None:
        """Take a run's commit of a topic out of its tables again: its files go, and what its
        rewind took out comes back (a withdrawn commit leaves the table as the run found
        it). The run lost its token's compare-and-swap to another run after its table commit
        (two plans at once), or was given up by hand (plan.runs): the table must not keep
        what the token and the catalog do not cover. Idempotent; a run whose commit is
        re-executed after it was withdrawn commits again (run_snapshot)."""
        missed = not_archived(manifest)
        for dead_letters in self.kinds(plan.group):
            inside = self.location(plan.group, topic, dead_letters) + "/"
            table = self.find(plan.group, topic, dead_letters)
            if table is None or run_snapshot(table, plan.run_id) is None:
                continue  # its commit never reached this table (or is withdrawn already)
            files = [url for url in files_of(manifest, topic) if url.startswith(inside)]
            back = [url for url in plan.superseded if url.startswith(inside)
                    and not _of_partitions(url, topic, missed)]
            held = current_files(table, [*back, *files])
            back, files = [u for u in back if u not in held], [u for u in files if u in held]
            if back or files:
                commit_run(table, plan.run_id + WITHDRAWN, back, files)

    def columns(self, group: str, topic: str) -> list[list[str]]:
        """A parsed table's field columns ([name, type], the table's order), as the next
        run writes them: the table's, then the declared ones it lacks (a new table: the
        declared ones). A declared type the table has otherwise is refused by name."""
        spec = self.spec(group)
        table = self.find(group, topic)
        found: dict[str, str] = {}
        for field in table.schema().fields if table is not None else ():
            if field.name in columns.RESERVED:
                continue
            if (kind := column_type(field)) is None:
                raise TerminalError(f"table {name(table)}: column {field.name} is "
                                    f"{field.field_type}, not a type this archive writes")
            found[field.name] = kind
        for column, kind in spec.columns:
            if found.setdefault(column, kind) != kind:
                raise TerminalError(f"{self.config.path}: groups.{group}.table.columns says "
                                    f"{column} is {kind}, table {name(table)} has it as "
                                    f"{found[column]} (Iceberg cannot change it so)")
        return [[column, kind] for column, kind in found.items()]

    def column_origins(self, group: str, topic: str) -> dict[str, str]:
        """A typed table's columns' schema ids, as the next run is planned with them."""
        return column_origins(self.find(group, topic))

    def column_identities(self, group: str, topic: str) -> dict[str, list[str]]:
        """A typed table's columns' field identities, as the next run is planned with them."""
        return column_identities(self.find(group, topic))

    def spec(self, group: str) -> TableSpec:
        """The group's table settings; a group without them is refused by name."""
        spec = self.config.group(group).table
        if spec is None:
            raise TerminalError(f"group {group} keeps no tables (no `table:` in its config)")
        return spec

    def _catalog(self, name: str):
        if name not in self._catalogs:
            properties = dict(self.config.iceberg_catalogs[name])
            if conn_id := properties.pop("conn_id", None):
                if self._connection is None:
                    raise TerminalError(f"{self.config.path}: iceberg_catalogs.{name}.conn_id "
                                        f"{conn_id}: no Airflow connections here")
                properties |= self._connection(conn_id)
            self._catalogs[name] = catalog(name, {"warehouse": self.config.archive_root,
                                                  **properties, **self._file_io()})
        return self._catalogs[name]


def catalog(name: str, properties: dict):
    """pyiceberg's catalog; an embedded SQLite one gets its folder first."""
    try:
        from pyiceberg.catalog import load_catalog
    except ImportError:
        raise TerminalError("pyiceberg is not installed here: a table group needs "
                            "pip install 'kafka-archive[tables]'") from None

    uri = properties.get("uri", "")
    if uri.startswith("sqlite:///"):
        Path(uri[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
    return load_catalog(name, **properties)


def open_table(catalog, identifier: tuple[str, str], location: str | None = None,
               schema=None, partitioning=None):
    """A table (default: the key_value shape), created (with its namespace) when absent,
    with a name mapping (files without field ids, the parsed shape's, are read by name)."""
    catalog.create_namespace_if_not_exists(identifier[0])
    table = catalog.create_table_if_not_exists(
        identifier, schema=schema or key_value_schema(),
        partition_spec=partitioning or key_value_spec(), location=location,
        properties=TABLE_PROPERTIES)
    if table.metadata.name_mapping() is None:  # kept up to date by each schema update
        from pyiceberg.table import TableProperties

        set_properties(table, {TableProperties.DEFAULT_NAME_MAPPING:
                               table.schema().name_mapping.model_dump_json()})
    return table


def set_properties(table, properties: dict[str, str]) -> None:
    """The table's properties set; on a lost race (another writer committed meanwhile: a
    run, a compaction, maintenance) set again on the table read again."""
    def attempt() -> None:
        with table.transaction() as tx:
            tx.set_properties(properties)

    _until_won(table, f"set {sorted(properties)}", attempt)


def _until_won(table, what: str, attempt):
    """attempt()'s result, on the table as last committed: read again and tried again
    after each lost compare-and-swap, ATTEMPTS times at most."""
    from pyiceberg.exceptions import CommitFailedException

    for n in range(1, ATTEMPTS + 1):
        table.refresh()
        try:
            return attempt()
        except CommitFailedException as exc:
            log.warning("table %s: another writer committed first (%s); again (%d)",
                        name(table), exc, n)
    raise TransientError(f"table {name(table)}: lost the race to {what} {ATTEMPTS} times; "
                         "run again")


def commit_tables(tables: Tables, plan: Plan, manifest: dict) -> dict[str, int]:
    """Each topic's files of the run into its table, with the files the plan's rewind
    replaces taken out, one snapshot per table; topic -> snapshot id of its table. An
    event-time group's dead letters go into their table first: once a run is in the
    topic's table, its dead letters are in theirs (a crash between the two leaves the
    run in neither for a reader of the topic's table; the commit's re-run adds it)."""
    done, missed = {}, not_archived(manifest)  # what they were to replace stays
    for topic in plan.topics():
        rows = [e for e in manifest["slices"] if e["topic"] == topic]
        offsets = ", ".join(f"{e['partition']}: [{e['start']}, {e['end']})" for e in rows)
        for dead_letters in tables.kinds(plan.group):
            inside = tables.location(plan.group, topic, dead_letters) + "/"
            add = [f for f in manifest_files(manifest, topic) if f["url"].startswith(inside)]
            remove = [url for url in plan.superseded if url.startswith(inside)
                      and not _of_partitions(url, topic, missed)]
            if add or remove:
                evolve = new_columns(add)
                snapshot = commit_run(tables.table(plan.group, topic, dead_letters), plan.run_id,
                                      [f["url"] for f in add], remove, offsets, evolve,
                                      new_origins(add, evolve), new_identities(add))
                if not dead_letters:
                    done[topic] = snapshot.snapshot_id
    return done


def _of_partitions(url: str, topic: str, partitions: set[tuple[str, int]]) -> bool:
    name = layout.parse_file_name(url.rsplit("/", 1)[1])
    return name is not None and (topic, name.partition) in partitions


def new_columns(files: list[dict]) -> dict:
    """The field columns a run's parsed files hold (formats.parquet.ParsedWriter), by
    name, in the order they first appear, each promoted to hold every file's (a typed
    table's int in one file, long in another: long); a run whose files disagree on one
    otherwise is refused (archive.job makes them agree)."""
    found: dict = {}
    for f in files:
        for column, kind in f.get("columns", ()):
            seen = found.setdefault(column, kind)
            if (merged := columns.promoted(seen, kind)) is None:
                raise TerminalError(f"{f['url']}: column {column} is {columns.shown(kind)}, "
                                    f"another file of the run has it as {columns.shown(seen)}")
            found[column] = merged
    return found


def new_origins(files: list[dict], wanted: dict) -> dict[str, str]:
    """Per column of `wanted` (new_columns), the schema id that set its type, as the
    first of a run's typed files having it so says (formats.parquet.ParsedWriter)."""
    found: dict[str, str] = {}
    for f in files:
        kinds = dict(f.get("columns", ()))
        for column, origin in f.get("origins", {}).items():
            if kinds.get(column) == wanted.get(column):
                found.setdefault(column, origin)
    return found


def new_identities(files: list[dict]) -> dict[str, list[str]]:
    """The field identities of the columns of a run's typed files (formats.schemas.fit),
    each column's merged; a run whose files hold one identity in two columns is refused
    (archive.job makes them agree)."""
    found: dict[str, list[str]] = {}
    for f in files:
        for column, identities in f.get("identities", {}).items():
            merged = found.setdefault(column, [])
            merged += [i for i in identities if i not in merged]
            if twice := [c for c, held in found.items() if c != column
                         and set(held) & set(identities)]:
                raise TerminalError(f"{f['url']}: column {column} holds a field that column "
                                    f"{twice[0]} of another file of the run holds")
    return found


WITHDRAWN = " (withdrawn)"  # the run id of a snapshot that takes a run's commit out again


def manifest_files(manifest: dict, topic: str) -> list[dict]:
    """A run's file entries (url, records, columns, ...) of one topic."""
    return [f for e in added_rows(manifest) if e["topic"] == topic for f in row_files(e)]


def files_of(manifest: dict, topic: str) -> list[str]:
    """The URLs of a run's files of one topic."""
    return [f["url"] for f in manifest_files(manifest, topic)]


def run_snapshot(table, run_id: str):
    """The snapshot that committed run_id (or, for `<run>(withdrawn)`, withdrew it), or
    None; also None when a later snapshot undid it (a withdrawal after the commit, a
    commit again after the withdrawal)."""
    base = run_id.removesuffix(WITHDRAWN)
    last = max((s for s in table.metadata.snapshots if s.summary is not None
                and s.summary.get(RUN_ID) in (base, base + WITHDRAWN)),
               key=lambda s: s.sequence_number or 0, default=None)
    return last if last is not None and last.summary.get(RUN_ID) == run_id else None


def commit_run(table, run_id: str, add: list[str], remove: list[str] = (), offsets: str = "",
               evolve: dict | None = None, origins: dict[str, str] | None = None,
               identities: dict[str, list[str]] | None = None):
    """Add the run's files (Parquet, paths in the table's file IO) and take out the files
    it replaces, in one snapshot whose summary names the run, after the columns of
    `evolve` ({name: kind}) the table lacks or holds narrower are added or evolved in
    the same commit (with the schema ids `origins` names for them, and the field
    identities `identities` names for the columns); the run's
    snapshot (the existing one when it committed already). A rewind's file to add that the table holds
    already, other than as one this run replaces, is refused: a message would be in it
    twice. (No two runs share a path (layout.table_data_file) and our own catalog refuses
    overlapping offsets before this, so a plain append reads no manifest: at a year of runs
    that would be every commit reading the whole table.)"""
    def changes(tx) -> None:
        current = current_files(table, [*add, *remove]) if remove else {}
        if twice := sorted(set(add) & set(current) - set(remove)):
            raise TerminalError(f"table {name(table)}: run {run_id} would add "
                                f"{twice[0]}, which the table holds already (and "
                                f"{len(twice) - 1} more): refused, nothing committed")
        _add_columns(tx, table, evolve or {}, origins or {}, identities or {})
        properties = {RUN_ID: run_id, **({OFFSETS: offsets} if offsets else {})}
        update = tx.update_snapshot(snapshot_properties=properties)
        # merge_append: small manifests are merged as they accumulate (a fast append adds
        # one per commit, and a reader opens every one: 35,000 at a year of runs)
        with (update.overwrite() if remove else update.merge_append()) as producer:
            for path in remove:
                if path in current:
                    producer.delete_data_file(current[path])
            for path in add:
                producer.append_data_file(data_file(table, tx.table_metadata, path))

    return _once(table, run_id, "run", changes)


def replace_files(table, compaction_id: str, remove: list[str], add: list[str], offsets: str,
                  what: str):
    """A compaction's files in place of the files it rewrote, in one `replace` snapshot
    (data unchanged: incremental readers skip it) whose summary names the compaction and
    the offset ranges; nothing when the table holds it already. A file to remove that is
    no longer current is refused (the rows changed under the compaction)."""
    def changes(tx) -> None:
        current = current_files(table, remove)
        if gone := [path for path in remove if path not in current]:
            raise TerminalError(f"table {name(table)}: compaction {compaction_id} would replace "
                                f"{gone[0]}, which is no longer a current file (and "
                                f"{len(gone) - 1} more): refused, nothing committed")
        properties = {RUN_ID: compaction_id, OFFSETS: offsets, COMPACTED: what}
        with _replacing(tx, table.io, properties) as producer:
            for path in remove:
                producer.delete_data_file(current[path])
            for path in add:
                producer.append_data_file(data_file(table, tx.table_metadata, path))

    return _once(table, compaction_id, "compaction", changes)


def _once(table, run_id: str, what: str, changes):
    """The snapshot whose summary names run_id: the table's, when it holds one already,
    else the one `changes(transaction)` makes (or refuses, raising), committed. On a lost
    compare-and-swap the table is read again and asked first."""
    def attempt():
        if (found := run_snapshot(table, run_id)) is not None:
            log.info("table %s holds %s %s already (snapshot %d)", name(table), what, run_id,
                     found.snapshot_id)
            return found
        tx = table.transaction()
        changes(tx)
        tx.commit_transaction()
        return run_snapshot(table.refresh(), run_id)

    return _until_won(table, f"commit {what} {run_id}", attempt)


def _replacing(tx, io, properties: dict[str, str]):
    """A producer of a `replace` snapshot. pyiceberg (0.12) has none, and its summary code
    takes only append, overwrite and delete: its overwrite producer writes exactly what a
    replace is (files out, files in), and the summary it computes gets the operation
    Iceberg's spec gives a rewrite of files that changes no data."""
    from pyiceberg.table.snapshots import Operation, Summary
    from pyiceberg.table.update.snapshot import _OverwriteFiles

    class Replace(_OverwriteFiles):
        def _summary(self, snapshot_properties=None):
            found = super()._summary(snapshot_properties or {})
            return Summary(Operation.REPLACE, **found.additional_properties)

    return Replace(operation=Operation.OVERWRITE, transaction=tx, io=io,
                   snapshot_properties=properties)


def _add_columns(tx, table, wanted: dict, origins: dict[str, str],
                 identities: dict[str, list[str]]) -> None:
    """The columns a run's files bring that the table lacks, added in the run's own
    commit (a reader sees the column and its values together), and those a typed table's
    new schema version widens, evolved so (int to long, a struct's new field: Iceberg's
    union by name), with the schema id that set each (ORIGINS) and the identities of the
    field each holds (IDENTITIES: a run planned with them named its fields so); a column
    the table has with a type Iceberg cannot evolve into the file's is refused (the run
    was planned with the table's columns)."""
    import pyarrow as pa

    from kafka_archive.formats import schemas

    schema = table.schema()
    evolved = {}
    for column, kind in wanted.items():
        field = schema.find_field(column) if column in schema._name_to_id else None
        current = None if field is None else column_type(field)
        merged = kind if field is None else columns.promoted(current, kind)
        if merged is None or (field is not None and current is None):
            raise TerminalError(f"table {name(table)}: a file of the run has column {column} as "
                                f"{columns.shown(kind)}, the table as {field.field_type}: "
                                "refused, nothing committed")
        if merged != current:
            evolved[column] = merged
    if evolved:
        with tx.update_schema() as update:
            update.union_by_name(pa.schema([pa.field(column, schemas.arrow(kind))
                                             for column, kind in evolved.items()]))
    properties = {}
    if set_by := {c: origins[c] for c in evolved if c in origins}:
        properties[ORIGINS] = json.dumps({**column_origins(table), **set_by}, sort_keys=True)
    held = column_identities(table)
    grown = {c: [*held.get(c, []), *(i for i in ids if i not in held.get(c, []))]
             for c, ids in identities.items()}
    if {**held, **grown} != held:
        properties[IDENTITIES] = json.dumps({**held, **grown}, sort_keys=True)
    if properties:
        tx.set_properties(properties)


def column_origins(table) -> dict[str, str]:
    """A typed table's columns' schema ids (ORIGINS); {} for a table without them."""
    return _json_property(table, ORIGINS)


def column_identities(table) -> dict[str, list[str]]:
    """A typed table's columns' field identities (IDENTITIES); {} for other tables."""
    return _json_property(table, IDENTITIES)


def _json_property(table, key: str) -> dict[str, str]:
    return json.loads(table.properties.get(key) or "{}") if table is not None else {}


def current_files(table, paths: list[str]) -> dict:
    """path -> DataFile of the table's current files in the Kafka partitions of `paths`
    (read from their names; the whole table when a name does not say, or for no paths)."""
    from pyiceberg.expressions import AlwaysTrue, In

    if table.current_snapshot() is None:
        return {}
    names = [layout.parse_file_name(p.rsplit("/", 1)[-1]) for p in paths]
    where = (In("kafka.partition", {n.partition for n in names}) if names and all(names)
             else AlwaysTrue())
    return {task.file.file_path: task.file for task in table.scan(row_filter=where).plan_files()}


def name(table) -> str:
    return ".".join(table.name())


# Kafka's partition and offset live in the `kafka` struct, and pyiceberg keeps only counts
# for nested columns: no partition value to infer, no offset bounds for readers to prune
# by. The Parquet footer has them: taken from there.
KAFKA_BOUNDS = ("kafka.partition", "kafka.offset")


def data_file(table, metadata, path: str):
    """The Iceberg DataFile of one of our Parquet files, with the Kafka partition and
    offset bounds, and the Kafka partition as the partition value of a table partitioned
    by it (a parsed table's, the event time's hour or day, pyiceberg reads from the
    file's bounds)."""
    import pyarrow.parquet as pq
    from pyiceberg.conversions import to_bytes
    from pyiceberg.io.pyarrow import parquet_file_to_data_file
    from pyiceberg.manifest import DATA_FILE_TYPE, DEFAULT_READ_VERSION, DataFile
    from pyiceberg.typedef import Record

    try:
        found = parquet_file_to_data_file(table.io, metadata, path)
    except ValueError as exc:  # columns the table does not have, or not so
        raise TerminalError(f"{path} does not fit table {name(table)}: {exc}") from None
    with table.io.new_input(path).open() as stream:
        footer = pq.read_metadata(stream)
    bounds: dict[str, list[int]] = {}
    for group in range(footer.num_row_groups):
        for column in range(footer.num_columns):
            chunk = footer.row_group(group).column(column)
            where = chunk.path_in_schema
            if where not in KAFKA_BOUNDS or chunk.statistics is None \
                    or not chunk.statistics.has_min_max:
                continue
            low, high = bounds.get(where, (chunk.statistics.min, chunk.statistics.max))
            bounds[where] = [min(low, chunk.statistics.min), max(high, chunk.statistics.max)]
    schema = metadata.schema()
    for where, (low, high) in bounds.items():
        field = schema.find_field(where)
        found.lower_bounds[field.field_id] = to_bytes(field.field_type, low)
        found.upper_bounds[field.field_id] = to_bytes(field.field_type, high)
    partitions = bounds.get("kafka.partition")
    if footer.num_rows and (partitions is None or partitions[0] != partitions[1]):
        raise TerminalError(f"{path}: holds Kafka partitions {partitions}; each of our files "
                            "holds one")
    if [f.name for f in metadata.spec().fields] != ["kafka_partition"]:
        return found
    # a DataFile's partition has no setter: the same file, bound again with it
    fields = {f.name: getattr(found, f.name) for f in DATA_FILE_TYPE[DEFAULT_READ_VERSION].fields}
    return DataFile.from_args(**{**fields, "partition": Record(partitions[0] if partitions
                                                               else None)})
