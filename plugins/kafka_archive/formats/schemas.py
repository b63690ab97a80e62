"""A registered schema as the Arrow schema of its values (issue 58, typed tables): the
types come from the writer's schema, never guessed from values. Avro's, Protobuf's (a
message descriptor) and JSON Schema's, mapped as Iceberg holds them (pyiceberg's own
Arrow mapping):

| schema | Arrow (Iceberg) |
|---|---|
| record, message, object with properties | struct |
| array, repeated, array with items | list |
| map, map<K, V>, object with additionalProperties only | map (string keys for Avro, JSON) |
| enum | string |
| union of null and one type, optional field | that type, nullable |
| boolean; int (32 bits); long, int64 | bool; int32; int64 |
| float; double | float32; float64 |
| string; bytes, fixed | string; binary |
| decimal(p, s) | decimal128(p, s) |
| date; time-millis, time-micros (JSON: format date, time) | date32; time64(us) |
| timestamp-millis, -micros; google.protobuf.Timestamp; format date-time | timestamp(us, UTC) |
| local-timestamp-millis, -micros | timestamp(us) |
| uuid | uuid |

What cannot become a column is refused (`UnsupportedSchema`, naming the field): a union
of several non-null types, a recursive record. The caller sends such a topic's messages
to the dead letters with the reason.

A table column's kind (formats.columns: "long", {"struct": ...}, as plans and manifests
hold them) is its Arrow type's (`kind`, `arrow`); `fit` places a decoded value's fields in
a parsed table file's columns by its schema, the table evolving where Iceberg can.
Pure: pyarrow only.
"""

from __future__ import annotations

import base64
import decimal
import functools
import json
import uuid
from datetime import date, datetime, time, timezone
from typing import Any, Callable, Iterable, Mapping, Sequence

import pyarrow as pa

from kafka_archive.formats import columns
from kafka_archive.formats.columns import Misfit

_AVRO_PRIMITIVE = {"boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(),
                   "float": pa.float32(), "double": pa.float64(), "bytes": pa.binary(),
                   "string": pa.string()}
_AVRO_LOGICAL = {"date": pa.date32(), "time-millis": pa.time64("us"),
                 "time-micros": pa.time64("us"), "uuid": pa.uuid(),
                 "timestamp-millis": pa.timestamp("us", tz="UTC"),
                 "timestamp-micros": pa.timestamp("us", tz="UTC"),
                 "local-timestamp-millis": pa.timestamp("us"),
                 "local-timestamp-micros": pa.timestamp("us")}


# what identifies a field across a schema's versions, as Arrow field metadata (identities_of):
# a Protobuf field's number, an Avro field's aliases (the names it had before) besides its name
NUMBER, ALIASES = b"number", b"aliases"


class UnsupportedSchema(ValueError):
    """A schema no table column can hold as it is; the reason names the field."""


def avro_arrow(schema: str | Mapping | list) -> pa.Schema:
    """The Arrow schema of an Avro record schema's values (its JSON, or parsed)."""
    parsed = json.loads(schema) if isinstance(schema, str) else schema
    kind = avro_type(parsed)
    if not pa.types.is_struct(kind):
        raise UnsupportedSchema(f"the value's schema is {_avro_name(parsed)}, not a record")
    return pa.schema(list(kind))


def avro_type(schema: str | Mapping | list) -> pa.DataType:
    """The Arrow type of any Avro schema's values (a key's may be a string)."""
    parsed = json.loads(schema) if isinstance(schema, str) and schema.lstrip()[:1] in "{[\"" \
        else schema
    return _avro(parsed, {}, "", (), "")[0]


