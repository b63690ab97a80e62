"""A registered schema as the Arrow schema of its values (formats.schemas): each Avro and
Protobuf type as Iceberg holds it, what no column can hold refused naming the field, and
values as the registry's deserializers give them fitting those types whole."""

from __future__ import annotations

import json
import uuid
from datetime import date, datetime, time, timezone
from decimal import Decimal

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer

from kafka_archive.formats import registry, schemas
from kafka_archive.formats.schemas import UnsupportedSchema
from tests.support import registry_topics

EVERY_AVRO_TYPE = {
    "type": "record", "name": "Reading", "namespace": "lab", "fields": [
        {"name": "b", "type": "boolean"}, {"name": "i", "type": "int"},
        {"name": "l", "type": "long"}, {"name": "f", "type": "float"},
        {"name": "d", "type": "double"}, {"name": "s", "type": "string"},
        {"name": "raw", "type": "bytes"},
        {"name": "digest", "type": {"type": "fixed", "name": "Md5", "size": 16}},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal",
                                    "precision": 12, "scale": 2}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "clock", "type": {"type": "long", "logicalType": "time-micros"}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
        {"name": "again", "type": "lab.Kind"},  # a named type used twice
        {"name": "tags", "type": {"type": "array", "items": ["null", "string"]}},
        {"name": "scores", "type": {"type": "map", "values": "double"}},
        {"name": "maybe", "type": ["null", "long"], "default": None},
    ]}


def test_every_avro_type_has_its_column_type():
    made = schemas.avro_arrow(json.dumps(EVERY_AVRO_TYPE))
    assert {f.name: (f.type, f.nullable) for f in made} == {
        "b": (pa.bool_(), False), "i": (pa.int32(), False), "l": (pa.int64(), False),
        "f": (pa.float32(), False), "d": (pa.float64(), False), "s": (pa.string(), False),
        "raw": (pa.binary(), False), "digest": (pa.binary(), False),
        "amount": (pa.decimal128(12, 2), False), "day": (pa.date32(), False),
        "clock": (pa.time64("us"), False), "at": (pa.timestamp("us", tz="UTC"), False),
        "local": (pa.timestamp("us"), False), "id": (pa.uuid(), False),
        "kind": (pa.string(), False), "again": (pa.string(), False),
        "tags": (pa.list_(pa.field("element", pa.string(), True)), False),
        "scores": (pa.map_(pa.string(), pa.field("value", pa.float64(), False)), False),
        "maybe": (pa.int64(), True)}


@pytest.mark.parametrize("field, reason", [
    ({"name": "either", "type": ["null", "long", "string"]},
     "either is a union of long, string: a column holds one type"),
    ({"name": "next", "type": ["null", "Node"]},
     "next refers to its enclosing record Node: a recursive schema"),
    ({"name": "other", "type": "Missing"}, "other names type 'Missing'"),
])
def test_what_no_column_can_hold_is_refused_naming_the_field(field, reason):
    schema = {"type": "record", "name": "Node", "fields": [{"name": "v", "type": "long"}, field]}
    with pytest.raises(UnsupportedSchema, match=reason):
        schemas.avro_arrow(schema)


def test_a_protobuf_message_has_its_column_types():
    made = schemas.protobuf_arrow(registry_topics.order_message_class().DESCRIPTOR)
    assert {f.name: (f.type, f.nullable) for f in made} == {
        "id": (pa.int64(), False), "at": (pa.timestamp("us", tz="UTC"), True),
        "customer": (pa.struct([pa.field("name", pa.string(), False),
                                pa.field("vip", pa.bool_(), False)]), True),
        "items": (pa.list_(pa.field("element", pa.string(), False)), True),
        "labels": (pa.map_(pa.string(), pa.string()), True),
        "status": (pa.string(), False), "note": (pa.string(), True)}


def test_the_deserializers_values_fit_their_schemas_types_whole():
    client = SchemaRegistryClient.new_client({"url": "mock://schemas"})
    value = {"b": True, "i": -5, "l": 2 ** 40, "f": 1.5, "d": 2.25, "s": "é", "raw": b"\x00",
             "digest": bytes(16), "amount": Decimal("1234.56"), "day": date(2026, 11, 29),
             "clock": time(9, 30, 0, 250), "at": datetime(2026, 11, 29, 9, tzinfo=timezone.utc),
             "local": datetime(2026, 11, 29, 9), "id": "7d3e9c1a-5b2f-4f7e-9a61-0c4b7e2d1f00",
             "kind": "B", "again": "A", "tags": ["x", None], "scores": {"p": 0.5},
             "maybe": None}
    context = registry_topics.value_context("readings")
    data = AvroSerializer(client, json.dumps(EVERY_AVRO_TYPE))(value, context)
    decoded = registry.Decoder("avro", {}, client=client).decode(data, "readings")
    table = schemas.table([decoded], schemas.avro_arrow(EVERY_AVRO_TYPE))
    assert table.to_pylist() == [{**value, "scores": [("p", 0.5)],
                                  "id": uuid.UUID(value["id"])}]


