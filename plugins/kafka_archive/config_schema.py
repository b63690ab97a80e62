"""The shape of the config file, checked by pydantic: every section refuses unknown keys
(with a "did you mean" hint), values are typed and ranged, regexes compiled, cron
schedules parsed with croniter as Airflow parses them, durations read as 300, '15m', '2h'.
`config.load` turns the checked document into the library's plain config values;
`problems` turns pydantic's errors into lines naming the key path."""

from __future__ import annotations

import difflib
import re
from typing import Annotated, Any, Literal

from croniter import croniter
from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field,
                      ValidationError, field_validator, model_validator)
from pydantic_core import PydanticCustomError

from kafka_archive import formats
from kafka_archive.formats import columns, parsers
from kafka_archive.errors import ConfigError
from kafka_archive.layout import LayoutSpec

# Airflow's own schedule presets beyond croniter's @hourly, @daily, ...
_AIRFLOW_PRESETS = ("@once", "@continuous")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def problem(message: str, key: str | None = None) -> PydanticCustomError:
    """A validation error; `key`, when given, is the sub-key the message is about."""
    return PydanticCustomError("config", "{message}", {"message": message, "key": key})


def _seconds(value: Any) -> Any:
    if isinstance(value, bool):
        raise problem(f"must be a duration like 300, '15m' or '2h', got {value!r}")
    m = re.fullmatch(r"(\d+)\s*([smhd]?)", str(value).strip())
    if not m:
        raise problem(f"must be a duration like 300, '15m' or '2h', got {value!r}")
    return int(m[1]) * _UNITS[m[2]]


def _integer(value: Any) -> Any:
    if isinstance(value, bool):  # YAML's true is no count
        raise problem(f"must be an integer, got {value!r}")
    return value


def _regex(pattern: str) -> str:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise problem(f"bad regex {pattern!r}: {exc}") from None
    return pattern


def _cron(schedule: str | None) -> str | None:
    """Refuses what Airflow's CronMixin would refuse: croniter's parse, at most 5 fields."""
    if schedule is None or schedule in _AIRFLOW_PRESETS:
        return schedule
    try:
        fields = croniter(schedule).expanded
    except Exception as exc:  # croniter raises several error types for bad expressions
        raise problem(f"not a cron schedule ({exc}); use 5 fields like '*/15 * * * *', "
                      f"a preset like @hourly, @once or null") from None
    if len(fields) > 5:
        raise problem(f"cron schedule {schedule!r} has {len(fields)} fields; Airflow takes 5")
    return schedule


def _matching(pattern: str, what: str) -> AfterValidator:
    def check(value: str) -> str:
        if not re.fullmatch(pattern, value):
            raise problem(f"{what}, got {value!r}")
        return value
    return AfterValidator(check)


def _listed(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


Seconds = Annotated[int, BeforeValidator(_seconds)]
Count = Annotated[int, BeforeValidator(_integer), Field(ge=1)]
Regex = Annotated[str, AfterValidator(_regex)]
Regexes = Annotated[list[Regex], BeforeValidator(_listed)]
Cron = Annotated[str | None, AfterValidator(_cron)]
Text = Annotated[str, Field(min_length=1)]
# a Java-style property value: numbers and booleans (YAML's) become their text
PropertyText = Annotated[str, BeforeValidator(lambda v: str(v).lower() if isinstance(v, bool) else str(v))]


class Section(BaseModel):
    """A mapping of the config file: unknown keys are refused, naming the closest known one."""
    # each key's docstring is its description in the generated reference (docs/)
    model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=False,
                              use_attribute_docstrings=True)

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            known = [f.alias or name for name, f in cls.model_fields.items()]
            for key in data:
                if key not in known:
                    close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
                    hint = f"did you mean {close[0]}?" if close else f"known: {', '.join(known)}"
                    raise problem(f"unknown key; {hint}", key=str(key))
        return data


