"""Topics in the Confluent wire format, produced as their producers would: through
confluent-kafka's own serializers against the local Schema Registry. One message type per
format, the same fields in each: an order with a nested customer, a list of items, a map
of labels, an enum, an optional note and an event time."""

from __future__ import annotations

import functools
from datetime import datetime

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

ORDER_AVRO = """{
  "type": "record", "name": "Order", "namespace": "shop",
  "fields": [
    {"name": "id", "type": "long"},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "customer", "type": {"type": "record", "name": "Customer", "fields": [
      {"name": "name", "type": "string"}, {"name": "vip", "type": "boolean"}]}},
    {"name": "items", "type": {"type": "array", "items": "string"}},
    {"name": "labels", "type": {"type": "map", "values": "string"}},
    {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
    {"name": "note", "type": ["null", "string"], "default": null}
  ]
}"""

ORDER_JSON_SCHEMA = """{
  "$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "type": "object",
  "properties": {
    "id": {"type": "integer"},
    "at": {"type": "string", "format": "date-time"},
    "customer": {"type": "object", "properties": {"name": {"type": "string"},
                                                  "vip": {"type": "boolean"}},
                 "required": ["name", "vip"]},
    "items": {"type": "array", "items": {"type": "string"}},
    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
    "status": {"type": "string", "enum": ["NEW", "PAID"]},
    "note": {"type": ["string", "null"]}
  },
  "required": ["id", "at", "customer", "items", "labels", "status"]
}"""


@functools.cache  # one class: a message of another build of it is another type
def order_message_class(renamed: tuple[tuple[str, str], ...] = (),
                        added: tuple[tuple[str, int], ...] = ()):
    """The Protobuf Order message (package shop), built at run time from its descriptor
    (what protoc would generate), with google.protobuf.Timestamp for its time; a later
    version of it with fields `renamed` ((old, new) names, the same numbers) and string
    fields `added` ((name, number))."""
    from google.protobuf import timestamp_pb2

    proto = descriptor_pb2.FileDescriptorProto(name="shop/order.proto", package="shop",
                                               syntax="proto3",
                                               dependency=["google/protobuf/timestamp.proto"])
    F = descriptor_pb2.FieldDescriptorProto
    customer = proto.message_type.add(name="Customer")
    customer.field.add(name="name", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    customer.field.add(name="vip", number=2, type=F.TYPE_BOOL, label=F.LABEL_OPTIONAL)
    proto.enum_type.add(name="Status").value.extend([
        descriptor_pb2.EnumValueDescriptorProto(name="NEW", number=0),
        descriptor_pb2.EnumValueDescriptorProto(name="PAID", number=1)])
    order = proto.message_type.add(name="Order")
    labels = order.nested_type.add(name="LabelsEntry")
    labels.options.map_entry = True
    labels.field.add(name="key", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    labels.field.add(name="value", number=2, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    order.field.add(name="id", number=1, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    order.field.add(name="at", number=2, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                    type_name=".google.protobuf.Timestamp")
    order.field.add(name="customer", number=3, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                    type_name=".shop.Customer")
    order.field.add(name="items", number=4, type=F.TYPE_STRING, label=F.LABEL_REPEATED)
    order.field.add(name="labels", number=5, type=F.TYPE_MESSAGE, label=F.LABEL_REPEATED,
                    type_name=".shop.Order.LabelsEntry")
    order.field.add(name="status", number=6, type=F.TYPE_ENUM, label=F.LABEL_OPTIONAL,
                    type_name=".shop.Status")
    order.field.add(name="note", number=7, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL,
                    proto3_optional=True, oneof_index=0)
    order.oneof_decl.add(name="_note")
    for field in order.field:
        field.name = dict(renamed).get(field.name, field.name)
    for name, number in added:
        order.field.add(name=name, number=number, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(descriptor_pb2.FileDescriptorProto.FromString(
        timestamp_pb2.DESCRIPTOR.serialized_pb).SerializeToString())
    pool.AddSerializedFile(proto.SerializeToString())
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))


ORDER = {"id": 7, "customer": {"name": "Ada", "vip": True}, "items": ["pen", "ink"],
         "labels": {"channel": "web"}, "status": "PAID", "note": None}


def order(kind: str, at: datetime, **changes):
    """An order (ORDER with `changes`) at time `at`, as this format's serializer takes it:
    a dict (Avro: the time a datetime; JSON Schema: ISO text) or a Protobuf message."""
    fields = {**ORDER, **changes}
    if kind == "avro":
        return {**fields, "at": at}
    if kind == "json_schema":
        return {**fields, "at": at.isoformat()}
    message = order_message_class()(**{k: v for k, v in fields.items() if v is not None})
    message.at.FromDatetime(at)
    return message


def serializer(kind: str, registry: str | SchemaRegistryClient):
    """A value serializer of the Order type in this format (the registry by URL, or a
    client: confluent's mock), registering its schema under the topic's value subject
    (TopicNameStrategy) on first use."""
    # a timeout: confluent's client has none, and a registry that stops answering hung a
    # test for 20 minutes at its first GET
    client = (SchemaRegistryClient({"url": registry, "timeout": 60}) if isinstance(registry, str)
              else registry)
    if kind == "avro":
        return AvroSerializer(client, ORDER_AVRO)
    if kind == "json_schema":
        return JSONSerializer(ORDER_JSON_SCHEMA, client)
    if kind == "protobuf":
        return ProtobufSerializer(order_message_class(), client,
                                  {"use.deprecated.format": False})
    raise ValueError(kind)


def value_context(topic: str) -> SerializationContext:
    return SerializationContext(topic, MessageField.VALUE)
