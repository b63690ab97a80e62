"""The kafka-archive config file: one YAML document, validated on load.

Values may refer to the environment as ${NAME} or ${NAME:-default}, so one file serves
local runs, tests and production. Secrets never live here: S3 credentials come from the
Airflow connection named by `s3_conn_id`, Kafka passwords from ${ENV} references.
Every error names the file and the key.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kafka_archive import formats
from kafka_archive.archive import parsers
from kafka_archive.archive.parsers import ParserSpec
from kafka_archive.errors import ConfigError
from kafka_archive.layout import LayoutSpec

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
    compression: str = "default"  # none | default (DefaultCodec) | gzip; text: none | gzip
    escape_newlines: bool = False  # text: escape newlines (and backslashes), don't refuse them


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
    source_header: str = "kafka-archive-source"
    groups: tuple[str, ...] = ("backup",)
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
    kafka_properties: dict[str, str]  # extra Kafka client properties (security), Java names
    archive_root: str                 # file:///abs/path or s3://bucket/prefix
    token_root: str
    s3_conn_id: str
    generation: int
    groups: dict[str, Group]
    alerts: Alerts = Alerts()
    audit: Audit = Audit()
    spark: SparkSettings = SparkSettings()

    def group(self, name: str) -> Group:
        try:
            return self.groups[name]
        except KeyError:
            raise ConfigError(f"{self.path}: no group '{name}' under 'groups' "
                              f"(have: {', '.join(self.groups)})") from None


def load(path: str | Path | None = None) -> Config:
    path = Path(path or os.environ.get("KAFKA_ARCHIVE_CONFIG") or DEFAULT_PATH)
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found (set KAFKA_ARCHIVE_CONFIG)") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    doc = _Doc(path, _expand(raw, path))
    groups = doc.mapping("groups", default={"backup": {}})
    if not groups.data:
        raise ConfigError(f"{path}: 'groups' must name at least one group")
    return Config(
        path=path,
        bootstrap_servers=doc.str("kafka.bootstrap_servers"),
        kafka_properties={str(k): str(v) for k, v in doc.mapping("kafka.properties").data.items()},
        archive_root=doc.str("archive_root", pattern=r"(file:///|s3://[^/]+).*").rstrip("/"),
        token_root=_token_root(doc.str("token_root", default="offsets/")),
        s3_conn_id=doc.str("s3_conn_id", default="kafka_archive_s3"),
        generation=doc.int("generation", default=1, minimum=1),
        groups={name: _group(groups.mapping(name), name) for name in groups.data},
        alerts=_alerts(doc.mapping("alerts")),
        audit=_audit(doc.mapping("audit"), set(groups.data)),
        spark=_spark(doc.mapping("spark")),
    )


def _spark(doc: _Doc) -> SparkSettings:
    _no_other_keys(_Doc(doc.path, {"spark": doc.data}), "spark", {"master", "deploy_mode", "conf"},
                   "the spark section")
    conf = doc.mapping("conf").data
    if not all(isinstance(k, str) and k.startswith("spark.") for k in conf):
        raise ConfigError(f"{doc.path}: 'spark.conf' keys must be Spark properties (spark.*), "
                          f"got {', '.join(map(repr, conf))}")
    return SparkSettings(
        master=doc.str("master") if "master" in doc.data else None,
        deploy_mode=doc.choice("deploy_mode", ("client", "cluster"), None)
        if "deploy_mode" in doc.data else None,
        conf=tuple(sorted((k, str(v).lower() if isinstance(v, bool) else str(v))
                          for k, v in conf.items())))


def _alerts(doc: _Doc) -> Alerts:
    default = Alerts()
    to = doc.get("email_to", list(default.email_to))
    to = [to] if isinstance(to, str) else to
    if not isinstance(to, list) or not to or not all(isinstance(a, str) and "@" in a for a in to):
        raise ConfigError(f"{doc.path}: 'alerts.email_to' must be an email address or a list "
                          f"of them, got {to!r}")
    return Alerts(smtp_conn_id=doc.str("smtp_conn_id", default.smtp_conn_id),
                  email_to=tuple(to), email_from=doc.str("email_from", default.email_from))


def _audit(doc: _Doc, group_names: set[str]) -> Audit:
    default = Audit()
    groups = doc.get("groups", list(default.groups))
    groups = [groups] if isinstance(groups, str) else groups
    unknown = [g for g in groups if g not in group_names]
    if unknown:
        raise ConfigError(f"{doc.path}: 'audit.groups' names {', '.join(map(str, unknown))}, "
                          f"not under 'groups' (have: {', '.join(sorted(group_names))})")
    audit = Audit(topic=doc.str("topic", default.topic),
                  window_s=doc.duration("window", default.window_s),
                  grace_s=doc.duration("grace", default.grace_s),
                  source_header=doc.str("source_header", default.source_header),
                  groups=tuple(groups), schedule=doc.get("schedule", default.schedule))
    if audit.window_s < 1:
        raise ConfigError(f"{doc.path}: 'audit.window' must be at least 1s")
    return audit


def _token_root(value: str) -> str:
    """A relative token_root is relative to the repository, wherever the task runs."""
    if value.startswith("s3://") or Path(value).is_absolute():
        return value
    return str(REPO / value)


def _group(doc: _Doc, name: str) -> Group:
    if not re.fullmatch(r"[A-Za-z0-9_-]+", str(name)):
        raise ConfigError(f"{doc.path}: group name {name!r} may only use letters, digits, _ and -")
    base = _policy(doc.mapping("policy"), Policy())
    overrides = doc.mapping("topic_policies")
    return Group(
        name=name,
        schedule=doc.get("schedule", None),
        include=doc.regexes("topics.include", [".*"]),
        exclude=doc.regexes("topics.exclude", ["_.*"]),  # Kafka's own and our monitoring topics
        start_from=doc.choice("start_from", ("earliest", "latest"), "earliest"),
        on_retention_gap=doc.choice("on_retention_gap", ("fail", "skip"), "fail"),
        format=_format(doc),
        topic_formats=_topic_formats(doc),
        policy=base,
        topic_policies=tuple((overrides.regex(rx), _policy(overrides.mapping(rx), base))
                             for rx in overrides.data),
        deadline_s=doc.duration("deadline", 1800, minimum=1),
        **_event_time(doc),
    )


def _format(doc: _Doc) -> FormatSpec:
    kind = doc.choice("format.kind", tuple(formats.FORMATS), "sequencefile")
    if kind == "sequencefile":
        return FormatSpec(kind, key=doc.choice("format.key", ("msgpack", "offset"), "msgpack"),
                          compression=doc.choice("format.compression",
                                                 ("none", "default", "gzip"), "default"))
    allowed = {"text": {"kind", "compression", "escape_newlines"}, "baldr": {"kind"}}[kind]
    _no_other_keys(doc, "format", allowed, f"format kind {kind}")
    if kind == "baldr":
        return FormatSpec(kind, compression="gzip")  # Baldr files are always gzip
    escape = doc.get("format.escape_newlines", False)
    escape = {"true": True, "false": False}.get(str(escape).lower(), escape)  # from ${ENV}
    if not isinstance(escape, bool):
        raise ConfigError(f"{doc.path}: '{doc._name('format.escape_newlines')}' must be true "
                          f"or false, got {escape!r}")
    return FormatSpec(kind, compression=doc.choice("format.compression", ("none", "gzip"), "none"),
                      escape_newlines=escape)


def _topic_formats(doc: _Doc) -> tuple[tuple[str, FormatSpec], ...]:
    """`topic_formats: {regex: {kind: ..., ...}}`: a format for some topics of the group."""
    overrides = doc.mapping("topic_formats")
    return tuple((overrides.regex(rx), _format(_Doc(doc.path, {"format": overrides.mapping(rx).data},
                                                    overrides._name(rx))))
                 for rx in overrides.data)


def _event_time(doc: _Doc) -> dict[str, Any]:
    """The partitioned group's settings: layout, parsers, lateness."""
    value = doc.get("layout", "partition")
    value = {"kind": value} if isinstance(value, str) else value
    if not isinstance(value, dict):
        raise ConfigError(f"{doc.path}: '{doc._name('layout')}' must be partition, event_time "
                          f"or a mapping with kind, got {value!r}")
    _no_other_keys(doc, "layout", {"kind"} if value.get("kind", "partition") == "partition"
                   else {"kind", "granularity", "prefixes", "formats"}, "this layout kind")
    default = LayoutSpec()
    try:
        layout = LayoutSpec(kind=value.get("kind", default.kind),
                            granularity=value.get("granularity", default.granularity),
                            prefixes=_per_level(doc, "layout.prefixes", default.prefixes),
                            formats=_per_level(doc, "layout.formats", default.formats))
    except ValueError as exc:
        raise ConfigError(f"{doc.path}: '{doc._name('layout')}': {exc}") from None
    overrides = doc.mapping("topic_parsers")
    if layout.kind != "event_time" and ("parser" in doc.data or overrides.data):
        raise ConfigError(f"{doc.path}: '{doc._name('parser')}' and 'topic_parsers' apply only "
                          "to layout kind event_time")
    return {"layout": layout,
            "parser": _parser(doc, "parser", doc.get("parser", "timestamp")),
            "topic_parsers": tuple((overrides.regex(rx), _parser(overrides, rx, spec))
                                   for rx, spec in overrides.data.items()),
            "lateness_s": doc.duration("lateness", 3600)}