class Kafka(Section):
    """The cluster: its bootstrap servers here, or an Airflow connection of the Kafka
    provider's type (`conn_id`) whose extra holds them with the client properties."""
    bootstrap_servers: Text | None = None
    """The brokers, `host:port[,host:port...]`. Or `conn_id`, not both."""
    conn_id: Text | None = None
    """An Airflow connection holding the brokers and the client properties: type `kafka_archive_kafka` (its form has SASL's username and password) or the Kafka provider's `kafka` (librdkafka properties in its extra)."""
    properties: dict[str, PropertyText] = {}  # extra client properties (Java names)
    """Extra Kafka client properties in Java names (security.protocol, sasl.mechanism, sasl.jaas.config with `${ENV}` secrets...), given to every client."""

    @model_validator(mode="after")
    def _one_source(self) -> Kafka:
        if self.bootstrap_servers is None and self.conn_id is None:
            raise problem("missing required key (or conn_id: an Airflow connection of type "
                          "kafka whose extra holds bootstrap.servers)", key="bootstrap_servers")
        if self.bootstrap_servers is not None and self.conn_id is not None:
            raise problem("give bootstrap_servers or conn_id (whose connection holds them), "
                          "not both", key="bootstrap_servers")
        return self


class SchemaRegistry(Section):
    """The Schema Registry of topics in the Confluent wire format (parsers avro, protobuf,
    json_schema): confluent-kafka's SchemaRegistryClient settings."""
    url: Text | None = None
    """Its URL, e.g. `https://registry:8081` (Apicurio: `.../apis/ccompat/v7`). Or `conn_id`, not both."""
    conn_id: Text | None = None
    """An Airflow connection holding it: host the URL, login and password basic auth (a password alone: a bearer token), extra `ca` the TLS CA file."""
    properties: dict[str, PropertyText] = {}
    """More client settings by confluent-kafka's names: `basic.auth.user.info` (`${ENV}` for the secret), `ssl.ca.location`, `bearer.auth.*`."""

    @model_validator(mode="after")
    def _one_source(self) -> SchemaRegistry:
        if self.url is not None and self.conn_id is not None:
            raise problem("give url or conn_id (whose connection holds it), not both",
                          key="url")
        return self


class Policy(Section):
    """Unset keys come from the group's policy (or the defaults)."""
    max_records: Count | None = None
    """At most this many messages of a partition per run (default 5,000,000)."""
    max_bytes: Count | None = None
    """At most this many bytes of a partition per run: the job ends the slice there (default 1 GiB)."""
    min_records: Count | None = None
    """A partition with fewer pending messages waits (default 1) ..."""
    max_delay: Seconds | None = Field(None, ge=0)
    """... unless its oldest pending message is this old (a duration: `30s`, `5m`, `1h`, `7d`; default 1h)."""
    freshness: Seconds | None = Field(None, ge=1)
    """The SLA: an alert mail when the newest archived message is this far behind Kafka's newest (checked after each commit; default 2h)."""


class Format(Section):
    kind: str = "sequencefile"
    """`sequencefile` (Hadoop SequenceFile), `text` (a line a message), `baldr` (length-prefixed gzip) or `parquet` (a table group's)."""
    key: Literal["msgpack", "offset"] | None = None
    """sequencefile: the record key, `msgpack` (offset, key, timestamp, headers: lossless, replayable; default) or `offset` (Secor's LongWritable)."""
    compression: str | None = None
    """sequencefile: `none`, `default` (zlib, Hadoop's DefaultCodec), `gzip`, `fast` (ISA-L's zlib) or `snappy`; text: `none` or `gzip`."""
    escape_newlines: bool | None = None
    """text: escape newlines and backslashes instead of refusing a message that holds one."""
    level: Annotated[int, BeforeValidator(_integer), Field(ge=1, le=9)] | None = None  # zlib
    """zlib's level for compression `default` or `gzip`: 1 (fastest) to 9 (smallest); default 6."""

    @field_validator("kind")
    @classmethod
    def _registered(cls, kind: str) -> str:
        if kind not in formats.FORMATS:
            raise problem(f"unknown format kind {kind!r}; one of {', '.join(formats.FORMATS)}")
        return kind

    @model_validator(mode="after")
    def _fits_kind(self) -> Format:
        takes = {"sequencefile": {"key", "compression", "level"},
                 "text": {"compression", "escape_newlines"},
                 "baldr": set(), "parquet": set()}[self.kind]
        for key in sorted(self.model_fields_set - takes - {"kind"}):
            raise problem(f"format kind {self.kind} does not take {key} (it takes "
                          f"{', '.join(sorted(takes | {'kind'}))})", key=key)
        compressions = {"sequencefile": tuple(formats.SEQUENCEFILE_COMPRESSION),
                        "text": ("none", "gzip"), "baldr": ("gzip",),
                        "parquet": ("zstd",)}[self.kind]
        if self.compression is not None and self.compression not in compressions:
            raise problem(f"must be one of {', '.join(compressions)} for format kind "
                          f"{self.kind}, got {self.compression!r}", key="compression")
        if self.level is not None and (self.compression or "default") not in ("default", "gzip"):
            raise problem(f"a level is zlib's: it applies to compression default or gzip, not "
                          f"{self.compression}", key="level")
        return self