def _avro(node: Any, names: dict[str, Any], path: str, enclosing: tuple[str, ...],
          namespace: str) -> tuple[pa.DataType, bool]:
    """(type, nullable) of a schema node; `names`: the named types met so far by full
    name (Avro's references), `enclosing`: the records around it (a reference to one of
    them is recursion), `namespace`: the one a name without its own inherits."""
    where = path or "the value"
    if isinstance(node, str):
        if node in _AVRO_PRIMITIVE:
            return _AVRO_PRIMITIVE[node], False
        if node == "null":
            raise UnsupportedSchema(f"{where} is always null")
        full = node if "." in node or not namespace else f"{namespace}.{node}"
        if full in enclosing:
            raise UnsupportedSchema(f"{where} refers to its enclosing record {node}: a "
                                    "recursive schema has no table shape")
        if full not in names:
            raise UnsupportedSchema(f"{where} names type {node!r}, which the schema does not define")
        return _avro(names[full], names, path, enclosing, full.rpartition(".")[0])
    if isinstance(node, list):  # a union
        others = [branch for branch in node if branch != "null"]
        if len(others) != 1:
            shown = ", ".join(_avro_name(b) for b in others)
            raise UnsupportedSchema(f"{where} is a union of {shown}: a column holds one type")
        return _avro(others[0], names, path, enclosing, namespace)[0], True
    kind = node.get("type")
    if logical := node.get("logicalType"):
        if logical == "decimal":
            return pa.decimal128(node["precision"], node.get("scale", 0)), False
        if logical in _AVRO_LOGICAL:
            return _AVRO_LOGICAL[logical], False
    if kind in ("record", "enum", "fixed"):
        name = node["name"]
        own = name.rpartition(".")[0] if "." in name else node.get("namespace", namespace)
        full = name if "." in name or not own else f"{own}.{name}"
        names[full] = node
        if kind == "enum":
            return pa.string(), False
        if kind == "fixed":
            return pa.binary(), False
        fields = []
        for field in node["fields"]:
            inner = f"{path}.{field['name']}" if path else field["name"]
            field_type, nullable = _avro(field["type"], names, inner, (*enclosing, full), own)
            aliases = {ALIASES: json.dumps(field["aliases"])} if field.get("aliases") else None
            fields.append(pa.field(field["name"], field_type, nullable, metadata=aliases))
        return pa.struct(fields), False
    if kind == "array":
        item, nullable = _avro(node["items"], names, f"{where}[]", enclosing, namespace)
        return pa.list_(pa.field("element", item, nullable)), False
    if kind == "map":
        value, nullable = _avro(node["values"], names, f"{where}{{}}", enclosing, namespace)
        return pa.map_(pa.string(), pa.field("value", value, nullable)), False
    return _avro(kind, names, path, enclosing, namespace)  # {"type": "long"} and the like


def table(rows: list[dict], schema: pa.Schema) -> pa.Table:
    """Decoded values as a table of their schema's types. Each value is taken as its
    column's type holds it: what a deserializer gives as text is read as that type
    (JSON's date-time text, Protobuf's JSON mapping: int64 as text, a Timestamp as RFC
    3339, bytes as base64), a UUID as its 16 bytes. A value that is no such thing raises
    ValueError naming the field."""
    record = converter(pa.struct(list(schema)), "")
    return pa.Table.from_pylist([record(row) for row in rows], schema=schema)


@functools.lru_cache(maxsize=1024)
def converter(kind: pa.DataType, path: str) -> Callable[[Any], Any]:
    """The function taking a decoded value of `kind` (at field `path`) to the Python value
    Arrow takes for it (see `table`): made once per type and field, so a message costs
    a call per field, not a walk of its schema. ValueError naming the field."""
    where = path or "the value"

    def failed(value: Any, exc: Exception) -> ValueError:
        return ValueError(f"field {where}: {value!r} is no {kind}: {exc}")

    if pa.types.is_struct(kind):
        fields = [(f.name, converter(f.type, f"{path}.{f.name}".lstrip("."))) for f in kind]

        def record(value):
            if value is None:
                return None
            try:
                get = value.get
            except AttributeError as exc:
                raise failed(value, exc) from None
            return {name: convert(get(name)) for name, convert in fields}
        return record
    if pa.types.is_map(kind):
        key, item = converter(kind.key_type, path), converter(kind.item_type, f"{path}{{}}")

        def mapping(value):
            if value is None:
                return None
            try:
                pairs = value.items() if isinstance(value, dict) else value
                return [(key(k), item(v)) for k, v in pairs]
            except (TypeError, AttributeError) as exc:
                raise failed(value, exc) from None
        return mapping
    if pa.types.is_list(kind):
        element = converter(kind.value_type, f"{path}[]")

        def listing(value):
            if value is None:
                return None
            try:
                return [element(v) for v in value]
            except TypeError as exc:
                raise failed(value, exc) from None
        return listing
    if isinstance(kind, pa.UuidType) or kind == pa.uuid():
        def as_uuid(value):
            if value is None:
                return None
            try:
                return (value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))).bytes
            except (ValueError, TypeError) as exc:
                raise failed(value, exc) from None
        return as_uuid
    text_is_the_value = pa.types.is_string(kind) or pa.types.is_large_string(kind)
    decimal_kind = pa.types.is_decimal(kind)

    def scalar(value):
        try:
            if isinstance(value, str) and not text_is_the_value:
                return _from_text(value, kind)
            if decimal_kind and isinstance(value, (int, float)) and not isinstance(value, bool):
                return decimal.Decimal(str(value))
        except (ValueError, TypeError, decimal.InvalidOperation) as exc:
            raise failed(value, exc) from None
        return value
    return scalar


