"""Benchmark of typed tables (issue 58): an Avro topic of realistic nested orders (33
fields, nested records, a list of records, a map, decimals, enums, times) into the group's
typed Iceberg table, beside the same group's run on the same orders as JSON, and beside
the peer: Iceberg's Kafka Connect sink with Apicurio's Avro converter on the same Avro
topic. What `bench.archive --compressions table --format avro` runs.

    .venv/bin/python -m tests.support.bench.typed_tables [--megabytes 512] [--partitions 4]
        [--skip-peer] [--keep]

Against the local services (Kafka, S3, the Schema Registry: started if not running,
stopped after): the orders come from a pool of POOL distinct ones, serialized by
confluent-kafka's AvroSerializer (their schema registered in the local Apicurio) and as
JSON (the same fields; times as ms, decimals as text), produced by librdkafka to two
topics of the same message count. Each archive run is plan, spark-submit, commit
(bench.archive.archive_run: no dead letter allowed), sampled for memory and CPU.

Prints per run the whole run's throughput (payload MiB/s), CPU-s/GiB of payload and per
million messages (the archive's processes and the broker), the bytes written, and the
targets: the Avro table group >= TARGET_PEER x the peer's throughput (whole run), its
CPU-s per message <= TARGET_JSON_CPU x the JSON run's; then both tables' columns side
by side (they must agree on every field the schema has). Registry look-ups per schema id
per task are counted by tests/unit/formats/test_registry.py.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import tempfile
import uuid
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

from tests.support import localservices
from tests.support.bench.archive import (
    CONNECT_PEER, TABLE, archive_run, connect_peer_run, cpu_per_gib, delete_prefix,
    describe_peer, describe_spark, peer_cpu_per_gib, quiet_logging, say, write_config)
from tests.support.bench.kafka_data import MIB, create_topic, delete_topics
from tests.support.bench.processes import uptime

POOL = 20_000
TARGET_PEER = 2.0       # the Avro table group's whole run / the Connect sink's
TARGET_JSON_CPU = 1.5   # the Avro run's CPU per message / the JSON run's
DECIMAL = {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}
ORDER = {
    "type": "record", "name": "Order", "namespace": "bench",
    "fields": [
        {"name": "order_id", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "status", "type": {"type": "enum", "name": "Status",
                                    "symbols": ["NEW", "PAID", "SHIPPED", "CANCELLED"]}},
        {"name": "channel", "type": {"type": "enum", "name": "Channel",
                                     "symbols": ["WEB", "APP", "STORE"]}},
        {"name": "currency", "type": "string"},
        {"name": "subtotal", "type": DECIMAL}, {"name": "tax", "type": DECIMAL},
        {"name": "total", "type": DECIMAL},
        {"name": "customer", "type": {"type": "record", "name": "Customer", "fields": [
            {"name": "id", "type": "long"}, {"name": "email", "type": "string"},
            {"name": "name", "type": "string"},
            {"name": "since", "type": {"type": "int", "logicalType": "date"}},
            {"name": "vip", "type": "boolean"},
            {"name": "address", "type": {"type": "record", "name": "Address", "fields": [
                {"name": "street", "type": "string"}, {"name": "city", "type": "string"},
                {"name": "postcode", "type": "string"}, {"name": "country", "type": "string"},
                {"name": "lat", "type": "double"}, {"name": "lon", "type": "double"}]}}]}},
        {"name": "items", "type": {"type": "array", "items": {
            "type": "record", "name": "Item", "fields": [
                {"name": "sku", "type": "string"}, {"name": "qty", "type": "int"},
                {"name": "unit_price", "type": DECIMAL}]}}},
        {"name": "payment", "type": {"type": "record", "name": "Payment", "fields": [
            {"name": "method", "type": "string"}, {"name": "authorized", "type": "boolean"},
            {"name": "authorized_at", "type": ["null", {"type": "long",
                                                        "logicalType": "timestamp-millis"}],
             "default": None}]}},
        {"name": "labels", "type": {"type": "map", "values": "string"}},
        {"name": "coupon", "type": ["null", "string"], "default": None},
        {"name": "session_id", "type": "string"}, {"name": "user_agent", "type": "string"},
    ]}
CITIES = ["Oslo", "Lisbon", "Dublin", "Krakow", "Turin", "Lyon", "Ghent", "Aarhus"]
AGENTS = ["Mozilla/5.0 (X11; Linux x86_64) Firefox/131.0", "okhttp/4.12.0",
          "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) Safari/604.1"]


def fields(schema: dict) -> int:
    """A record's fields, those of the records (and lists of records) in it too."""
    count = 0
    for f in schema["fields"]:
        count += 1
        kind = f["type"]
        inner = kind.get("items") if isinstance(kind, dict) and kind.get("type") == "array" else kind
        if isinstance(inner, dict) and inner.get("type") == "record":
            count += fields(inner)
    return count


