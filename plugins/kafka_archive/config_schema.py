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
    model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=False)

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
    conn_id: Text | None = None
    properties: dict[str, PropertyText] = {}  # extra client properties (Java names)

    @model_validator(mode="after")
    def _one_source(self) -> Kafka:
        if self.bootstrap_servers is None and self.conn_id is None:
            raise problem("missing required key (or conn_id: an Airflow connection of type "
                          "kafka whose extra holds bootstrap.servers)", key="bootstrap_servers")
        if self.bootstrap_servers is not None and self.conn_id is not None:
            raise problem("give bootstrap_servers or conn_id (whose connection holds them), "
                          "not both", key="bootstrap_servers")
        return self


class Policy(Section):
    """Unset keys come from the group's policy (or the defaults)."""
    max_records: Count | None = None
    max_bytes: Count | None = None
    min_records: Count | None = None
    max_delay: Seconds | None = Field(None, ge=0)
    freshness: Seconds | None = Field(None, ge=1)


class Format(Section):
    kind: str = "sequencefile"
    key: Literal["msgpack", "offset"] | None = None
    compression: str | None = None
    escape_newlines: bool | None = None
    level: Annotated[int, BeforeValidator(_integer), Field(ge=1, le=9)] | None = None  # zlib

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
    granularity: str | None = None
    prefixes: dict[Level, str] = {}
    formats: dict[Level, str] = {}

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
    exclude: Regexes = ["_.*"]  # Kafka's own and our monitoring topics


class Table(Section):
    """An Iceberg table per topic, `<namespace>.<topic>` in the named catalog (issue 32)."""
    catalog: Text = "local"
    namespace: Annotated[str, _matching(r"[A-Za-z0-9_]+", "may only use letters, digits "
                                                           "and _")] = "kafka_archive"
    # older snapshots expire (time travel ends there), and the files only they read go
    keep_snapshots: Seconds = Field(7 * 86400, ge=0)
    # compaction (commit.compaction): files of runs planned longer ago than this are
    # rewritten into files of about target_file_size bytes; null: never compacted
    compact_after: Seconds | None = Field(3600, ge=0)
    target_file_size: Count = 256 << 20
    # an event_time group's parsed shape: {field: type}; other fields get a column of
    # their own type as messages bring them (formats.columns)
    columns: dict[Text, str] = {}

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
    topics: Topics = Topics()
    start_from: Literal["earliest", "latest"] = "earliest"
    on_retention_gap: Literal["fail", "skip"] = "fail"
    format: Format = Format()
    topic_formats: dict[Regex, Format] = {}
    policy: Policy = Policy()
    topic_policies: dict[Regex, Policy] = {}
    deadline: Seconds = Field(1800, ge=1)
    layout: Annotated[Layout, BeforeValidator(
        lambda v: {"kind": v} if isinstance(v, str) else v)] = Layout()
    parser: Parser = Field("timestamp", validate_default=True)
    topic_parsers: dict[Regex, Parser] = {}
    lateness: Seconds = Field(3600, ge=0)
    table: Table | None = None
    # the group's jobs as a Spark Connect client of this connection (sc://host:port, token,
    # TLS: the Spark provider's spark_connect type); none: spark-submit
    spark_connect: Text | None = None

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
    email_to: Annotated[list[Annotated[str, _matching(r"[^@\s]+@[^@\s]+", "must be an email address")]],
                        BeforeValidator(_listed), Field(min_length=1)] = ["data-oncall@localhost"]
    email_from: Text = "kafka-archive@localhost"


class Audit(Section):
    topic: Text = "_kafka_archive_audit"
    window: Seconds = Field(60, ge=1)
    grace: Seconds = Field(300, ge=0)
    # a judged window this long past its end leaves the checkpoint: longer than Kafka's
    # retention, so no rewind can count its messages again
    retire_after: Seconds = Field(8 * 86400, ge=3600)
    source_header: Text = "kafka-archive-source"
    groups: Annotated[list[str], BeforeValidator(_listed)] = []  # a default names no group
    schedule: Cron = "*/30 * * * *"


class Spark(Section):
    """Where and how the archive job runs outside Airflow's Spark connection."""
    master: Text | None = None  # local[2], spark://host:7077, yarn, k8s://https://...
    deploy_mode: Literal["client", "cluster"] | None = None
    # extra Spark properties for every launcher
    conf: dict[Annotated[str, _matching(r"spark\..+", "must be a Spark property (spark.*)")],
               PropertyText] = {}


GroupName = Annotated[str, _matching(r"[A-Za-z0-9_-]+",
                                     "a group name may only use letters, digits, _ and -")]


class Document(Section):
    kafka: Kafka = Field({}, validate_default=True)  # absent: name the key inside it
    archive_root: Annotated[str, _matching(r"(file:///|s3://[^/]+).*", "must be s3://bucket/prefix or "
                                            "file:///absolute/path (no other scheme)")]
    token_root: Text = "offsets/"
    s3_conn_id: Text = "kafka_archive_s3"
    generation: Count = 1
    alerts: Alerts = Alerts()
    audit: Audit = Audit()
    groups: Annotated[dict[GroupName, Group], Field(min_length=1)] = {"backup": Group()}
    spark: Spark = Spark()
    # Iceberg catalogs of table groups, by name: pyiceberg catalog properties, e.g.
    # {type: sql, uri: postgresql+psycopg2://...} or {type: rest, uri: https://...};
    # `local`, when not given, is a SQL catalog on SQLite under the repository
    iceberg_catalogs: dict[Annotated[str, _matching(r"[A-Za-z0-9_-]+", "letters, digits, _ "
                                                    "and - only")], dict[str, PropertyText]] = {}

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
