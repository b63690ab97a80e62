"""The kafka-archive config file: one YAML document, validated on load.

Values may refer to the environment as ${NAME} or ${NAME:-default}, so one file serves
local runs, tests and production. Secrets never live here: S3 credentials come from the
Airflow connection named by `s3_conn_id`, Kafka's from the connection named by
`kafka.conn_id` (kafka_archive.kafka_connection) or from ${ENV} references.
Every error names the file and the key path; the checks live in config_schema.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kafka_archive.formats.parsers import ParserSpec
from kafka_archive.errors import ConfigError
from kafka_archive.layout import LayoutSpec

if TYPE_CHECKING:  # YAML and pydantic where a file is loaded, not where a Config is used
    from kafka_archive import config_schema as schema

# a checkout's example config, the default where KAFKA_ARCHIVE_CONFIG is unset (an
# installed package has none: its users name theirs)
REPO = Path(__file__).resolve().parents[2]
DEFAULT_PATH = REPO / "config" / "kafka-archive.yaml"
_ENV_REF = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}")


@dataclass(frozen=True)
class Policy:
    """When a Kafka partition is worth a file, and how much one run takes: Secor's size-
    and time-based upload policy, applied per topic-partition."""
    max_records: int = 5_000_000  # per partition per run (plan time)
    max_bytes: int = 1 << 30      # per partition per run (the job cuts the slice there)
    min_records: int = 1          # fewer pending than this: wait ...
    max_delay_s: int = 3600       # ... unless the oldest pending message is this old
    freshness_s: int = 7200       # alert when the archive lags Kafka by more (newest messages)


@dataclass(frozen=True)
class FormatSpec:
    """What a group's files hold (kafka_archive.formats): sequencefile | text | baldr."""
    kind: str = "sequencefile"
    key: str = "msgpack"          # msgpack map (lossless, replayable) | offset (Secor legacy)
    compression: str = "default"  # none | default | gzip | fast | snappy; text: none | gzip
    escape_newlines: bool = False  # text: escape newlines (and backslashes), don't refuse them
    level: int = 6                # sequencefile default|gzip: zlib level (1 fastest, 9 smallest)


@dataclass(frozen=True)
class TableSpec:
    """A table group's tables: `<namespace>.<topic>` in the Iceberg catalog named here."""
    catalog: str = "local"
    namespace: str = "kafka_archive"
    keep_snapshots_s: int = 7 * 86400  # older snapshots expire, the files only they read go
    # event_time groups (the parsed shape): declared (field, type) columns, before any
    # a message brings (formats.columns)
    columns: tuple[tuple[str, str], ...] = ()
    compact_after_s: int | None = 3600  # commit.compaction; None: never compacted
    target_file_size: int = 256 << 20


@dataclass(frozen=True)
class Group:
    name: str
    schedule: str | None
    include: tuple[str, ...]
    exclude: tuple[str, ...]
    start_from: str               # earliest | latest: where a partition without token starts
    on_retention_gap: str         # fail | skip: token below the earliest retained offset
    format: FormatSpec
    policy: Policy
    topic_policies: tuple[tuple[str, Policy], ...]  # (topic regex, policy); first match wins
    deadline_s: int = 1800        # alert when a run has not finished this long after queued
    layout: LayoutSpec = LayoutSpec()  # partition=<n> (default), or event_time partitions
    parser: ParserSpec = ParserSpec()  # event_time layout: a message's event time
    topic_parsers: tuple[tuple[str, ParserSpec], ...] = ()  # (topic regex, parser); first wins
    topic_formats: tuple[tuple[str, FormatSpec], ...] = ()  # (topic regex, format); first wins
    lateness_s: int = 3600        # event_time: a time partition is final this long after its end
    table: TableSpec | None = None  # an Iceberg table per topic (commit.iceberg)
    spark_connect: str | None = None  # a spark_connect connection id: jobs run over Connect

    @property
    def parsed_table(self) -> bool:
        """An event-time table group: its tables have the parsed shape (commit.iceberg)."""
        return self.table is not None and self.layout.kind == "event_time"

    def selects(self, topic: str) -> bool:
        return (any(re.fullmatch(p, topic) for p in self.include)
                and not any(re.fullmatch(p, topic) for p in self.exclude))

    def policy_for(self, topic: str) -> Policy:
        return next((p for rx, p in self.topic_policies if re.fullmatch(rx, topic)), self.policy)

    def format_for(self, topic: str) -> FormatSpec:
        return next((f for rx, f in self.topic_formats if re.fullmatch(rx, topic)), self.format)

    def parser_for(self, topic: str) -> ParserSpec:
        return next((p for rx, p in self.topic_parsers if re.fullmatch(rx, topic)), self.parser)


@dataclass(frozen=True)
class Alerts:
    """Where alert emails go: through the Airflow SMTP connection named here."""
    smtp_conn_id: str = "kafka_archive_smtp"
    email_to: tuple[str, ...] = ("data-oncall@localhost",)
    email_from: str = "kafka-archive@localhost"