@functools.lru_cache(maxsize=1024)
def native_converter(kind: pa.DataType, path: str) -> Callable[[Any], Any] | None:
    """For values a deserializer gives in Arrow's own Python types already (fastavro's:
    int, float, str, bytes, datetime, date, time, Decimal, dicts for records and maps):
    None where a value is taken as it is, else one converting the parts that are not (a
    UUID, and what holds one). Half of a typed value's cost is building its copy."""
    if isinstance(kind, pa.UuidType) or kind == pa.uuid():
        return converter(kind, path)
    if pa.types.is_struct(kind):
        parts = [(f.name, found) for f in kind
                 if (found := native_converter(f.type, f"{path}.{f.name}".lstrip(".")))]
        if not parts:
            return None

        def record(value):
            if value is None:
                return None
            changed = dict(value)
            for name, convert in parts:
                changed[name] = convert(value.get(name))
            return changed
        return record
    if pa.types.is_list(kind):
        element = native_converter(kind.value_type, f"{path}[]")
        return None if element is None else (
            lambda value: None if value is None else [element(v) for v in value])
    if pa.types.is_map(kind):
        item = native_converter(kind.item_type, f"{path}{{}}")
        return None if item is None else (
            lambda value: None if value is None else {k: item(v) for k, v in value.items()})
    return None


def _from_text(text: str, kind: pa.DataType) -> Any:
    if pa.types.is_timestamp(kind):
        moment = datetime.fromisoformat(text)  # Z too (Python 3.11)
        return moment if kind.tz is None or moment.tzinfo else moment.replace(tzinfo=timezone.utc)
    if pa.types.is_date(kind):
        return date.fromisoformat(text)
    if pa.types.is_time(kind):
        return time.fromisoformat(text)
    if pa.types.is_integer(kind):
        return int(text)
    if pa.types.is_floating(kind):
        return float(text)
    if pa.types.is_decimal(kind):
        return decimal.Decimal(text)
    if pa.types.is_binary(kind) or pa.types.is_fixed_size_binary(kind):
        return base64.b64decode(text, validate=True)
    return text


def _avro_name(node: Any) -> str:
    if isinstance(node, str):
        return node
    if isinstance(node, list):
        return "a union"
    return node.get("name") or node.get("logicalType") or str(node.get("type"))


# --- JSON Schema ------------------------------------------------------------------------

_JSON_SCALAR = {"boolean": pa.bool_(), "integer": pa.int64(), "number": pa.float64(),
                "string": pa.string()}
_JSON_FORMAT = {"date-time": pa.timestamp("us", tz="UTC"), "date": pa.date32(),
                "time": pa.time64("us"), "uuid": pa.uuid()}


def json_schema_arrow(schema: str | Mapping) -> pa.Schema:
    """The Arrow schema of a JSON Schema's object values: `properties` a struct (a
    property not `required`, or typed with "null", nullable), `items` a list, an object
    with only `additionalProperties` a map, `format` date-time/date/time/uuid their
    types, `$ref` into the document's `$defs`/`definitions`."""
    kind = json_schema_type(schema)
    if not pa.types.is_struct(kind):
        raise UnsupportedSchema("the value's schema is not an object with properties")
    return pa.schema(list(kind))


def json_schema_type(schema: str | Mapping) -> pa.DataType:
    """The Arrow type of any JSON Schema's values (a key's may be a string)."""
    parsed = json.loads(schema) if isinstance(schema, str) else schema
    return _json(parsed, parsed, "", ())[0]


