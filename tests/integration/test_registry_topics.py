"""Topics in the Confluent wire format (issue 58) on the real services: Avro, Protobuf and
JSON Schema orders, produced by confluent-kafka's own serializers against the local
Schema Registry (Apicurio), laid out by their event time in an event-time group whose
parsers read each value by its registered schema (the registry an Airflow connection); values the registry cannot read land
in quarantine with a reason naming the schema id; the backup group keeps every value's
bytes untouched, schema id included, so its replay restores them byte for byte and a
consumer with the registry reads them as before."""

from __future__ import annotations

import json
import random
import time
from datetime import datetime, timezone

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer

from test_backup_archive import consumed
from test_partitioned import HOUR, Archive, laid_out
from test_replay import in_order, new_topic
from test_rewind_cli import cli

from tests.support import registry_topics
from tests.support.pipeline import airflow

GROUPS = """\
orders:
  topics: {{include: ["{p}-.*"]}}
  layout: {{kind: event_time, granularity: hour}}
  parser: {{kind: avro, field: at}}
  topic_parsers:
    "{p}-proto": {{kind: protobuf, field: at}}
    "{p}-json": {{kind: json_schema, field: at, unit: iso8601}}
  lateness: 1h
"""


def test_registry_topics_land_in_their_event_hours_and_unreadable_ones_in_quarantine(
        airflow_env, kafka, s3, schema_registry, unique, tmp_path, monkeypatch):
    p = f"sr{unique}"
    archive = Archive(airflow_env, kafka, s3, p, tmp_path, GROUPS.format(p=p))
    # the registry through an Airflow connection, as a deployment keeps it (its URL the host)
    archive.config_path.write_text(archive.config_path.read_text()
                                   + "schema_registry: {conn_id: shop_registry}\n")
    archive.env["AIRFLOW_CONN_SHOP_REGISTRY"] = json.dumps({"conn_type": "http",
                                                           "host": schema_registry})
    archive.in_env(monkeypatch)
    topics = {"avro": archive.create_topic("avro", 2), "protobuf": archive.create_topic("proto", 1),
              "json_schema": archive.create_topic("json", 1)}
    rng, now = random.Random(58), int(time.time() * 1000)
    event, messages = {}, []
    for kind, topic in topics.items():
        serialize = registry_topics.serializer(kind, schema_registry)
        for i in range(30):
            at = now - rng.randrange(0, 3 * 24 * HOUR)
            moment = datetime.fromtimestamp(at / 1000, timezone.utc)
            value = serialize(registry_topics.order(kind, moment, id=i),
                              registry_topics.value_context(topic))
            event[(topic, value)] = at
            messages.append((topic, i % 2 if kind == "avro" else 0, None, value, now))
    good = next(v for (t, v) in event if t == topics["avro"])
    bad = {b'{"id": 7, "at": 1}': "no Confluent wire-format header",   # JSON sneaked in
           good[:5] + b"\xff\xff\xff\xff": f"schema id {int.from_bytes(good[1:5], 'big')}: ",
           b"\x00\x00\x0f\x42\x3f" + good[5:]: "schema id 999999 is not in the Schema Registry",
           None: "tombstone"}
    messages += [(topics["avro"], 0, b"k", value, now) for value in bad]
    archive.produce_at(messages)
    expected = consumed(kafka, list(topics.values()))
    assert len(expected) == 94

    airflow(archive.env, "dags", "test", "kafka_archive_orders")
    archive.run("backup", "backup-1")

    kept, quarantined, _ = laid_out(archive.files("orders"), event)
    assert len(kept) == len(set(kept)) == len(expected) and set(kept) == expected
    assert set(quarantined) == set(bad)
    for value, reason in bad.items():
        assert reason in quarantined[value], (reason, quarantined[value])
    # the backup group keeps the bytes as produced, schema id included
    assert set(archive.archived_records()) == expected

    # so a replay restores them byte for byte, and a consumer with the registry reads them
    copy = new_topic(kafka, f"copy{p}", 2)  # outside the groups: no loop
    replayed = cli(archive, "replay", "--group", "backup", "--topic", topics["avro"],
                   "--to-topic", copy)
    assert replayed.returncode == 0, replayed.stdout[-2000:] + replayed.stderr[-2000:]
    assert in_order(kafka, copy) == in_order(kafka, topics["avro"])
    read = AvroDeserializer(SchemaRegistryClient({"url": schema_registry}))
    orders = [read(value, registry_topics.value_context(copy))
              for partition in in_order(kafka, copy).values() for _, value, *_ in partition
              if value is not None and value[:1] == b"\x00" and value not in bad]
    assert sorted(o["id"] for o in orders) == list(range(30))
    assert all(o["customer"] == registry_topics.ORDER["customer"] for o in orders)