Level = Literal["day", "hour", "minute"]


class Layout(Section):
    kind: Literal["partition", "event_time"] = "partition"
    """`partition` (`partition=<n>/`, the backup layout) or `event_time` (`dt=YYYY-MM-DD/hr=HH/` by the parser's event time, UTC)."""
    granularity: str | None = None
    """event_time: `day`, `hour` (default) or `minute`."""
    prefixes: dict[Level, str] = {}
    """event_time: each level's folder prefix, e.g. `{day: date=}` (defaults `dt=`, `hr=`, `min=`)."""
    formats: dict[Level, str] = {}
    """event_time: each level's strftime format (defaults `%Y-%m-%d`, `%H`, `%M`)."""

    @model_validator(mode="after")
    def _builds(self) -> Layout:
        if self.kind == "partition" and self.model_fields_set - {"kind"}:
            raise problem(f"layout kind partition takes no "
                          f"{', '.join(sorted(self.model_fields_set - {'kind'}))}")
        try:
            self.spec()
        except ValueError as exc:
            raise problem(str(exc)) from None
        return self

    def spec(self) -> LayoutSpec:
        default = LayoutSpec()
        levels = ("day", "hour", "minute")
        return LayoutSpec(kind=self.kind, granularity=self.granularity or default.granularity,
                          prefixes=tuple(self.prefixes.get(lv, d) for lv, d in zip(levels, default.prefixes)),
                          formats=tuple(self.formats.get(lv, d) for lv, d in zip(levels, default.formats)))


def _parser(value: Any) -> parsers.ParserSpec:
    """`json`, `mypkg.module:Class`, or {kind: json, field: ts, unit: ms}: other keys are
    the parser's options."""
    options = dict(value) if isinstance(value, dict) else {"kind": value}
    kind = options.pop("kind", None)
    if not isinstance(kind, str):
        raise problem(f"must be a parser name or dotted class path, or a mapping with 'kind' "
                      f"and the parser's options, got {value!r}")
    try:
        return parsers.load_checked(kind, options)
    except ConfigError as exc:
        raise problem(str(exc)) from None


Parser = Annotated[Any, AfterValidator(_parser)]


class Topics(Section):
    include: Regexes = [".*"]
    """Regular expressions (whole-name matches): a topic matching one is archived ..."""
    exclude: Regexes = ["_.*"]  # Kafka's own and our monitoring topics
    """... unless it matches one of these (default: names starting with `_`, Kafka's own and the audit's)."""