def _json(node: Mapping, root: Mapping, path: str, refs: tuple[str, ...]
          ) -> tuple[pa.DataType, bool]:
    where = path or "the value"
    if ref := node.get("$ref"):
        if ref in refs:
            raise UnsupportedSchema(f"{where} refers to {ref} inside itself: a recursive "
                                    "schema has no table shape")
        target: Any = root
        for part in ref.removeprefix("#/").split("/"):
            if not isinstance(target, Mapping) or part not in target:
                raise UnsupportedSchema(f"{where} refers to {ref}, which the schema does not hold")
            target = target[part]
        return _json(target, root, path, (*refs, ref))
    for combined in ("oneOf", "anyOf"):
        if options := node.get(combined):
            others = [o for o in options if o.get("type") != "null"]
            if len(others) != 1:
                raise UnsupportedSchema(f"{where} is {combined} of {len(others)} types: a "
                                        "column holds one type")
            return _json(others[0], root, path, refs)[0], True
    types = node.get("type")
    types = [types] if isinstance(types, str) else list(types or [])
    nullable = "null" in types
    types = [t for t in types if t != "null"]
    if "enum" in node and not types:
        types = ["string"]
    if len(types) != 1:
        shown = ", ".join(types) or "no type"
        raise UnsupportedSchema(f"{where} has {shown}: a column holds one type")
    kind = types[0]
    if kind == "object":
        properties = node.get("properties") or {}
        extra = node.get("additionalProperties")
        if not properties and isinstance(extra, Mapping):
            value, value_nullable = _json(extra, root, f"{where}{{}}", refs)
            return pa.map_(pa.string(), pa.field("value", value, value_nullable)), nullable
        required = set(node.get("required") or ())
        fields = []
        for name, child in properties.items():
            inner = f"{path}.{name}" if path else name
            child_type, child_nullable = _json(child, root, inner, refs)
            fields.append(pa.field(name, child_type, child_nullable or name not in required))
        return pa.struct(fields), nullable
    if kind == "array":
        item, item_nullable = _json(node.get("items") or {}, root, f"{where}[]", refs)
        return pa.list_(pa.field("element", item, item_nullable)), nullable
    if kind == "string" and node.get("format") in _JSON_FORMAT:
        return _JSON_FORMAT[node["format"]], nullable
    if kind not in _JSON_SCALAR:
        raise UnsupportedSchema(f"{where} has type {kind!r}")
    return _JSON_SCALAR[kind], nullable


# --- Protobuf ---------------------------------------------------------------------------

_PROTO_SCALAR = {"TYPE_BOOL": pa.bool_(), "TYPE_INT32": pa.int32(), "TYPE_SINT32": pa.int32(),
                 "TYPE_SFIXED32": pa.int32(), "TYPE_UINT32": pa.int64(),
                 "TYPE_FIXED32": pa.int64(), "TYPE_INT64": pa.int64(),
                 "TYPE_SINT64": pa.int64(), "TYPE_SFIXED64": pa.int64(),
                 "TYPE_UINT64": pa.decimal128(20, 0), "TYPE_FIXED64": pa.decimal128(20, 0),
                 "TYPE_FLOAT": pa.float32(), "TYPE_DOUBLE": pa.float64(),
                 "TYPE_STRING": pa.string(), "TYPE_BYTES": pa.binary(), "TYPE_ENUM": pa.string()}
_PROTO_WELL_KNOWN = {"google.protobuf.Timestamp": pa.timestamp("us", tz="UTC"),
                     "google.protobuf.StringValue": pa.string(),
                     "google.protobuf.BoolValue": pa.bool_(),
                     "google.protobuf.Int32Value": pa.int32(),
                     "google.protobuf.Int64Value": pa.int64(),
                     "google.protobuf.FloatValue": pa.float32(),
                     "google.protobuf.DoubleValue": pa.float64(),
                     "google.protobuf.BytesValue": pa.binary()}


def protobuf_arrow(descriptor) -> pa.Schema:
    """The Arrow schema of a Protobuf message's values (its Descriptor). Unsigned 64-bit
    numbers are decimal(20, 0): Iceberg has no unsigned long."""
    return pa.schema(list(_proto_message(descriptor, (), "")))


def _proto_message(descriptor, enclosing: tuple[str, ...], path: str) -> pa.DataType:
    if descriptor.full_name in enclosing:
        raise UnsupportedSchema(f"{path or 'the value'} is a {descriptor.full_name} inside "
                                "itself: a recursive message has no table shape")
    fields = []
    for field in descriptor.fields:
        inner = f"{path}.{field.name}" if path else field.name
        kind = _proto_field(field, (*enclosing, descriptor.full_name), inner)
        # proto3: a scalar without `optional` always has a value (its default)
        nullable = field.message_type is not None or field.has_presence
        fields.append(pa.field(field.name, kind, nullable or _is_repeated(field),
                               metadata={NUMBER: str(field.number)}))
    return pa.struct(fields)