@dataclass(frozen=True)
class Audit:
    """The Kafka paper's audit: producers publish per-window counts to `topic`; the
    archive job counts what it archived per (topic, source, window) of `window_s`."""
    topic: str = "_kafka_archive_audit"
    window_s: int = 60            # archive-side counting window; producers' must be a multiple
    grace_s: int = 300            # a window is judged only once archived this far past its end
    retire_s: int = 8 * 86400     # a judged window this long past its end leaves the checkpoint
    source_header: str = "kafka-archive-source"
    groups: tuple[str, ...] = ()
    schedule: str | None = "*/30 * * * *"


@dataclass(frozen=True)
class SparkSettings:
    """The optional `spark:` section: where and how the archive job runs. In Airflow the
    master comes from the Spark connection (`kafka_archive_spark`); set here it serves the
    launchers outside Airflow (benchmark, tests) and must agree with the connection. A
    deploy mode set here wins over the connection's `deploy-mode` extra."""
    master: str | None = None       # local[2], spark://host:7077, yarn, k8s://https://...
    deploy_mode: str | None = None  # client | cluster
    conf: tuple[tuple[str, str], ...] = ()  # extra Spark properties, every launcher


@dataclass(frozen=True)
class Config:
    path: Path
    bootstrap_servers: str
    # extra Kafka client properties (security), Java names: a SASL password from a
    # connection among them, so never in a repr (a log line, an error, a task's XCom)
    kafka_properties: dict[str, str] = field(repr=False)
    archive_root: str                 # file:///abs/path or s3://bucket/prefix
    token_root: str
    s3_conn_id: str
    generation: int
    groups: dict[str, Group]
    alerts: Alerts = Alerts()
    audit: Audit = Audit()
    spark: SparkSettings = SparkSettings()
    # Iceberg catalogs by name: pyiceberg properties, without the FileIO's credentials
    # (a uri may hold a password from ${ENV}: never in a repr)
    iceberg_catalogs: dict[str, dict[str, str]] = field(default_factory=dict, repr=False)
    kafka_conn_id: str | None = None  # Kafka's settings from this Airflow connection
    # the registry parsers' client settings (url, auth: a secret from ${ENV}, never in a repr)
    schema_registry: dict[str, str] = field(default_factory=dict, repr=False)
    schema_registry_conn_id: str | None = None  # its settings from this Airflow connection
    # groups left out for a problem of their own (load's groups_apart): name -> the error
    broken_groups: dict[str, str] = field(default_factory=dict)

    def group(self, name: str) -> Group:
        try:
            return self.groups[name]
        except KeyError:
            if name in self.broken_groups:
                raise ConfigError(self.broken_groups[name]) from None
            raise ConfigError(f"{self.path}: no group '{name}' under 'groups' "
                              f"(have: {', '.join(self.groups)})") from None


def load(path: str | Path | None = None, *, groups_apart: bool = False) -> Config:
    """The config file, checked whole: every problem is a line naming the file and key.
    groups_apart: a group with a problem of its own is left out of `groups` and its error
    kept in `broken_groups` (DAGs, tasks and pages of the other groups go on); a problem
    outside the groups still fails the whole file."""
    # the Spark job's tasks receive a loaded Config: they need neither YAML nor pydantic
    import yaml
    from pydantic import ValidationError

    from kafka_archive import config_schema as schema

    path = Path(path or os.environ.get("KAFKA_ARCHIVE_CONFIG") or DEFAULT_PATH)
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found (set KAFKA_ARCHIVE_CONFIG)") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    raw = _expand(raw if raw is not None else {}, path, ())
    broken: dict[str, str] = {}
    while True:
        try:
            doc = schema.Document.model_validate(raw)
            break
        except ValidationError as exc:
            found = schema.located(exc)
            errors = [f"{path}: {where}: {message}" for where, message in found]
            culprits = {where.split(".")[1] for where, _ in found if where.startswith("groups.")}
            if not groups_apart or any(not where.startswith("groups.") for where, _ in found):
                raise ConfigError("\n".join(errors)) from None
            for name in culprits:  # this group's lines only
                broken[name] = "\n".join(e for e, (where, _) in zip(errors, found)
                                         if where.split(".")[1:2] == [name])
            raw = _without_groups(raw, culprits)
            if not raw["groups"]:  # no group left to go on with
                raise ConfigError("\n".join(broken.values()))
    return _config(path, doc, broken)


def _without_groups(raw: dict, names: set[str]) -> dict:
    """The raw document less the named groups, and the audit's mention of them."""
    audit = raw.get("audit")
    if isinstance(audit, dict) and isinstance(audit.get("groups"), list):
        audit = {**audit, "groups": [g for g in audit["groups"] if g not in names]}
        raw = {**raw, "audit": audit}
    return {**raw, "groups": {k: v for k, v in raw["groups"].items() if k not in names}}