class Table(Section):
    """An Iceberg table per topic, `<namespace>.<topic>` in the named catalog (issue 32)."""
    catalog: Text = "local"
    """The Iceberg catalog, a name under `iceberg_catalogs` (`local`: SQLite beside the config)."""
    namespace: Annotated[str, _matching(r"[A-Za-z0-9_]+", "may only use letters, digits "
                                                           "and _")] = "kafka_archive"
    """The tables' namespace: topic t becomes `<namespace>.t` (and `<namespace>.t_dlq`, its dead letters)."""
    # older snapshots expire (time travel ends there), and the files only they read go
    keep_snapshots: Seconds = Field(7 * 86400, ge=0)
    """Snapshots older than this expire, and the files only they read are deleted (time travel ends there)."""
    # compaction (commit.compaction): files of runs planned longer ago than this are
    # rewritten into files of about target_file_size bytes; null: never compacted
    compact_after: Seconds | None = Field(3600, ge=0)
    """Files of runs planned longer ago than this are compacted into files of about `target_file_size`; null: never."""
    target_file_size: Count = 256 << 20
    """Compaction's target file size in bytes (default 256 MiB)."""
    # an event_time group's parsed shape: {field: type}; other fields get a column of
    # their own type as messages bring them (formats.columns)
    columns: dict[Text, str] = {}
    """event_time groups (the parsed shape): declared `{field: type}` columns; other fields get a column of their own type as messages bring them."""

    @field_validator("columns")
    @classmethod
    def _typed(cls, declared: dict[str, str]) -> dict[str, str]:
        try:
            columns.check_declared(declared)
        except ValueError as exc:
            raise problem(str(exc)) from None
        return declared


class Group(Section):
    schedule: Cron = None
    """When the group's DAG runs: cron (`*/15 * * * *`) or null for manual runs only."""
    topics: Topics = Topics()
    """Which topics the group archives (new ones are found at each run)."""
    start_from: Literal["earliest", "latest"] = "earliest"
    """Where a partition without a token starts: `earliest` retained offset (default) or `latest`. Under `latest`, a partition the archive already holds (its token line deleted) goes on from the archive's end: nothing is skipped unsaid."""
    on_retention_gap: Literal["fail", "skip"] = "fail"
    """A token below Kafka's earliest retained offset: `fail` (default: mail, hold the topic until a person accepts the loss) or `skip` (jump ahead, record the loss)."""
    format: Format = Format()
    """How the group's files are written (Format, below)."""
    topic_formats: dict[Regex, Format] = {}
    """Per topic regex, a format instead of `format`; the first match wins."""
    policy: Policy = Policy()
    """When a partition is worth a file, and how much one run takes (Policy, below)."""
    topic_policies: dict[Regex, Policy] = {}
    """Per topic regex, policy keys instead of `policy`'s; the first match wins."""
    deadline: Seconds = Field(1800, ge=1)
    """An alert mail when a run has not finished this long after it was queued (Airflow's deadline alerts)."""
    layout: Annotated[Layout, BeforeValidator(
        lambda v: {"kind": v} if isinstance(v, str) else v)] = Layout()
    """Where files go under a topic (Layout, below); `partition` or `event_time` as a shorthand."""
    parser: Parser = Field("timestamp", validate_default=True)
    """event_time: how a message gives its event time: `timestamp` (Kafka's), `json` with `field` and `unit`, `msgpack`, or a dotted class path."""
    topic_parsers: dict[Regex, Parser] = {}
    """Per topic regex, a parser instead of `parser`; the first match wins."""
    lateness: Seconds = Field(3600, ge=0)
    """event_time: a time partition gets `_SUCCESS` once every partition is archived this far past its end."""
    table: Table | None = None
    """Write the group as Iceberg tables, one per topic (Table, below); needs format kind parquet."""
    # the group's jobs as a Spark Connect client of this connection (sc://host:port, token,
    # TLS: the Spark provider's spark_connect type); none: spark-submit
    spark_connect: Text | None = None
    """An Airflow connection of type `spark_connect`: the group's jobs run as Spark Connect clients (no JVM in the task); none: spark-submit through the `kafka_archive_spark` connection."""

    @model_validator(mode="after")
    def _table_shape_fits(self) -> Group:
        """A table group's shape follows its layout: `partition` is the key_value shape
        (partitioned by Kafka partition), `event_time` the parsed one (partitioned by the
        hour or day of the event time, with its parser's fields as columns)."""
        if self.table is None:
            return self
        kinds = {self.format.kind} | {f.kind for f in self.topic_formats.values()}
        if kinds != {"parquet"}:
            raise problem("a table group's format kind is parquet (every topic_formats entry "
                          f"too), got {', '.join(sorted(kinds))}", key="table")
        if self.layout.kind == "partition":
            if self.table.columns:
                raise problem("columns are the parsed shape's: layout kind event_time",
                              key="table.columns")
            return self
        if self.layout.spec().granularity not in ("hour", "day"):
            raise problem("an event_time table is partitioned by hour or day (Iceberg's "
                          f"transforms), not {self.layout.spec().granularity}",
                          key="layout.granularity")
        for spec in [self.parser, *self.topic_parsers.values()]:
            if not callable(getattr(parsers.parser_for(spec), "parse", None)):
                raise problem(f"parser {spec.kind} gives no fields for the parsed table "
                              "shape: json, msgpack, or a parser with parse(record) -> "
                              "(event ms, fields)", key="parser")
        return self

    @model_validator(mode="before")
    @classmethod
    def _parsers_need_event_time(cls, data: Any) -> Any:
        """Checked before the parsers themselves: a parser without event time is the error."""
        if isinstance(data, dict):
            layout = data.get("layout", "partition")
            kind = layout if isinstance(layout, str) else getattr(layout, "get", dict().get)("kind")
            for key in ("parser", "topic_parsers"):
                if key in data and kind != "event_time":
                    raise problem("applies only to layout kind event_time", key=key)
        return data