def _proto_field(field, enclosing: tuple[str, ...], path: str) -> pa.DataType:
    message = field.message_type
    if message is not None and message.GetOptions().map_entry:
        key, value = message.fields_by_name["key"], message.fields_by_name["value"]
        return pa.map_(_proto_single(key, enclosing, path),
                       pa.field("value", _proto_single(value, enclosing, f"{path}{{}}")))
    single = _proto_single(field, enclosing, path)
    return pa.list_(pa.field("element", single, False)) if _is_repeated(field) else single


def _proto_single(field, enclosing: tuple[str, ...], path: str) -> pa.DataType:
    message = field.message_type
    if message is None:
        return _PROTO_SCALAR[_type_name(field)]
    if message.full_name in _PROTO_WELL_KNOWN:
        return _PROTO_WELL_KNOWN[message.full_name]
    return _proto_message(message, enclosing, path)


def _type_name(field) -> str:
    return _proto_type_names()[field.type]


@functools.cache
def _proto_type_names() -> dict[int, str]:
    from google.protobuf.descriptor import FieldDescriptor

    return {v: k for k, v in vars(FieldDescriptor).items() if k.startswith("TYPE_")}


def _is_repeated(field) -> bool:
    return field.is_repeated


# --- column kinds -----------------------------------------------------------------------

_KIND_ARROW = {"boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(),
               "float": pa.float32(), "double": pa.float64(), "string": pa.string(),
               "binary": pa.binary(), "date": pa.date32(), "time": pa.time64("us"),
               "timestamp": pa.timestamp("us", tz="UTC"), "timestamp_ntz": pa.timestamp("us"),
               "uuid": pa.uuid()}
# how Iceberg readers (pyiceberg) give some of them back
_SAME = {pa.large_string(): pa.string(), pa.large_binary(): pa.binary()}


def kind(arrow_type: pa.DataType):
    """The column kind of an Arrow type (formats.columns); UnsupportedSchema for a type
    no column of ours holds."""
    arrow_type = _SAME.get(arrow_type, arrow_type)
    for name, known in _KIND_ARROW.items():
        if arrow_type == known:
            return name
    if pa.types.is_decimal(arrow_type):
        return f"decimal({arrow_type.precision},{arrow_type.scale})"
    if pa.types.is_struct(arrow_type):
        return {"struct": [[f.name, kind(f.type)] for f in arrow_type]}
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return {"list": kind(arrow_type.value_type)}
    if pa.types.is_map(arrow_type):
        return {"map": [kind(arrow_type.key_type), kind(arrow_type.item_type)]}
    raise UnsupportedSchema(f"type {arrow_type} is no column type of this archive")


def arrow(column_kind) -> pa.DataType:
    """The Arrow type of a column kind: every field nullable (a table's columns are
    optional: a later schema version may drop one), a map's keys not."""
    if isinstance(column_kind, str):
        if found := columns.DECIMAL.fullmatch(column_kind):
            return pa.decimal128(int(found["precision"]), int(found["scale"]))
        return _KIND_ARROW[column_kind]
    shape, inner = next(iter(column_kind.items()))
    if shape == "struct":
        return pa.struct([pa.field(name, arrow(k)) for name, k in inner])
    if shape == "list":
        return pa.list_(pa.field("element", arrow(inner)))
    return pa.map_(arrow(inner[0]), pa.field("value", arrow(inner[1])))