def _per_level(doc: _Doc, key: str, defaults: tuple[str, str, str]) -> tuple[str, str, str]:
    given = doc.get(key, None) or {}
    levels = ("day", "hour", "minute")
    if (not isinstance(given, dict) or set(given) - set(levels)
            or not all(isinstance(v, str) for v in given.values())):
        raise ConfigError(f"{doc.path}: '{doc._name(key)}' must map day, hour and/or minute to "
                          f"text, got {given!r}")
    return tuple(given.get(level, d) for level, d in zip(levels, defaults))


def _parser(doc: _Doc, key: str, value: Any) -> ParserSpec:
    """`json`, `mypkg.module:Class`, or {kind: json, field: ts, unit: ms}: other keys are
    the parser's options."""
    where = f"{doc.path}: '{doc._name(key)}'"
    options = dict(value) if isinstance(value, dict) else {"kind": value}
    kind = options.pop("kind", None)
    if not isinstance(kind, str):
        raise ConfigError(f"{where} must be a parser name or dotted class path, or a mapping "
                          f"with 'kind' and the parser's options, got {value!r}")
    try:
        return parsers.load_checked(kind, options)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _no_other_keys(doc: _Doc, key: str, allowed: set[str], what: str) -> None:
    value = doc.get(key, None)
    unknown = sorted(set(value) - allowed) if isinstance(value, dict) else []
    if unknown:
        raise ConfigError(f"{doc.path}: '{doc._name(key)}' has {', '.join(map(str, unknown))}, "
                          f"which {what} does not take (it takes {', '.join(sorted(allowed))})")


