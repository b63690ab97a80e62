"""Typed columns of the parsed table shape: a JSON (or MessagePack) object's fields, or
a registered schema's (formats.schemas).

A column has a name and a kind: one of TYPES for a field typed by its values; a
registered schema's fields also have the kinds of NESTED_TYPES ("decimal(P,S)" too) and
the nested ones `{"struct": [[name, kind], ...]}`, `{"list": kind}`, `{"map": [key kind,
value kind]}` (JSON, as plans and manifests hold them). Where two kinds meet (a table's
and a new schema version's), `promoted` gives the one Iceberg evolves both into, if any. A field's value either fits its column's type as it
is, or widens to it without loss (an integer into a double column), or does not fit: the
message then goes whole to the dead-letter table with the reason (`Misfit`), never a
value changed or dropped. A field no column names yet gets one, its type from its first
non-null value (`infer`): an object or a list becomes its JSON text.

Pure: no Arrow, no Iceberg (formats.parquet and commit.iceberg map the names).
"""

from __future__ import annotations

import json
import math
import re
from datetime import date
from typing import Any

from kafka_archive.formats.parsers import ParseError, to_ms

TYPES = ("boolean", "int", "long", "float", "double", "string", "timestamp", "date")
# the table's own columns: a message field of the same name cannot be a column
KAFKA, EVENT_TIME = "kafka", "event_time"
RESERVED = (KAFKA, EVENT_TIME)
_INT = {"int": 2 ** 31, "long": 2 ** 63}
# a registered schema's types beyond TYPES (formats.schemas maps them to Arrow)
NESTED_TYPES = ("binary", "time", "timestamp_ntz", "uuid")
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
    return promoted(current, seen) or WIDER.get((current, seen)) or WIDER.get((seen, current))


def promoted(current, kind):
    """The kind a column of `current` evolves into to hold `kind` too, as Iceberg evolves
    a table (files of either kind then read as it): int into long, float into double, a
    decimal into more digits, a struct gaining fields (recursively; one without a field
    reads it as null); None where Iceberg cannot (`conflict` says where)."""
    return _merged(current, kind, "")[0]


def conflict(current, kind, path: str) -> tuple[str, Any, Any] | None:
    """Where `promoted` fails: the path of the first field the two kinds cannot share,
    with its kind in each; None where they can."""
    return _merged(current, kind, path)[1]


def _merged(current, kind, path: str) -> tuple[Any, tuple[str, Any, Any] | None]:
    if current == kind:
        return current, None
    if isinstance(current, dict) and isinstance(kind, dict) and current.keys() == kind.keys():
        shape = next(iter(current))
        if shape == "struct":
            fields = dict(current["struct"])
            for name, inner in kind["struct"]:
                if name in fields:
                    merged, where = _merged(fields[name], inner, f"{path}.{name}".lstrip("."))
                    if merged is None:
                        return None, where
                    fields[name] = merged
                else:
                    fields[name] = inner
            return {"struct": [[name, inner] for name, inner in fields.items()]}, None
        if shape == "list":
            merged, where = _merged(current["list"], kind["list"], f"{path}[]")
            return (None if merged is None else {"list": merged}), where
        if shape == "map" and current["map"][0] == kind["map"][0]:
            merged, where = _merged(current["map"][1], kind["map"][1], f"{path}{{}}")
            return (None if merged is None else {"map": [current["map"][0], merged]}), where
    if isinstance(current, str) and isinstance(kind, str):
        for narrow, wide in (("int", "long"), ("float", "double")):
            if {current, kind} == {narrow, wide}:
                return wide, None
        digits = [DECIMAL.fullmatch(k) for k in (current, kind)]
        if all(digits) and digits[0]["scale"] == digits[1]["scale"]:
            return max(current, kind, key=lambda k: int(DECIMAL.fullmatch(k)["precision"])), None
    return None, (path, current, kind)


DECIMAL = re.compile(r"decimal\((?P<precision>\d+),\s*(?P<scale>\d+)\)")


def shown(kind) -> str:
    """A kind as text, for reasons: long, struct<a: long>, list<string>, map<string, long>."""
    if isinstance(kind, str):
        return kind
    shape, inner = next(iter(kind.items()))
    if shape == "struct":
        return "struct<" + ", ".join(f"{name}: {shown(k)}" for name, k in inner) + ">"
    if shape == "list":
        return f"list<{shown(inner)}>"
    return f"map<{shown(inner[0])}, {shown(inner[1])}>"


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
            if name == EVENT_TIME and same_time(value, event_ms):
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


def same_time(value: Any, event_ms: int) -> bool:
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