def orders(count: int, seed: int = 58) -> list[dict]:
    """Distinct orders, as Avro's serializer takes them."""
    rng, start = random.Random(seed), datetime(2026, 11, 29, tzinfo=timezone.utc)
    made = []
    for i in range(count):
        items = [{"sku": f"SKU-{rng.randrange(10**6):06d}", "qty": rng.randint(1, 5),
                  "unit_price": Decimal(rng.randrange(100, 50_000)) / 100}
                 for _ in range(rng.randint(1, 4))]
        subtotal = sum(it["unit_price"] * it["qty"] for it in items)
        tax = (subtotal * Decimal("0.2")).quantize(Decimal("0.01"))
        at = start + timedelta(seconds=rng.randrange(86_400))
        city = rng.choice(CITIES)
        made.append({
            "order_id": str(uuid.UUID(int=rng.getrandbits(128))), "at": at,
            "status": rng.choice(["NEW", "PAID", "SHIPPED", "CANCELLED"]),
            "channel": rng.choice(["WEB", "APP", "STORE"]), "currency": "EUR",
            "subtotal": subtotal, "tax": tax, "total": subtotal + tax,
            "customer": {"id": rng.randrange(10**9), "email": f"user{i}@example.com",
                         "name": f"Customer {rng.randrange(10**5)}",
                         "since": (start - timedelta(days=rng.randrange(3000))).date(),
                         "vip": rng.random() < 0.1,
                         "address": {"street": f"{rng.randrange(1, 200)} Main Street",
                                     "city": city, "postcode": f"{rng.randrange(10**5):05d}",
                                     "country": "EU", "lat": rng.uniform(36, 70),
                                     "lon": rng.uniform(-10, 30)}},
            "items": items,
            "payment": {"method": rng.choice(["card", "iban", "wallet"]),
                        "authorized": rng.random() < 0.9,
                        "authorized_at": at + timedelta(seconds=3) if rng.random() < 0.9 else None},
            "labels": {"source": rng.choice(["ads", "mail", "direct"]), "ab": f"b{i % 7}"},
            "coupon": f"SAVE{rng.randrange(50)}" if rng.random() < 0.2 else None,
            "session_id": uuid.UUID(int=rng.getrandbits(128)).hex,
            "user_agent": rng.choice(AGENTS)})
    return made


def as_json(order: dict) -> bytes:
    """The same order as a JSON producer writes it: times as ms, decimals and dates as text."""
    def plain(value):
        if isinstance(value, datetime):
            return int(value.timestamp() * 1000)
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, list):
            return [plain(v) for v in value]
        return value if isinstance(value, (str, int, float, bool, type(None))) else str(value)
    return json.dumps(plain(order), separators=(",", ":")).encode()


def fill(bootstrap: str, topic: str, pool: list[bytes], messages: int, partitions: int) -> int:
    """`messages` values drawn from the pool in a fixed order, produced by librdkafka;
    the payload bytes."""
    from confluent_kafka import Producer

    create_topic(bootstrap, topic, partitions)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 20,
                         "batch.size": 1 << 20, "queue.buffering.max.kbytes": 1 << 20})
    rng, payload = random.Random(7), 0
    for _ in range(messages):
        value = pool[rng.randrange(len(pool))]
        payload += len(value)
        while True:
            try:
                producer.produce(topic, value=value)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    producer.flush()
    return payload


def columns(config_path: Path, topic: str) -> dict[str, str]:
    """Our table's columns, as connect_peer prints the peer's (ids left out)."""
    from kafka_archive import config
    from kafka_archive.airflow import connections
    from tests.support.bench.connect_peer import column_text

    table = connections.iceberg_tables(config.load(config_path)).find("typed", topic)
    return {f.name: column_text(f.field_type) for f in table.schema().fields}


