"""Event time of a message, for the partitioned group (Secor's MessageParser).

A parser has one method, `event_time_ms(record) -> int` (ms since the epoch, UTC), and
raises ParseError when it cannot read the message; such a message is quarantined, never
dropped. Built in, by name:

- `timestamp`: the Kafka record timestamp.
- `json`: a field of the JSON object in the value, by nested path ("meta.event_time", or a
  list of keys when a key holds a dot), `unit` s | ms | us | ns | iso8601 | auto.
- `msgpack`: the same, for a value that is a MessagePack map (a msgpack Timestamp is
  read in any unit).
- `avro`, `protobuf`, `json_schema`: the same, for a value in the Confluent wire format,
  decoded by its registered schema (the config's `schema_registry`; formats.registry):
  Avro's `timestamp-millis`/`-micros`, Protobuf's `google.protobuf.Timestamp` and
  date-time text are read as times. Option `subject_name_strategy`: topic (default),
  record or topic_record.

Units: numbers (and numeric strings) count from the epoch in that unit; finer units are
floored to the ms, fractions too (after rounding to the microsecond, against float noise).
`iso8601` text without an offset is UTC. `auto` reads text as ISO 8601 unless numeric, and
a number by its magnitude: below 1e11 seconds, below 1e14 ms, below 1e17 us, else ns
(so ms before March 1973 read as seconds: give the unit when such times matter).

A custom parser is named by dotted path, "mypkg.module:ClassName" or
"mypkg.module.ClassName": a subclass of Parser, constructed with the spec's options as
keyword arguments. It is imported and type-checked when the config loads, so it must be
importable wherever the config is (Airflow and the Spark job).

Per message, call `event_time_ms(parser, topic, record)`: it names topic and offset in
every ParseError, and refuses a result that is not an int in years 1..9999.
"""

from __future__ import annotations

import importlib
import json
import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import msgpack

from kafka_archive.errors import ArchiveError, ConfigError
from kafka_archive.formats.records import Record

UNITS = ("auto", "s", "ms", "us", "ns", "iso8601")
_PER_MS = {"s": 1000, "ms": 1, "us": 1e-3, "ns": 1e-6}  # floats only; ints are exact below
_DOTTED = re.compile(r"[A-Za-z_][\w.]*[:.][A-Za-z_]\w*")
_NO_TIMESTAMP = -1  # what Kafka stores for a record without timestamp
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MS = timedelta(milliseconds=1)
# an event time must be one a datetime holds (years 1..9999): its time partition is named by it
MIN_EVENT_MS = (datetime(1, 1, 1, tzinfo=timezone.utc) - _EPOCH) // _MS
MAX_EVENT_MS = (datetime.max.replace(tzinfo=timezone.utc) - _EPOCH) // _MS + 1  # exclusive


class ParseError(ArchiveError):
    """A message whose event time cannot be read; the reason is kept with it in quarantine."""

    def __init__(self, reason: str, topic: str | None = None, offset: int | None = None):
        super().__init__(reason, topic, offset)
        self.reason, self.topic, self.offset = reason, topic, offset

    def __str__(self) -> str:
        if self.topic is None:
            return self.reason
        return f"topic {self.topic} offset {self.offset}: {self.reason}"


@dataclass(frozen=True)
class ParserSpec:
    """A parser as config names it: a built-in name or dotted class path, and options."""
    kind: str = "timestamp"
    options: tuple[tuple[str, Any], ...] = ()


class Parser:
    """Extension point: subclasses implement event_time_ms, taking options in __init__."""

    def event_time_ms(self, record: Record) -> int:
        raise NotImplementedError


class TimestampParser(Parser):
    def event_time_ms(self, record: Record) -> int:
        if record.timestamp_ms is None or record.timestamp_ms == _NO_TIMESTAMP:
            raise ParseError("the message has no timestamp")
        return record.timestamp_ms


