"""Typed columns of the parsed table shape: a JSON (or MessagePack) object's fields.

A column has a name and one of TYPES. A field's value either fits its column's type as it
is, or widens to it without loss (an integer into a double column), or does not fit: the
message then goes whole to the dead-letter table with the reason (`Misfit`), never a
value changed or dropped. A field no column names yet gets one, its type from its first
non-null value (`infer`): an object or a list becomes its JSON text.

Pure: no Arrow, no Iceberg (formats.parquet and commit.iceberg map the names).
"""

from __future__ import annotations

import json
import math
from datetime import date
from typing import Any

from kafka_archive.formats.parsers import ParseError, to_ms

TYPES = ("boolean", "int", "long", "float", "double", "string", "timestamp", "date")
# the table's own columns: a message field of the same name cannot be a column
KAFKA, EVENT_TIME = "kafka", "event_time"
RESERVED = (KAFKA, EVENT_TIME)
_INT = {"int": 2 ** 31, "long": 2 ** 63}
# what a column inferred from one file may become when another of its values needs it
# (within one file, or between the files of one run); Iceberg promotes no further
WIDER = {("long", "double"): "double"}


class Misfit(ValueError):
    """A field's value that its column cannot hold: the reason names field, value, type."""


def infer(value: Any) -> str | None:
    """The type of a new column from a value; None for null (no type yet)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "long"
    if isinstance(value, float):
        return "double"
    return "string"  # text, and an object or a list as its JSON text


def widened(current: str, seen: str) -> str | None:
    """The type a new column takes when it holds values of both types; None if none."""
    if current == seen:
        return current
    return WIDER.get((current, seen)) or WIDER.get((seen, current))


def convert(name: str, value: Any, kind: str) -> Any:
    """The value as a column of `kind` holds it (a timestamp as ms since the epoch, UTC;
    a date as datetime.date); Misfit when it cannot be held without loss."""
    if value is None:
        return None
    if kind == "boolean" and isinstance(value, bool):
        return value
    if kind in _INT and isinstance(value, int) and not isinstance(value, bool):
        if -_INT[kind] <= value < _INT[kind]:
            return value
        raise Misfit(f"field {name!r} = {_show(value)} is out of range for {kind}")
    if kind in ("float", "double") and isinstance(value, (int, float)) \
            and not isinstance(value, bool):
        if isinstance(value, float) and not math.isfinite(value):
            raise Misfit(f"field {name!r} = {value} is not a finite {kind}")
        if isinstance(value, int) and abs(value) > 2 ** 53:
            raise Misfit(f"field {name!r} = {value} loses digits as a {kind}")
        return float(value)
    if kind == "string":
        if isinstance(value, str):
            return value
        if isinstance(value, (dict, list)):
            return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    if kind == "timestamp" and not isinstance(value, bool):
        try:
            return to_ms(value, "auto", repr(name))
        except ParseError as exc:
            raise Misfit(f"field {exc.reason}") from None
    if kind == "date" and isinstance(value, str):
        try:
            return date.fromisoformat(value)
        except ValueError:
            raise Misfit(f"field {name!r} = {_show(value)} is not an ISO date") from None
    raise Misfit(f"field {name!r} = {_show(value)} does not fit column type {kind}")


def fit(fields: dict, event_ms: int, types: dict[str, str], known: frozenset[str] = frozenset()
        ) -> tuple[dict, dict[str, str]]:
    """A message's fields as columns of a file whose columns have `types` so far (those
    in `known`, the table's, fixed; the others this file's own, which may widen): the
    values, and the file's types with the message in it. Misfit, and nothing changed,
    when a field cannot be held."""
    values, types = {}, dict(types)
    for name, value in fields.items():
        if name in RESERVED:
            if name == EVENT_TIME and _same_time(value, event_ms):
                continue  # the parser's own field: the event_time column holds it
            raise Misfit(f"field {name!r} has the name of the table's own column {name}")
        kind = types.get(name)
        if kind is None:
            if (kind := infer(value)) is None:
                continue
            types[name] = kind
        try:
            values[name] = convert(name, value, kind)
        except Misfit:
            wider = None if name in known else widened(kind, infer(value))
            if wider is None or wider == kind:
                raise
            types[name] = wider
            values[name] = convert(name, value, wider)
    return values, types


def _same_time(value: Any, event_ms: int) -> bool:
    try:
        return value is not None and convert(EVENT_TIME, value, "timestamp") == event_ms
    except Misfit:
        return False


def check_declared(columns: dict[str, str]) -> None:
    """Declared columns (config): known types, none of the table's own names."""
    for name, kind in columns.items():
        if name in RESERVED:
            raise ValueError(f"column {name!r} is the table's own ({', '.join(RESERVED)})")
        if kind not in TYPES:
            raise ValueError(f"column {name!r}: unknown type {kind!r}; one of {', '.join(TYPES)}")


def _show(value: Any) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, bytes) else repr(value)
    return text if len(text) <= 60 else text[:60] + "..."
