"""The simulation's registry-shaped topics (shape `registry`): Avro values in the Confluent
wire format, written by confluent-kafka's AvroSerializer against its in-memory registry
(`mock://`), read by the library's own avro parser (formats.registry) through that one
registry. Three versions of the value's schema and two kinds of value no table can hold,
by offset, so that each run's files meet them in any order:

- v1 {ts, id}; v2 adds `qty` as an int (a compatible evolution: the table gains it);
- v3 has `qty` as text: whichever of v2 and v3 sets the column first, the other's
  messages are dead letters naming both schema ids and the field (formats.schemas.fit);
- a schema id the registry does not know, and a value that is not Avro at all.

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
                                                   "default": ""}]}}
TOPICS = ("t", "u", "v", "v_dlq", "t_dlq")  # every topic a sequence may have (world, explore)
UNKNOWN_ID = 99_999
GROUP_SPEC = ("layout: {kind: event_time, granularity: hour}, lateness: 5m, "
              "parser: {kind: 'tests.support.sim.registry:SimAvroParser', field: ts}, "
              "format: {kind: parquet}, table: {namespace: sim}")


@functools.cache
def client() -> SchemaRegistryClient:
    made = SchemaRegistryClient.new_client({"url": "mock://sim"})
    for topic in TOPICS:  # each version's id fixed now, whatever a sequence meets first
        for schema in VERSIONS.values():
            made.register_schema(f"{topic}-value", Schema(json.dumps(schema), "AVRO"))
    return made


@functools.cache
def _serializer(schema: str, topic: str) -> AvroSerializer:
    """One per subject: a serializer keeps the id it found for its first subject."""
    return AvroSerializer(client(), schema)


def version(offset: int) -> str:
    """Which value an offset holds: v1, v2, v3, `unknown` (an id the registry lacks) or
    `not avro`."""
    kind = offset % 13
    return {3: "not avro", 7: "unknown", 5: "v3", 11: "v3"}.get(
        kind, "v2" if offset % 2 else "v1")


def value(topic: str, partition: int, offset: int, event_ms: int) -> bytes:
    which = version(offset)
    if which == "not avro":
        return b"not avro"
    fields = {"ts": event_ms, "id": f"{topic}/{partition}/{offset}"}
    if which in ("v2", "v3"):
        fields["qty"] = offset if which == "v2" else str(offset)
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
    # v2 or v3: only the qty they disagree on, and v1 never (it has no qty)
    return which != "v1" and "has field qty as " in reason and "Iceberg cannot evolve" in reason


class SimAvroParser(parsers.AvroParser):
    """The avro parser, reading the simulation's registry (confluent's in-memory one)."""

    def __init__(self, field, **options):
        super().__init__(field, **options)
        self.decoder = registry.Decoder("avro", {}, client=client())