class _FieldParser(Parser):
    """A field of the decoded value, by nested path, converted from `unit`."""
    what = ""

    def __init__(self, field: str | list[str] | tuple[str, ...], unit: str = "auto"):
        path = tuple(field.split(".")) if isinstance(field, str) else tuple(field)
        if not path or not all(isinstance(k, str) and k for k in path):
            raise ValueError(f"field must be a dotted path or a list of keys, got {field!r}")
        if unit not in UNITS:
            raise ValueError(f"unit must be one of {', '.join(UNITS)}, got {unit!r}")
        self.field, self.path, self.unit = ".".join(path), path, unit

    def decode(self, value: bytes) -> Any:
        raise NotImplementedError

    def event_time_ms(self, record: Record) -> int:
        return self.parse(record)[0]

    def parse(self, record: Record) -> tuple[int, dict]:
        """The event time and the decoded object (the parsed table shape's fields)."""
        if record.value is None:
            raise ParseError("the message is a tombstone (null value)")
        try:
            decoded = node = self.decode(record.value)
        except (ValueError, TypeError, RecursionError, msgpack.UnpackException) as exc:
            raise ParseError(f"the value is not {self.what}: {exc}") from None
        for key in self.path:
            if not isinstance(node, dict) or key not in node:
                raise ParseError(f"the value has no field {self.field!r}")
            node = node[key]
        return to_ms(node, self.unit, self.field), decoded


class JsonParser(_FieldParser):
    what = "a JSON object"

    def decode(self, value: bytes) -> Any:
        return json.loads(value)


class MsgpackParser(_FieldParser):
    what = "a MessagePack map"

    def decode(self, value: bytes) -> Any:
        return msgpack.unpackb(value, raw=False, strict_map_key=False)


class RegistryParser(_FieldParser):
    """A value in the Confluent wire format, decoded by the schema its id names in the
    Schema Registry (formats.registry); `registry`: the client's settings, which
    parser_for passes from the config, never a plan; `topic`: the one it reads (its
    subject's)."""
    kind = ""

    def __init__(self, field, unit: str = "auto", subject_name_strategy: str = "topic",
                 key: str | None = None, registry: dict | None = None, topic: str = ""):
        """key: the key's kind too (avro, protobuf, json_schema), registered under the
        `<topic>-key` subject: a typed table keeps it as column `key`."""
        from kafka_archive.formats import registry as wire

        super().__init__(field, unit)
        self.what, self.topic = f"{self.kind} in the Confluent wire format", topic
        self.decoder = wire.Decoder(self.kind, registry or {}, subject_name_strategy)
        self.key_decoder = None if key is None else wire.Decoder(
            key, registry or {}, subject_name_strategy, part="key")

    def decode(self, value: bytes) -> Any:
        return self.decoder.decode(value, self.topic)

    def event_time_ms(self, record: Record) -> int:
        return super().parse(record)[0]  # the value's: a files group never needs the key

    def parse(self, record: Record) -> tuple[int, dict]:
        ms, fields = super().parse(record)
        if self.key_decoder is None:
            return ms, fields
        if record.key is None:
            raise ParseError(f"the message has no key ({self.key_decoder.kind} expected)")
        return ms, fields.with_key(self.key_decoder.decode(record.key, self.topic))


class AvroParser(RegistryParser):
    kind = "avro"


class ProtobufParser(RegistryParser):
    kind = "protobuf"


class JsonSchemaParser(RegistryParser):
    kind = "json_schema"


BUILT_IN: dict[str, type[Parser]] = {"timestamp": TimestampParser, "json": JsonParser,
                                     "msgpack": MsgpackParser, "avro": AvroParser,
                                     "protobuf": ProtobufParser, "json_schema": JsonSchemaParser}


def to_ms(value: Any, unit: str, field: str = "the field") -> int:
    """An event time field's value in ms since the epoch; ParseError when it is none."""
    if isinstance(value, msgpack.Timestamp):
        return value.to_unix_nano() // 1_000_000
    if isinstance(value, datetime):  # Avro's timestamp logical types (naive: UTC)
        return ((value if value.tzinfo else value.replace(tzinfo=timezone.utc)) - _EPOCH) // _MS
    if unit == "iso8601" or (unit == "auto" and isinstance(value, str)
                             and not _is_number(value)):
        return _iso_ms(value, field)
    number = _number(value, field)
    if unit == "auto":
        size = abs(number)
        unit = "s" if size < 1e11 else "ms" if size < 1e14 else "us" if size < 1e17 else "ns"
    if isinstance(number, int):
        return {"s": number * 1000, "ms": number, "us": number // 1000,
                "ns": number // 1_000_000}[unit]
    ms = number * _PER_MS[unit]
    if not math.isfinite(ms):
        raise ParseError(f"{field} = {number} {unit} is not a time")
    return math.floor(round(ms, 3))


def _number(value: Any, field: str) -> int | float:
    if isinstance(value, str) and _is_number(value):
        value = int(value) if value.strip().lstrip("+-").isdigit() else float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ParseError(f"{field} = {_show(value)} is not a number")
    if isinstance(value, float) and not math.isfinite(value):
        raise ParseError(f"{field} = {value} is not a time")
    return value


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _iso_ms(value: Any, field: str) -> int:
    if not isinstance(value, str):
        raise ParseError(f"{field} = {_show(value)} is not ISO 8601 text")
    try:
        t = datetime.fromisoformat(value)
    except ValueError:
        raise ParseError(f"{field} = {_show(value)} is not ISO 8601 text") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    return (t - _EPOCH) // _MS


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:60] + "..."