def test_a_json_schema_object_has_its_column_types_and_its_text_is_read_as_them():
    made = schemas.json_schema_arrow(registry_topics.ORDER_JSON_SCHEMA)
    assert {f.name: (f.type, f.nullable) for f in made} == {
        "id": (pa.int64(), False), "at": (pa.timestamp("us", tz="UTC"), False),
        "customer": (pa.struct([pa.field("name", pa.string(), False),
                                pa.field("vip", pa.bool_(), False)]), False),
        "items": (pa.list_(pa.field("element", pa.string(), False)), False),
        "labels": (pa.map_(pa.string(), pa.field("value", pa.string(), False)), False),
        "status": (pa.string(), False), "note": (pa.string(), True)}
    row = {"id": 7, "at": "2026-11-29T09:30:00Z", "customer": {"name": "Ada", "vip": True},
           "items": ["pen"], "labels": {"c": "web"}, "status": "PAID"}
    [back] = schemas.table([row], made).to_pylist()
    assert back["at"] == datetime(2026, 11, 29, 9, 30, tzinfo=timezone.utc)
    assert back["note"] is None and back["labels"] == [("c", "web")]


def test_protobufs_json_mapping_is_read_as_its_types():
    from google.protobuf.json_format import MessageToDict

    message = registry_topics.order_message_class()(id=2 ** 40, items=["a"], status="PAID")
    message.at.FromDatetime(datetime(2026, 11, 29, 9, 30, 15, 250000, tzinfo=timezone.utc))
    decoded = MessageToDict(message, preserving_proto_field_name=True)
    assert decoded["id"] == str(2 ** 40)  # int64 as text: what the table must not keep
    schema = schemas.protobuf_arrow(registry_topics.order_message_class().DESCRIPTOR)
    [back] = schemas.table([decoded], schema).to_pylist()
    assert back["id"] == 2 ** 40 and back["customer"] is None
    assert back["at"] == datetime(2026, 11, 29, 9, 30, 15, 250000, tzinfo=timezone.utc)


def test_a_value_that_is_not_its_columns_type_names_the_field():
    schema = schemas.json_schema_arrow({"type": "object", "properties": {
        "at": {"type": "string", "format": "date-time"}}, "required": ["at"]})
    with pytest.raises(ValueError, match="field at: 'soon' is no timestamp"):
        schemas.table([{"at": "soon"}], schema)


@pytest.mark.parametrize("schema, reason", [
    ({"type": "object", "properties": {"x": {"type": ["string", "integer"]}}},
     "x has string, integer: a column holds one type"),
    ({"type": "object", "properties": {"n": {"$ref": "#/$defs/Node"}},
      "$defs": {"Node": {"type": "object", "properties": {"n": {"$ref": "#/$defs/Node"}}}}},
     "n.n refers to #/\\$defs/Node inside itself"),
    ({"type": "object", "properties": {"y": {"oneOf": [{"type": "string"}, {"type": "integer"}]}}},
     "y is oneOf of 2 types"),
])
def test_a_json_schema_no_column_can_hold_is_refused_naming_the_field(schema, reason):
    with pytest.raises(UnsupportedSchema, match=reason):
        schemas.json_schema_arrow(schema)


# --- column kinds: the JSON form plans and manifests hold, and their evolution ---------

NESTED_KIND = {"struct": [["name", "string"], ["tags", {"list": "string"}],
                          ["scores", {"map": ["string", "double"]}],
                          ["amount", "decimal(12,2)"], ["id", "uuid"], ["at", "timestamp"],
                          ["local", "timestamp_ntz"], ["day", "date"], ["clock", "time"]]}


def test_a_kind_and_its_arrow_type_are_one_another():
    made = schemas.arrow(NESTED_KIND)
    assert schemas.kind(made) == NESTED_KIND
    assert all(f.nullable for f in made)  # every column optional: a version may drop one
    assert not made.field("scores").type.key_field.nullable


@pytest.mark.parametrize("current, new, merged", [
    ("int", "long", "long"), ("long", "int", "long"), ("float", "double", "double"),
    ("decimal(10,2)", "decimal(12,2)", "decimal(12,2)"),
    ({"struct": [["a", "int"]]}, {"struct": [["a", "long"], ["b", "string"]]},
     {"struct": [["a", "long"], ["b", "string"]]}),
    ({"list": {"struct": [["a", "int"]]}}, {"list": {"struct": [["b", "date"]]}},
     {"list": {"struct": [["a", "int"], ["b", "date"]]}}),
    ({"map": ["string", "int"]}, {"map": ["string", "long"]}, {"map": ["string", "long"]}),
    ("long", "string", None), ("long", "double", None), ("decimal(10,2)", "decimal(10,3)", None),
    ({"map": ["string", "int"]}, {"map": ["long", "int"]}, None),
    ({"struct": [["a", "int"]]}, {"list": "int"}, None),
])
def test_promoted_is_what_iceberg_evolves_a_column_into(current, new, merged):
    from kafka_archive.formats import columns

    assert columns.promoted(current, new) == merged
    assert (columns.conflict(current, new, "f") is None) == (merged is not None)


def test_a_conflict_names_the_nested_field_and_both_kinds():
    from kafka_archive.formats import columns

    current = {"struct": [["customer", {"struct": [["tier", "int"]]}]]}
    new = {"struct": [["customer", {"struct": [["tier", "string"]]}]]}
    assert columns.conflict(current, new, "order") == ("order.customer.tier", "int", "string")
    assert columns.shown(NESTED_KIND).startswith("struct<name: string, tags: list<string>, "
                                                 "scores: map<string, double>, ")


def test_json_inference_still_widens_long_to_double_where_iceberg_would_not():
    from kafka_archive.formats import columns

    assert columns.widened("long", "double") == "double"  # a new column of one run's files
    assert columns.promoted("long", "double") is None       # a table's column: never