def fit(fields: Mapping, schema: pa.Schema, schema_id: str, event_ms: int, types: dict,
        origins: dict[str, str], native: bool = False,
        identities: dict[str, tuple[str, ...]] | None = None
        ) -> tuple[dict, dict, dict[str, str], dict[str, tuple[str, ...]]]:
    """A value decoded by its writer's schema (`schema`, registered as `schema_id`) as
    columns of a parsed table file whose columns have `types` so far, each set by what
    `origins` names ("schema id 3"; absent: the table's): the values (as Arrow takes
    them for their schema's types), and the file's types, origins and identities with
    the message in it (a field new to them added, a column promoted where Iceberg can:
    int to long, a struct gaining fields).

    A field's column is the one that has one of its identities (`identities`: column ->
    them; a column without an entry: its name, and a field of that name takes it): a
    Protobuf field's number ("number 4"), an Avro field's name and aliases. A renamed
    field so keeps filling its column, under the column's first name: the table's field
    id is the field's, whatever a later version calls it, and in whichever order the
    versions come. Misfit, and nothing
    changed, when a field's kind cannot join its column's (the reason names both schema
    ids and the field), a Protobuf field has the name of another number's column, or a
    value is not what its schema says. `native`: the values are in Arrow's own Python
    types already (native_converter: Avro's)."""
    types, origins, values = dict(types), dict(origins), {}
    identities = identities or {}
    owners = None  # identity -> column, made when a field is not simply its own name's
    for name, mine, convert, own in _columns_of(schema, native):
        if name in columns.RESERVED:
            if name == columns.EVENT_TIME and columns.same_time(fields.get(name), event_ms):
                continue  # the parser's own field: the event_time column holds it
            raise Misfit(f"schema id {schema_id} has field {name!r}, the name of the "
                         f"table's own column {name}")
        held = identities.get(name)
        if own[0] == name and name in types and (held is None or name in held):
            column = name  # the common case: the column of the field's own name
        else:
            if owners is None:
                owners = owners_of(identities, types)
            column = next((owners[i] for i in own if i in owners), None)
            if column is None:
                if name in types and held is not None:
                    raise Misfit(f"schema id {schema_id} has field {name} as {own[0]}, where "
                                 f"{origins.get(name, 'the table')} has "
                                 f"{' or '.join(identities.get(name, (name,)))} under that "
                                 "name: a column holds one field")
                column = name
            grown = grown_identities(identities, column, column in types, own)
            if grown != identities.get(column, (column,)):
                identities = {**identities, column: grown}
                owners.update((i, column) for i in grown)
        current = types.get(column)
        if current is mine:  # this schema set it already: nothing to merge
            values[column] = _converted(convert, fields.get(name), schema_id)
            continue
        merged = mine if current is None else columns.promoted(current, mine)
        if merged is None:
            where, theirs, ours = columns.conflict(current, mine, name)
            renamed = "" if column == name else f" (column {column}, the same field)"
            raise Misfit(f"schema id {schema_id} has field {where}{renamed} as "
                         f"{columns.shown(ours)}, where {origins.get(column, 'the table')} has "
                         f"it as {columns.shown(theirs)}: Iceberg cannot evolve one into the other")
        if merged != current:
            types[column], origins[column] = merged, f"schema id {schema_id}"
        elif merged == mine:
            types[column] = mine  # the same kind, held as this schema's: found by identity next
        values[column] = _converted(convert, fields.get(name), schema_id)
    return values, types, origins, identities


def owners_of(identities: Mapping[str, Sequence[str]], known: Iterable[str]) -> dict[str, str]:
    """identity -> column, of the `known` columns (`identities`: column -> them; a column
    without an entry: its name)."""
    return {i: c for c in known for i in identities.get(c, (c,))}


def grown_identities(identities: Mapping[str, Sequence[str]], column: str, known: bool,
                     own: Sequence[str]) -> tuple[str, ...]:
    """A column's identities with a field's `own` added; a column new to the file (not
    `known`) starts from none (a Protobuf column is its number, never its name)."""
    return tuple(dict.fromkeys((*identities.get(column, (column,) if known else ()), *own)))


def identities_of(field: pa.Field) -> tuple[str, ...]:
    """What identifies a writer schema's field across versions: a Protobuf field its
    number, an Avro field its name and its aliases (the names it had), others the name."""
    meta = field.metadata or {}
    if NUMBER in meta:
        return (f"number {meta[NUMBER].decode()}",)
    return (field.name, *json.loads(meta.get(ALIASES, b"[]")))


_COLUMNS: dict[tuple[int, bool], tuple[pa.Schema, tuple]] = {}


def _columns_of(schema: pa.Schema, native: bool) -> tuple[tuple, ...]:
    """(name, kind, converter or None: as it is, identities) of a writer schema's fields,
    made once per schema object (a decoder keeps one per schema id). By identity:
    hashing a nested schema costs more than the rest of a message's fitting."""
    found = _COLUMNS.get((id(schema), native))
    if found is not None and found[0] is schema:
        return found[1]
    if len(_COLUMNS) > 256:
        _COLUMNS.clear()
    made = tuple((f.name, kind(f.type), native_converter(f.type, f.name) if native
                  else converter(f.type, f.name), identities_of(f)) for f in schema)
    _COLUMNS[(id(schema), native)] = (schema, made)  # the schema kept: its id stays its own
    return made


def _converted(convert: Callable[[Any], Any] | None, value: Any, schema_id: str) -> Any:
    if convert is None:
        return value
    try:
        return convert(value)
    except ValueError as exc:
        raise Misfit(f"schema id {schema_id}: {exc}") from None
