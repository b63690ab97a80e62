"""The local Schema Registry (Apicurio, through its Confluent-compatible API) with
confluent-kafka's own client: Avro, Protobuf and JSON Schema values round-trip through a
real Kafka topic in the Confluent wire format, and an incompatible schema is refused, as
Confluent's default (BACKWARD) refuses it."""

from __future__ import annotations

import struct
from datetime import datetime, timezone

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
from google.protobuf.json_format import MessageToDict

from tests.support import registry_topics

AT = datetime(2026, 11, 29, 9, 30, tzinfo=timezone.utc)


def read_back(kind: str, client: SchemaRegistryClient, data: bytes, topic: str) -> dict:
    context = registry_topics.value_context(topic)
    if kind == "avro":
        return AvroDeserializer(client)(data, context)
    if kind == "json_schema":
        return JSONDeserializer(None, schema_registry_client=client)(data, context)
    message = ProtobufDeserializer(registry_topics.order_message_class(),
                                   {"use.deprecated.format": False})(data, context)
    return MessageToDict(message, preserving_proto_field_name=True)


@pytest.mark.parametrize("kind", ["avro", "protobuf", "json_schema"])
def test_values_round_trip_through_kafka_in_the_wire_format(kind, schema_registry, kafka,
                                                            unique):
    topic = f"sr-{kind}-{unique}"
    admin = AdminClient({"bootstrap.servers": kafka})  # held: its futures need it alive
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result()
    data = registry_topics.serializer(kind, schema_registry)(
        registry_topics.order(kind, AT), registry_topics.value_context(topic))
    magic, schema_id = struct.unpack(">bI", data[:5])
    assert magic == 0 and schema_id > 0
    producer = Producer({"bootstrap.servers": kafka})
    producer.produce(topic, value=data)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": kafka, "group.id": topic,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    message = consumer.poll(30)
    consumer.close()
    assert message is not None and message.error() is None and message.value() == data

    client = SchemaRegistryClient({"url": schema_registry})
    back = read_back(kind, client, message.value(), topic)
    if kind == "protobuf":  # proto3: ids as text (JSON mapping), no null note
        present = {k: v for k, v in registry_topics.ORDER.items() if v is not None}
        assert back == {**present, "id": "7",
                        "at": "2026-11-29T09:30:00Z"}
    else:
        assert back == {**registry_topics.ORDER, "at": AT if kind == "avro" else AT.isoformat()}
    assert client.get_schema(schema_id).schema_type == {
        "avro": "AVRO", "protobuf": "PROTOBUF", "json_schema": "JSON"}[kind]


def test_an_incompatible_schema_is_refused_and_a_compatible_one_registered(schema_registry,
                                                                            unique):
    client = SchemaRegistryClient({"url": schema_registry})
    subject = f"sr-evolve-{unique}-value"
    first = client.register_schema(subject, Schema(registry_topics.ORDER_AVRO, "AVRO"))
    with_default = registry_topics.ORDER_AVRO.replace(
        '{"name": "id", "type": "long"},',
        '{"name": "id", "type": "long"}, {"name": "shop", "type": "string", "default": "main"},')
    retyped = registry_topics.ORDER_AVRO.replace('{"name": "id", "type": "long"}',
                                                 '{"name": "id", "type": "string"}')
    assert client.test_compatibility(subject, Schema(with_default, "AVRO"))
    assert not client.test_compatibility(subject, Schema(retyped, "AVRO"))
    second = client.register_schema(subject, Schema(with_default, "AVRO"))
    assert second != first
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(subject, Schema(retyped, "AVRO"))
    assert refused.value.http_status_code == 409


def test_preflights_check_reaches_the_registry_and_names_one_that_does_not(schema_registry):
    from kafka_archive.errors import TransientError
    from kafka_archive.formats import registry

    assert registry.reachable({"url": schema_registry}).startswith(f"{schema_registry}: ")
    with pytest.raises(TransientError, match=r"http://127.0.0.1:9 does not answer"):
        registry.reachable({"url": "http://127.0.0.1:9"})
    wrong = schema_registry.replace("/ccompat/v7", "/nothing")
    with pytest.raises(TransientError, match=f"{wrong} answered 404"):
        registry.reachable({"url": wrong})
