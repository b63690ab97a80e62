"""The simulation's registry-shaped topics (shape `registry`): Avro values in the Confluent
wire format, written by confluent-kafka's AvroSerializer against its in-memory registry
(`mock://`), read by the library's own avro parser (formats.registry) through that one
registry. Three versions of the value's schema and two kinds of value no table can hold,
by offset, so that each run's files meet them in any order:

- v1 {ts, id}; v2 adds `qty` as an int (a compatible evolution: the table gains it);
- v3 has `qty` as text: whichever of v2 and v3 sets the column first, the other's
  messages are dead letters naming both schema ids and the field (formats.schemas.fit);
- v4 renames `qty` to `quantity` (an int) with the alias qty: one column holds both
  names' values, named by whichever came first;
- a schema id the registry does not know, a value of a schema only another topic's
  subject holds, and a value that is not Avro at all.

`justified(reason, topic, partition, offset)` is the invariant's half: a dead letter's
reason must be one the message's own bytes explain. Schemas are registered once, in a
fixed order, so their ids are the same in every process and every sequence."""

from __future__ import annotations

import functools
import json

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from kafka_archive.formats import parsers, registry

V1 = {"type": "record", "name": "Event", "namespace": "sim", "fields": [
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "id", "type": "string"}]}
VERSIONS = {"v1": V1,
            "v2": {**V1, "fields": [*V1["fields"], {"name": "qty", "type": "int", "default": 0}]},
            "v3": {**V1, "fields": [*V1["fields"], {"name": "qty", "type": "string",
                                                   "default": ""}]},
            "v4": {**V1, "fields": [*V1["fields"], {"name": "quantity", "type": "int",
                                                   "default": 0, "aliases": ["qty"]}]}}
FOREIGN = {**V1, "name": "Other"}  # registered under another topic's subject only
TOPICS = ("t", "u", "v", "v_dlq", "t_dlq")  # every topic a sequence may have (world, explore)
UNKNOWN_ID = 99_999
GROUP_SPEC = ("layout: {kind: event_time, granularity: hour}, lateness: 5m, "
              "parser: {kind: 'tests.support.sim.registry:SimAvroParser', field: ts}, "
              "format: {kind: parquet}, table: {namespace: sim, keep_snapshots: 0}")


@functools.cache
def client() -> SchemaRegistryClient:
    made = SchemaRegistryClient.new_client({"url": "mock://sim"})
    for topic in TOPICS:  # each version's id fixed now, whatever a sequence meets first
        for schema in VERSIONS.values():
            made.register_schema(f"{topic}-value", Schema(json.dumps(schema), "AVRO"))
    made.register_schema("elsewhere-value", Schema(json.dumps(FOREIGN), "AVRO"))
    return made


@functools.cache
def _serializer(schema: str, topic: str) -> AvroSerializer:
    """One per subject: a serializer keeps the id it found for its first subject."""
    return AvroSerializer(client(), schema)


def version(offset: int) -> str:
    """Which value an offset holds: v1 to v4, `unknown` (an id the registry lacks),
    `foreign` (another subject's schema) or `not avro`."""
    kind = offset % 13
    return {3: "not avro", 7: "unknown", 5: "v3", 11: "v3", 10: "v4", 1: "foreign"}.get(
        kind, "v2" if offset % 2 else "v1")


def value(topic: str, partition: int, offset: int, event_ms: int) -> bytes:
    which = version(offset)
    if which == "not avro":
        return b"not avro"
    fields = {"ts": event_ms, "id": f"{topic}/{partition}/{offset}"}
    if which in ("v2", "v3", "v4"):
        fields["quantity" if which == "v4" else "qty"] = str(offset) if which == "v3" else offset
    if which == "foreign":
        return _serializer(json.dumps(FOREIGN), "elsewhere")(
            fields, SerializationContext("elsewhere", MessageField.VALUE))
    context = SerializationContext(topic, MessageField.VALUE)
    written = _serializer(json.dumps(VERSIONS["v1" if which == "unknown" else which]), topic)(
        fields, context)
    if which == "unknown":
        return written[:1] + UNKNOWN_ID.to_bytes(4, "big") + written[5:]
    return written


def justified(reason: str, offset: int) -> bool:
    """Whether a dead letter's reason is one the message's bytes explain."""
    which = version(offset)
    if which == "not avro":
        return "no Confluent wire-format header" in reason
    if which == "unknown":
        return f"schema id {UNKNOWN_ID} is not in the Schema Registry" in reason
    if which == "foreign":
        return "is not a version of subject" in reason and "a value of another subject" in reason
    # v2, v3 or v4: only the qty they disagree on (whichever name its column has), and
    # v1 never (it has no qty)
    field = "quantity" if which == "v4" else "qty"
    return which != "v1" and any(f"has field {field}{column} as " in reason for column in (
        "", " (column qty, the same field)", " (column quantity, the same field)")) \
        and "Iceberg cannot evolve" in reason


class SimAvroParser(parsers.AvroParser):
    """The avro parser, reading the simulation's registry (confluent's in-memory one)."""

    def __init__(self, field, **options):
        super().__init__(field, **options)
        self.decoder = registry.Decoder("avro", {}, client=client())