class Alerts(Section):
    smtp_conn_id: Text = "kafka_archive_smtp"
    """The Airflow SMTP connection alert mails go through."""
    email_to: Annotated[list[Annotated[str, _matching(r"[^@\s]+@[^@\s]+", "must be an email address")]],
                        BeforeValidator(_listed), Field(min_length=1)] = ["data-oncall@localhost"]
    """Where alert mails go: one address or a list."""
    email_from: Text = "kafka-archive@localhost"
    """The mails' sender."""


class Audit(Section):
    topic: Text = "_kafka_archive_audit"
    """The monitoring topic producers (`AuditedProducer`) publish their per-window counts to."""
    window: Seconds = Field(60, ge=1)
    """The archive's counting window; producers' windows are multiples of it."""
    grace: Seconds = Field(300, ge=0)
    """A window is judged once archived this far past its end."""
    # a judged window this long past its end leaves the checkpoint: longer than Kafka's
    # retention, so no rewind can count its messages again
    retire_after: Seconds = Field(8 * 86400, ge=3600)
    """A judged window this long past its end leaves the checkpoint: longer than Kafka's retention, so no rewind counts its messages again."""
    source_header: Text = "kafka-archive-source"
    """The header naming a message's producer (stamped by `AuditedProducer`)."""
    groups: Annotated[list[str], BeforeValidator(_listed)] = []  # a default names no group
    """The groups whose archive is audited; none by default."""
    schedule: Cron = "*/30 * * * *"
    """When the audit DAG runs (cron)."""


class Spark(Section):
    """Where and how the archive job runs outside Airflow's Spark connection."""
    master: Text | None = None  # local[2], spark://host:7077, yarn, k8s://https://...
    """Where spark-submit runs the jobs outside Airflow (CLI, benchmarks): `local[2]`, `spark://host:7077`, `yarn`, `k8s://https://...`; in Airflow the Spark connection decides, and this must agree with it."""
    deploy_mode: Literal["client", "cluster"] | None = None
    """`client` or `cluster`; set here it wins over the connection's `deploy-mode` extra."""
    # extra Spark properties for every launcher
    conf: dict[Annotated[str, _matching(r"spark\..+", "must be a Spark property (spark.*)")],
               PropertyText] = {}
    """Extra Spark properties (`spark.*`) for every launcher."""


GroupName = Annotated[str, _matching(r"[A-Za-z0-9_-]+",
                                     "a group name may only use letters, digits, _ and -")]