def main(argv: list[str] | None = None) -> int:
    args = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    args.add_argument("--megabytes", type=float, default=512.0, help="of Avro payload")
    args.add_argument("--partitions", type=int, default=4)
    args.add_argument("--skip-peer", action="store_true")
    args.add_argument("--keep", action="store_true")
    opts = args.parse_args(argv)
    env = localservices.local_env()
    started = [n for n in ("kafka", "s3", "schema-registry") if localservices.SERVICES[n].start(env)]
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    work = Path(tempfile.mkdtemp(prefix=f"kafka-archive-bench-typed-{stamp}-"))
    os.environ.update(localservices.client_env(env, work / "airflow-home"))
    os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")
    bootstrap, bucket = localservices.kafka_bootstrap(env), env["KAFKA_ARCHIVE_S3_BUCKET"]
    registry = localservices.schema_registry_url(env)
    topics = {"avro": f"bench-{stamp}-avro", "json": f"bench-{stamp}-json"}
    prefix = f"bench-{stamp}-typed-"
    try:
        from confluent_kafka.schema_registry import SchemaRegistryClient
        from confluent_kafka.schema_registry.avro import AvroSerializer
        from confluent_kafka.serialization import MessageField, SerializationContext

        from kafka_archive.airflow import tasks  # noqa: F401 (imports warm before timing)
        quiet_logging()
        made = orders(POOL)
        serialize = AvroSerializer(SchemaRegistryClient({"url": registry}), json.dumps(ORDER))
        context = SerializationContext(topics["avro"], MessageField.VALUE)
        pools = {"avro": [serialize(o, context) for o in made], "json": [as_json(o) for o in made]}
        mean = sum(map(len, pools["avro"])) / POOL
        messages = int(opts.megabytes * MIB / mean)
        payload = {kind: fill(bootstrap, topics[kind], pools[kind], messages, opts.partitions)
                   for kind in topics}
        say(f"== typed tables benchmark {stamp}: {messages:,} orders ({len(ORDER['fields'])} "
            f"top-level fields, {fields(ORDER)} in all) on {opts.partitions} partitions: Avro "
            f"{payload['avro'] / MIB:,.0f} MiB (mean {mean:,.0f} B), the same as JSON "
            f"{payload['json'] / MIB:,.0f} MiB; uptime: {uptime()}")
        parsers = {"avro": {"kind": "avro", "field": "at"},
                   "json": {"kind": "json", "field": "at", "unit": "ms"}}
        runs, configs = {}, {}
        for kind in ("avro", "json"):
            configs[kind] = write_config(
                work / kind, topics[kind], f"s3://{bucket}/{prefix}{kind}", TABLE, group="typed",
                parser=parsers[kind], top={"schema_registry": {"url": registry}})
            say(f"archive, table group, {kind} values:")
            runs[kind] = archive_run(kind, configs[kind], messages, [], work, group="typed")
            describe_spark(runs[kind], payload[kind])
        peer = None
        if not opts.skip_peer:
            say("peer, Iceberg's Kafka Connect sink with Apicurio's Avro converter:")
            peer = connect_peer_run(bootstrap, topics["avro"], messages, work,
                                    avro_registry=registry.split("/apis/")[0])
            describe_peer(peer, payload["avro"])
        report(runs, peer, payload, messages, columns(configs["avro"], topics["avro"]))
    finally:
        if not opts.keep:
            delete_prefix(localservices.s3_client(env), bucket, prefix)
            delete_topics(bootstrap, list(topics.values()))
            shutil.rmtree(work, ignore_errors=True)
        for name in reversed(started):
            localservices.SERVICES[name].stop()
    return 0


def report(runs: dict, peer, payload: dict[str, int], messages: int,
           ours: dict[str, str]) -> None:
    say("\n== typed tables: whole run (plan, spark-submit, commit)")
    rates = {}
    for kind, run in runs.items():
        seconds = run.plan_s + run.spark.seconds + run.commit_s
        mib = payload[kind] / MIB
        cpu = cpu_per_gib(run.spark, mib)
        per_million = cpu * (mib / 1024) / messages * 1e6
        rates[kind] = (mib / seconds, per_million)
        say(f"  {kind:5} table group: {seconds:6.1f} s, {mib / seconds:6.1f} MiB/s, "
            f"{messages / seconds:9,.0f} msg/s; {cpu:6.1f} CPU-s/GiB, {per_million:6.1f} "
            f"CPU-s per million messages; {run.output_bytes / MIB:,.1f} MiB written")
    if peer is not None:
        mib = payload["avro"] / MIB
        seconds = peer.spark.seconds
        say(f"  {CONNECT_PEER} (Avro): {seconds:6.1f} s, {mib / seconds:6.1f} MiB/s whole "
            f"(without its start-up {mib / peer.query_s:,.1f} MiB/s); "
            f"{peer_cpu_per_gib(peer, mib):6.1f} CPU-s/GiB; {peer.output_bytes / MIB:,.1f} MiB "
            "written")
        ratio = rates["avro"][0] / (mib / seconds)
        say(f"  Avro table group / peer, whole run: {ratio:.2f}x (target >= {TARGET_PEER}x: "
            f"{'met' if ratio >= TARGET_PEER else 'NOT met'})")
        theirs = peer.columns
        say("  columns, ours | the peer's:")
        for name in sorted(set(ours) | set(theirs), key=lambda n: (n not in ours, n)):
            mark = "" if ours.get(name) == theirs.get(name) else "   <- differs"
            say(f"    {name}: {ours.get(name, '-')} | {theirs.get(name, '-')}{mark}")
    cpu_ratio = rates["avro"][1] / rates["json"][1]
    say(f"  Avro / JSON CPU per message: {cpu_ratio:.2f}x (target <= {TARGET_JSON_CPU}x: "
        f"{'met' if cpu_ratio <= TARGET_JSON_CPU else 'NOT met'}); uptime: {uptime()}")


if __name__ == "__main__":
    raise SystemExit(main())
