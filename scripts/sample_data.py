"""Produce a little sample data for the demo: JSON log lines on two topics, some keyed,
some with headers, one tombstone; with --avro, Avro orders (nested customer, a list of
items, a decimal amount, an event time) in the Confluent wire format, their schema
registered in the Schema Registry at that URL, as a producer with confluent-kafka's
serializer writes them.

    .venv/bin/python scripts/sample_data.py BOOTSTRAP [COUNT] [--avro REGISTRY_URL]
"""

import argparse
import json
import time
from datetime import datetime, timezone
from decimal import Decimal

from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic

TOPICS = {"demo.orders": 4, "demo.clicks": 2}
AVRO_TOPIC = "demo.avro.orders"
ORDER = {
    "type": "record", "name": "Order", "namespace": "demo",
    "fields": [
        {"name": "order", "type": "long"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "customer", "type": {"type": "record", "name": "Customer", "fields": [
            {"name": "name", "type": "string"},
            {"name": "tier", "type": {"type": "enum", "name": "Tier",
                                      "symbols": ["FREE", "PRO"]}}]}},
        {"name": "items", "type": {"type": "array", "items": "string"}},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal",
                                    "precision": 10, "scale": 2}},
        {"name": "coupon", "type": ["null", "string"], "default": None},
    ]}


def create(bootstrap: str, topics: dict[str, int]) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    missing = [NewTopic(t, n, 1) for t, n in topics.items() if t not in admin.list_topics()]
    if missing:
        admin.create_topics(missing)
    admin.close()


def produce_json(bootstrap: str, count: int) -> None:
    create(bootstrap, TOPICS)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=10)
    for i in range(count):
        now = time.time()
        producer.send("demo.orders", key=f"customer-{i % 17}".encode(),
                      value=json.dumps({"ts": now, "order": i, "amount_cents": 100 + i}).encode(),
                      headers=[("source", b"demo")])
        producer.send("demo.clicks", value=json.dumps({"ts": now, "page": f"/p/{i % 5}"}).encode())
    producer.send("demo.orders", key=b"customer-0", value=None)  # a tombstone
    producer.flush()
    producer.close()
    print(f"produced {2 * count + 1} messages to {', '.join(TOPICS)}")


def produce_avro(bootstrap: str, count: int, registry_url: str) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    create(bootstrap, {AVRO_TOPIC: 2})
    serialize = AvroSerializer(SchemaRegistryClient({"url": registry_url}), json.dumps(ORDER))
    context = SerializationContext(AVRO_TOPIC, MessageField.VALUE)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 10})
    for i in range(count):
        order = {"order": i, "at": datetime.now(timezone.utc),
                 "customer": {"name": f"customer-{i % 17}", "tier": "PRO" if i % 5 else "FREE"},
                 "items": [f"sku-{j}" for j in range(i % 3 + 1)],
                 "amount": Decimal(100 + i) / 100, "coupon": "WELCOME" if i % 7 == 0 else None}
        producer.produce(AVRO_TOPIC, key=f"customer-{i % 17}".encode(),
                         value=serialize(order, context))
    producer.flush()
    print(f"produced {count} Avro orders to {AVRO_TOPIC} (schema registered at {registry_url})")


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    args.add_argument("bootstrap")
    args.add_argument("count", type=int, nargs="?", default=500)
    args.add_argument("--avro", metavar="REGISTRY_URL", help="Avro orders instead")
    opts = args.parse_args()
    if opts.avro:
        produce_avro(opts.bootstrap, opts.count, opts.avro)
    else:
        produce_json(opts.bootstrap, opts.count)


if __name__ == "__main__":
    main()
