"""Typed tables from registered schemas (issue 58) on the real services: Avro, Protobuf and
JSON Schema orders, produced by confluent-kafka's own serializers against the local
Schema Registry (Apicurio), become Iceberg tables whose columns are the schemas' fields,
nested as they nest them, read back by pyiceberg and by Spark SQL (Iceberg's own runtime)
field by nested field. Two Avro schema evolutions evolve the table in their run's own
snapshot; an incompatible version's messages are dead letters whose reason names both
schema ids and the field, and the run goes on; so are a message without the wire format's
header and one whose schema id is another subject's."""

from __future__ import annotations

import json
from datetime import datetime, timezone

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer

from test_backup_archive import consumed
from test_iceberg_tables import by_offset, pipeline_config, spark_reads


from kafka_archive.airflow import connections
from kafka_archive.commit import iceberg
from tests.support import registry_topics
from tests.support.pipeline import GROUP, Pipeline

ORDERS = 12


def version(qty_type: str) -> str:
    """The Avro Order with a `qty` of this type and the customer's optional `tier`: with
    "int" a compatible evolution of the Order (fields added with defaults), with "long" a
    compatible evolution of that (Avro and Iceberg promote int to long), with "string" an
    incompatible one."""
    schema = json.loads(registry_topics.ORDER_AVRO)
    schema["fields"].append({"name": "qty", "type": qty_type,
                             "default": "1" if qty_type == "string" else 1})
    schema["fields"][2]["type"]["fields"].append(
        {"name": "tier", "type": ["null", "string"], "default": None})
    return json.dumps(schema)