def parse(parser: Parser, topic: str, record: Record) -> tuple[int, dict]:
    """The event time of one message and its fields (a parser with `parse`: json, msgpack,
    or a custom one that decodes values); ParseError naming topic and offset, as
    event_time_ms, also when the value is no object."""
    try:
        ms, fields = parser.parse(record)
    except ParseError as exc:
        raise ParseError(exc.reason, topic, record.offset) from None
    if not isinstance(fields, dict):
        raise ParseError(f"the value is {type(fields).__name__}, not an object of fields",
                         topic, record.offset)
    return _checked(parser, topic, record, ms), fields


def event_time_ms(parser: Parser, topic: str, record: Record) -> int:
    """The event time of one message; ParseError naming topic, offset and why."""
    try:
        ms = parser.event_time_ms(record)
    except ParseError as exc:
        raise ParseError(exc.reason, topic, record.offset) from None
    return _checked(parser, topic, record, ms)


def _checked(parser: Parser, topic: str, record: Record, ms) -> int:
    if isinstance(ms, bool) or not isinstance(ms, int):
        raise ParseError(f"{type(parser).__name__} returned {_show(ms)}, not an int of ms",
                         topic, record.offset)
    if not MIN_EVENT_MS <= ms < MAX_EVENT_MS:
        raise ParseError(f"event time {ms} ms is outside years 1..9999", topic, record.offset)
    return ms


def needs_registry(spec: ParserSpec) -> bool:
    """Whether the parser reads values by a Schema Registry's schemas (avro, protobuf,
    json_schema, or a subclass of RegistryParser)."""
    return issubclass(BUILT_IN.get(spec.kind) or _load_class(spec.kind), RegistryParser)


def parser_for(spec: ParserSpec, registry: dict | None = None, topic: str = "") -> Parser:
    """The parser a spec names, constructed with its options (a registry parser with the
    Schema Registry's settings and its topic too). ConfigError (without file: config adds it) when the
    class cannot be found, is not a Parser, or refuses the options."""
    cls = BUILT_IN.get(spec.kind) or _load_class(spec.kind)
    options = dict(spec.options)
    if needs_registry(spec):
        if given := sorted({"registry", "topic"} & set(options)):
            raise ConfigError(f"parser {spec.kind}: {', '.join(given)} is not an option (the "
                              "registry's settings are schema_registry's, at the top level)")
        options |= {"registry": registry, "topic": topic}
    try:
        return cls(**options)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"parser {spec.kind} refuses options {options}: {exc}") from None


def _load_class(path: str) -> type[Parser]:
    if not _DOTTED.fullmatch(path):
        raise ConfigError(f"parser {path!r} is neither built in ({', '.join(BUILT_IN)}) nor a "
                          "dotted path like mypkg.module:ClassName")
    module_name, _, name = path.rpartition(":") if ":" in path else path.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"parser {path}: cannot import {module_name}: {exc}") from None
    cls = getattr(module, name, None)
    if not (isinstance(cls, type) and issubclass(cls, Parser)):
        raise ConfigError(f"parser {path}: {name} in {module_name} is not a subclass of "
                          f"{Parser.__module__}.Parser")
    return cls


def load_checked(kind: str, options: dict[str, Any]) -> ParserSpec:
    """A spec from config values, checked by building its parser once."""
    spec = ParserSpec(kind, tuple((k, tuple(v) if isinstance(v, list) else v)
                                  for k, v in sorted(options.items())))
    parser_for(spec)
    return spec