class Document(Section):
    kafka: Kafka = Field({}, validate_default=True)  # absent: name the key inside it
    """The Kafka cluster (Kafka, below)."""
    archive_root: Annotated[str, _matching(r"(file:///|s3://[^/]+).*", "must be s3://bucket/prefix or "
                                            "file:///absolute/path (no other scheme)")]
    """Where archived files go: `s3://bucket/prefix` or `file:///absolute/path`."""
    token_root: Text = "offsets/"
    """Where the offset token files live: a folder (relative: to the config file's folder) or `s3://bucket/prefix`."""
    s3_conn_id: Text = "kafka_archive_s3"
    """The Airflow connection (type `aws`) with the archive's S3 credentials and, for a non-AWS server, `extra.endpoint_url`."""
    generation: Count = 1
    """Part of every file name; raise it on an incompatible output change, so two versions can run side by side."""
    alerts: Alerts = Alerts()
    """Alert mails (Alerts, below)."""
    audit: Audit = Audit()
    """The producers' audit (Audit, below)."""
    groups: Annotated[dict[GroupName, Group], Field(min_length=1)] = {"backup": Group()}
    """The archive groups by name (letters, digits, `_`, `-`): each becomes DAG `kafka_archive_<name>`."""
    spark: Spark = Spark()
    """spark-submit settings (Spark, below)."""
    schema_registry: SchemaRegistry = SchemaRegistry()
    """The Schema Registry the avro, protobuf and json_schema parsers read schemas from."""
    # Iceberg catalogs of table groups, by name: pyiceberg catalog properties, e.g.
    # {type: sql, uri: postgresql+psycopg2://...} or {type: rest, uri: https://...};
    # `local`, when not given, is a SQL catalog on SQLite under the repository
    iceberg_catalogs: dict[Annotated[str, _matching(r"[A-Za-z0-9_-]+", "letters, digits, _ "
                                                    "and - only")], dict[str, PropertyText]] = {}
    """Iceberg catalogs of table groups by name: pyiceberg's catalog properties (`{type: sql, uri: ...}`, `{type: rest, uri: ...}`, or `conn_id`: an Airflow connection's)."""

    @model_validator(mode="after")
    def _table_catalogs_exist(self) -> Document:
        known = set(self.iceberg_catalogs) | {"local"}
        for name, group in self.groups.items():
            if group.table is not None and group.table.catalog not in known:
                raise problem(f"names catalog {group.table.catalog!r}, not under "
                              f"iceberg_catalogs (have: {', '.join(sorted(known))})",
                              key=f"groups.{name}.table.catalog")
        return self

    @model_validator(mode="after")
    def _tables_have_one_group(self) -> Document:
        """Two table groups in one catalog namespace would share a topic's table: each
        would commit the other's offsets out of it (issue 41)."""
        owner: dict[tuple[str, str], str] = {}
        for name, group in self.groups.items():
            if group.table is None:
                continue
            where = (group.table.catalog, group.table.namespace)
            if where in owner:
                raise problem(f"{where[1]!r} in catalog {where[0]!r} is group {owner[where]}'s "
                              "namespace already: two table groups would share their topics' "
                              "tables; give each its own namespace",
                              key=f"groups.{name}.table.namespace")
            owner[where] = name
        return self

    @model_validator(mode="after")
    def _audited_groups_exist(self) -> Document:
        unknown = [g for g in self.audit.groups if g not in self.groups]
        if unknown:
            raise problem(f"names {', '.join(unknown)}, not under groups "
                          f"(have: {', '.join(self.groups)})", key="audit.groups")
        return self


def problems(error: ValidationError) -> list[str]:
    """One line per error: `key.path: message`."""
    return [f"{where}: {message}" for where, message in located(error)]


def located(error: ValidationError) -> list[tuple[str, str]]:
    """(key path, message) per error; the key path starts `groups.<name>` for a group's."""
    found = []
    for e in error.errors():
        loc = [str(p) for p in e["loc"] if p != "[key]"]
        ctx = e.get("ctx") or {}
        if ctx.get("key"):
            loc.append(ctx["key"])
        where = ".".join(loc) or "(top level)"
        if e["type"] == "missing":
            message = "missing required key"
        elif e["type"] == "extra_forbidden":
            message = "unknown key"
        elif e["type"] == "config":
            message = ctx["message"]
        elif e["type"] == "string_pattern_mismatch":
            message = f"{e['input']!r} does not match {ctx['pattern']}"
        else:
            message = f"{e['msg'].replace('Input should be', 'must be')}, got {e['input']!r}"
        found.append((where, message))
    return found