def test_registered_topics_become_typed_tables_that_evolve_with_their_schemas(
        airflow_env, kafka, s3, schema_registry, unique, tmp_path, monkeypatch):
    catalog_db = tmp_path / "catalog.db"
    p = f"typed{unique}"
    pipeline = Pipeline(
        airflow_env, kafka, s3, p, tmp_path,
        group_extra=("layout: {kind: event_time, granularity: hour}\n"
                     "parser: {kind: avro, field: at}\nformat: {kind: parquet}\n"
                     f"topic_parsers: {{{p}-proto: {{kind: protobuf, field: at}}, "
                     f"{p}-json: {{kind: json_schema, field: at}}}}\n"
                     "table: {namespace: archive}\n"),
        extra=(f"iceberg_catalogs: {{local: {{type: sql, uri: 'sqlite:///{catalog_db}'}}}}\n"
               f"schema_registry: {{url: '{schema_registry}'}}\n"))
    topics = {"avro": pipeline.create_topic("avro", 2), "protobuf": pipeline.create_topic("proto", 1),
              "json_schema": pipeline.create_topic("json", 1)}
    now = datetime.now(timezone.utc).replace(microsecond=0)
    orders: dict[tuple[str, int], dict] = {}  # (topic, id) -> what the table must hold
    messages = []
    for kind, topic in topics.items():
        serialize = registry_topics.serializer(kind, schema_registry)
        for i in range(ORDERS):
            changes = {"id": i, "customer": {"name": f"c{i}", "vip": i % 3 == 0},
                       "items": [f"item{j}" for j in range(i % 4)],
                       "labels": {"shard": str(i % 2)}, "note": f"n{i}" if i % 2 else None}
            value = serialize(registry_topics.order(kind, now, **changes),
                              registry_topics.value_context(topic))
            orders[(topic, i)] = changes
            messages.append((topic, i % 2 if kind == "avro" else 0, None, value, []))
    messages.append((topics["avro"], 0, None, b'{"id": 99}', []))  # JSON sneaked in
    pipeline.produce(messages)
    pipeline.in_env(monkeypatch)  # (the test reads the archive in this process)
    pipeline.run("first")

    tables = connections.iceberg_tables(pipeline_config(pipeline))
    for kind, topic in topics.items():
        table = tables.find(GROUP, topic)
        assert {f.name: iceberg.column_type(f) for f in table.schema().fields[2:]} == {
            "id": "long", "at": "timestamp",
            "customer": {"struct": [["name", "string"], ["vip", "boolean"]]},
            "items": {"list": "string"}, "labels": {"map": ["string", "string"]},
            "status": "string", "note": "string"}, kind
        rows = by_offset(table)
        assert len(rows) == ORDERS, kind
        for row in rows.values():
            expected = orders[(topic, row["id"])]
            assert (row["customer"], row["items"], dict(row["labels"]), row["note"],
                    row["status"], row["at"], row["event_time"]) == (
                expected["customer"], expected["items"], expected["labels"], expected["note"],
                "PAID", now, now), kind
    (letter,) = by_offset(tables.find(GROUP, topics["avro"], dead_letters=True)).values()
    assert letter["value"] == b'{"id": 99}' and "no Confluent wire-format header" in letter["reason"]

    # two evolutions (a field with a default and a nested optional field; then int to
    # long) and one break (that field as text), allowed by the subject's compatibility
    client = SchemaRegistryClient({"url": schema_registry})
    subject = f"{topics['avro']}-value"
    context = registry_topics.value_context(topics["avro"])
    base = {**registry_topics.ORDER, "at": now}
    v2 = AvroSerializer(client, version("int"))(
        {**base, "id": 100, "qty": 3, "customer": {"name": "Bo", "vip": False, "tier": "gold"}},
        context)
    v3 = AvroSerializer(client, version("long"))({**base, "id": 101, "qty": 2 ** 40,
                                                  "customer": {"name": "Cy", "vip": True}}, context)
    client.set_compatibility(subject, "NONE")
    v4 = AvroSerializer(client, version("string"))({**base, "id": 102, "qty": "many",
                                                    "customer": {"name": "Di", "vip": True}},
                                                   context)
    v2_id, v3_id, v4_id = (int.from_bytes(v[1:5], "big") for v in (v2, v3, v4))
    # a producer that writes another topic's schema: the value decodes, but it is not an order
    payment = AvroSerializer(client, json.dumps(
        {"type": "record", "name": "Payment", "namespace": "shop",
         "fields": [{"name": "id", "type": "long"},
                    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}))(
        {"id": 5, "at": now}, registry_topics.value_context(f"{p}-payments"))
    pipeline.produce([(topics["avro"], 0, None, v, []) for v in (v2, v3, v4, payment)])
    pipeline.run("second")

    table = tables.find(GROUP, topics["avro"])
    assert iceberg.column_type(table.schema().find_field("qty")) == "long"
    assert iceberg.column_type(table.schema().find_field("customer")) == {
        "struct": [["name", "string"], ["vip", "boolean"], ["tier", "string"]]}
    snapshots = table.metadata.snapshots
    assert [s.summary[iceberg.RUN_ID] for s in snapshots] == ["first", "second"]
    # the new columns came with the rows: the first snapshot's schema lacks them
    assert snapshots[0].schema_id != snapshots[1].schema_id == table.metadata.current_schema_id
    rows = {r["id"]: r for r in by_offset(table).values()}
    assert (rows[100]["qty"], rows[100]["customer"]["tier"], rows[101]["qty"]) == (3, "gold", 2 ** 40)
    assert rows[0]["qty"] is None and 102 not in rows
    letters = {r["value"]: r for r in by_offset(tables.find(GROUP, topics["avro"],
                                                            dead_letters=True)).values()}
    assert (f"schema id {v4_id} has field qty as string, where schema id {v3_id} has it as "
            "long: Iceberg cannot evolve one into the other") in letters[v4]["reason"]
    assert (letters[v4]["kafka"]["topic"], letters[v4]["kafka"]["partition"]) == (topics["avro"], 0)
    assert (f"schema id {int.from_bytes(payment[1:5], 'big')} is not a version of subject "
            f"{subject}") in letters[payment]["reason"]
    every = consumed(kafka, list(topics.values()))
    held = sum(len(by_offset(tables.find(GROUP, t, dead_letters=d)))
               for t in topics.values() for d in (False, True)
               if tables.find(GROUP, t, dead_letters=d) is not None)
    assert held == len(every) == 3 * ORDERS + 5  # each message in one table: none lost

    # an independent engine, field by nested field
    nested = ("to_json(named_struct('id', id, 'name', customer.name, 'vip', customer.vip, "
              "'items', items, 'shard', labels['shard'], 'at', date_format(at, "
              "'yyyy-MM-dd HH:mm:ss')))")
    read = spark_reads(pipeline, f"jdbc:sqlite:{catalog_db}",
                       {t: nested for t in topics.values()}, tmp_path, {})
    for kind, topic in topics.items():
        got = {json.loads(v)["id"]: json.loads(v) for _, _, v in read[topic]["rows"]}
        assert got == {i: {"id": i, "name": orders[(t, i)]["customer"]["name"],
                           "vip": orders[(t, i)]["customer"]["vip"],
                           "items": orders[(t, i)]["items"],
                           "shard": orders[(t, i)]["labels"]["shard"],
                           "at": now.strftime("%Y-%m-%d %H:%M:%S")}
                       for (t, i) in orders if t == topic} | (
            {100: {"id": 100, "name": "Bo", "vip": False, "items": ["pen", "ink"],
                   "at": now.strftime("%Y-%m-%d %H:%M:%S")},  # no shard label: null, left out
             101: {"id": 101, "name": "Cy", "vip": True, "items": ["pen", "ink"],
                   "at": now.strftime("%Y-%m-%d %H:%M:%S")}}
            if kind == "avro" else {}), kind