def _policy(doc: _Doc, base: Policy) -> Policy:
    return Policy(
        max_records=doc.int("max_records", base.max_records, minimum=1),
        max_bytes=doc.int("max_bytes", base.max_bytes, minimum=1),
        min_records=doc.int("min_records", base.min_records, minimum=1),
        max_delay_s=doc.duration("max_delay", base.max_delay_s),
        freshness_s=doc.duration("freshness", base.freshness_s, minimum=1),
    )


class _Doc:
    """Typed access to one mapping of the parsed YAML; errors name file and full key."""

    def __init__(self, path: Path, data: Any, prefix: str = ""):
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: '{prefix or '(top level)'}' must be a mapping")
        self.path, self.data, self.prefix = path, data, prefix

    def _name(self, key: str) -> str:
        return f"{self.prefix}.{key}" if self.prefix else key

    def get(self, key: str, default: Any = ...) -> Any:
        node: Any = self.data
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                if default is ...:
                    raise ConfigError(f"{self.path}: missing required key '{self._name(key)}'")
                return default
            node = node[part]
        return node

    def mapping(self, key: str, default: dict | None = None) -> _Doc:
        # a key present as is wins over a dotted path: topic regexes contain dots
        value = self.data[key] if key in self.data else self.get(key, None)
        if value is None:
            value = default or {}
        return _Doc(self.path, value, self._name(key))

    def str(self, key: str, default: Any = ..., pattern: str | None = None) -> str:
        value = self.get(key, default)
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{self.path}: '{self._name(key)}' must be a non-empty string, "
                              f"got {value!r}")
        if pattern and not re.fullmatch(pattern, value):
            raise ConfigError(f"{self.path}: '{self._name(key)}' = {value!r} does not match {pattern}")
        return value

    def int(self, key: str, default: int, minimum: int = 0) -> int:
        value = self.get(key, default)
        if isinstance(value, str) and value.strip().isdigit():  # from ${ENV} expansion
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise ConfigError(f"{self.path}: '{self._name(key)}' must be an integer >= {minimum}, "
                              f"got {value!r}")
        return value

    def choice(self, key: str, choices: tuple[str, ...], default: str) -> str:
        value = self.get(key, default)
        if value not in choices:
            raise ConfigError(f"{self.path}: '{self._name(key)}' must be one of "
                              f"{', '.join(choices)}, got {value!r}")
        return value

    def duration(self, key: str, default_s: int, minimum: int = 0) -> int:
        """Seconds, given as a number of seconds or as '90s', '15m', '2h', '1d'."""
        value = self.get(key, default_s)
        m = re.fullmatch(r"(\d+)\s*([smhd]?)", str(value).strip())
        if not m or isinstance(value, bool):
            raise ConfigError(f"{self.path}: '{self._name(key)}' must be a duration like 300, "
                              f"'15m' or '2h', got {value!r}")
        seconds = int(m[1]) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m[2]]
        if seconds < minimum:
            raise ConfigError(f"{self.path}: '{self._name(key)}' must be at least {minimum}s, "
                              f"got {value!r}")
        return seconds

    def regex(self, pattern: str, key: str | None = None) -> str:
        try:
            re.compile(pattern)
        except (re.error, TypeError) as exc:
            raise ConfigError(f"{self.path}: '{self._name(key or str(pattern))}': bad regex "
                              f"{pattern!r}: {exc}") from None
        return pattern

    def regexes(self, key: str, default: list[str]) -> tuple[str, ...]:
        value = self.get(key, default)
        value = [value] if isinstance(value, str) else value
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{self.path}: '{self._name(key)}' must be a regex or a list of regexes")
        return tuple(self.regex(v, key) for v in value)


def _expand(node: Any, path: Path) -> Any:
    if isinstance(node, dict):
        return {k: _expand(v, path) for k, v in node.items()}
    if isinstance(node, list):
        return [_expand(v, path) for v in node]
    if isinstance(node, str):
        def substitute(m: re.Match) -> str:
            value = os.environ.get(m["name"], m["default"])
            if value is None:
                raise ConfigError(f"{path}: ${{{m['name']}}} is not set and has no default")
            return value
        return _ENV_REF.sub(substitute, node)
    return node