def _config(path: Path, doc: schema.Document, broken: dict[str, str]) -> Config:
    return Config(
        path=path,
        broken_groups=broken,
        bootstrap_servers=doc.kafka.bootstrap_servers or "",
        kafka_conn_id=doc.kafka.conn_id,
        kafka_properties=dict(doc.kafka.properties),
        archive_root=doc.archive_root.rstrip("/"),
        token_root=_relative_to(path, doc.token_root),
        s3_conn_id=doc.s3_conn_id,
        generation=doc.generation,
        groups={name: _group(name, group) for name, group in doc.groups.items()},
        alerts=Alerts(doc.alerts.smtp_conn_id, tuple(doc.alerts.email_to), doc.alerts.email_from),
        audit=Audit(topic=doc.audit.topic, window_s=doc.audit.window, grace_s=doc.audit.grace,
                    retire_s=doc.audit.retire_after,
                    source_header=doc.audit.source_header, groups=tuple(doc.audit.groups),
                    schedule=doc.audit.schedule),
        spark=SparkSettings(master=doc.spark.master, deploy_mode=doc.spark.deploy_mode,
                            conf=tuple(sorted(doc.spark.conf.items()))),
        iceberg_catalogs=_iceberg_catalogs(path, doc.iceberg_catalogs),
        schema_registry=({"url": doc.schema_registry.url} if doc.schema_registry.url else {})
        | dict(doc.schema_registry.properties),
        schema_registry_conn_id=doc.schema_registry.conn_id,
    )


# the `local` catalog's database when the config names none, beside the config file
LOCAL_CATALOG_DB = "iceberg/catalog.db"


def _iceberg_catalogs(path: Path, given: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """The configured catalogs; `local` defaults to an embedded SQL catalog on SQLite
    (Spark reads the same database as Iceberg's JdbcCatalog). A relative SQLite path is
    relative to the config file's folder, like token_root."""
    catalogs = {"local": {"type": "sql", "uri": f"sqlite:///{LOCAL_CATALOG_DB}"}} | {
        name: dict(props) for name, props in given.items()}
    for props in catalogs.values():
        uri = props.get("uri", "")
        if uri.startswith("sqlite:///"):
            props["uri"] = f"sqlite:///{_relative_to(path, uri[len('sqlite:///'):])}"
    return catalogs


def _relative_to(path: Path, value: str) -> str:
    """A local path of the config (token_root, a SQLite catalog) relative to the config
    file's folder, wherever the task runs; absolute paths and s3:// URLs as they are."""
    if value.startswith("s3://") or Path(value).is_absolute():
        return value
    return os.path.normpath(path.resolve().parent / value)


def _group(name: str, doc: schema.Group) -> Group:
    base = _policy(doc.policy, Policy())
    return Group(
        name=name,
        schedule=doc.schedule,
        include=tuple(doc.topics.include),
        exclude=tuple(doc.topics.exclude),
        start_from=doc.start_from,
        on_retention_gap=doc.on_retention_gap,
        format=_format(doc.format),
        topic_formats=tuple((rx, _format(f)) for rx, f in doc.topic_formats.items()),
        policy=base,
        topic_policies=tuple((rx, _policy(p, base)) for rx, p in doc.topic_policies.items()),
        deadline_s=doc.deadline,
        layout=doc.layout.spec(),
        parser=doc.parser,
        topic_parsers=tuple(doc.topic_parsers.items()),
        lateness_s=doc.lateness,
        table=(TableSpec(doc.table.catalog, doc.table.namespace, doc.table.keep_snapshots,
                         tuple(doc.table.columns.items()), doc.table.compact_after,
                         doc.table.target_file_size) if doc.table else None),
        spark_connect=doc.spark_connect,
    )


def _format(doc: schema.Format) -> FormatSpec:
    default_compression = {"sequencefile": "default", "text": "none", "baldr": "gzip"}
    return FormatSpec(doc.kind, key=doc.key or FormatSpec.key,
                      compression=doc.compression or default_compression.get(doc.kind, "none"),
                      escape_newlines=bool(doc.escape_newlines),
                      level=doc.level or FormatSpec.level)


def _policy(doc: schema.Policy, base: Policy) -> Policy:
    given = {"max_records": doc.max_records, "max_bytes": doc.max_bytes,
             "min_records": doc.min_records, "max_delay_s": doc.max_delay,
             "freshness_s": doc.freshness}
    return replace(base, **{k: v for k, v in given.items() if v is not None})


def _expand(node: Any, path: Path, keys: tuple[str, ...]) -> Any:
    """${NAME} and ${NAME:-default} from the environment; an unset one names its key."""
    if isinstance(node, dict):
        return {k: _expand(v, path, (*keys, str(k))) for k, v in node.items()}
    if isinstance(node, list):
        return [_expand(v, path, (*keys, str(i))) for i, v in enumerate(node)]
    if isinstance(node, str):
        def substitute(m: re.Match) -> str:
            value = os.environ.get(m["name"], m["default"])
            if value is None:
                raise ConfigError(f"{path}: {'.'.join(keys) or '(top level)'}: "
                                  f"${{{m['name']}}} is not set and has no default")
            return value
        return _ENV_REF.sub(substitute, node)
    return node
