"""A table group whose parser reads the Schema Registry (avro, protobuf, json_schema): its
table's columns are the registered schema's, nested as it nests them, from slice writer
to an Iceberg table on a local root and a real SQLite catalog, with confluent-kafka's
serializers against its in-memory registry (`mock://`). A new schema version evolves the
table in the run's own snapshot where Iceberg can; where it cannot, or the schema id is
unknown, the message is a dead letter whose reason names the schema ids and the field."""

from __future__ import annotations

import io
import json
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from kafka_archive import config, layout
from kafka_archive.archive import job, slice_writer
from kafka_archive.commit import iceberg, protocol
from kafka_archive.formats import parquet, registry, schemas
from kafka_archive.formats.records import Record
from kafka_archive.plan.planning import Plan, Slice
from kafka_archive.storage import Storage
from kafka_archive.tokens import LocalTokenStore
from kafka_archive.tools import tables as table_views, verify
from tests.support import registry_topics

GROUP, TOPIC = "shop", "orders"
NOW = datetime(2026, 11, 29, 12, tzinfo=timezone.utc)
AT = datetime(2026, 11, 29, 9, 30, 15, 250000, tzinfo=timezone.utc)

# the Order's versions: v2 adds a field with a default and a nested optional field, v3
# widens that field (int to long), v4 makes it text (no evolution Iceberg can make)
V2_FIELDS = [{"name": "qty", "type": "int", "default": 1}]
V2_CUSTOMER = {"name": "tier", "type": ["null", "string"], "default": None}


def avro_version(qty_type: str | None) -> str:
    schema = json.loads(registry_topics.ORDER_AVRO)
    if qty_type is not None:
        schema["fields"] += [{**V2_FIELDS[0], "type": qty_type,
                              "default": "1" if qty_type == "string" else 1}]
        schema["fields"][2]["type"]["fields"].append(V2_CUSTOMER)
    return json.dumps(schema)


@pytest.fixture
def env(tmp_path):
    path = tmp_path / "kafka-archive.yaml"
    path.write_text(
        f"kafka: {{bootstrap_servers: 127.0.0.1:1}}\narchive_root: file://{tmp_path}/archive\n"
        f"schema_registry: {{url: 'mock://tests'}}\n"
        f"iceberg_catalogs: {{local: {{type: sql, uri: 'sqlite:///{tmp_path}/catalog.db'}}}}\n"
        f"groups:\n  {GROUP}:\n    layout: {{kind: event_time, granularity: hour}}\n"
        f"    parser: {{kind: avro, field: at}}\n    format: {{kind: parquet}}\n"
        f"    topic_parsers: {{proto: {{kind: protobuf, field: at}},"
        f" json: {{kind: json_schema, field: at}}, keyed: {{kind: avro, field: at, key: avro}}}}\n"
        f"    table: {{namespace: archive}}\n")
    cfg = config.load(path)
    client = SchemaRegistryClient.new_client({"url": "mock://tests"})
    return cfg, Storage(), LocalTokenStore(tmp_path / "tokens"), iceberg.Tables(cfg), client


def archive(env, run_id: str, topic: str, values: list | dict[int, list]) -> Plan:
    """What the job does for a plan of one slice per partition (values of partition 0, or
    {partition: values}; a value alone, or a (key, value) pair: a value alone has key
    b"k"): the slice writer's files (its parser reading the test's registry), made to
    agree as the job makes them (job._agreeing), and the manifest."""
    cfg, storage, tokens, tables, client = env
    by_partition = values if isinstance(values, dict) else {0: values}
    current = tokens.read(GROUP, topic)
    starts = {p: current.token.offsets.get(p, 0) if current.token else 0 for p in by_partition}
    pieces = tuple(Slice(topic, p, starts[p], starts[p] + len(v), 1 << 30)
                   for p, v in by_partition.items())
    plan = Plan(group=GROUP, run_id=run_id, created_at=NOW.isoformat(), bootstrap="127.0.0.1:1",
                generation=1, format={"kind": "parquet"}, slices=pieces,
                token_versions={topic: current.version},
                token_runs={topic: current.token.run_id if current.token else None},
                base_offsets={topic: {str(p): o for p, o in current.token.offsets.items()}
                              if current.token else {}},
                columns={topic: tables.columns(GROUP, topic)},
                column_origins={topic: tables.column_origins(GROUP, topic)},
                column_identities={topic: tables.column_identities(GROUP, topic)})

    def archived(plan: Plan, slices: list[Slice]) -> list[dict]:
        target = job.target(cfg, plan, topic)
        target.parser.decoder = registry.Decoder(target.parser.kind, {}, client=client)
        if target.parser.key_decoder is not None:
            target.parser.key_decoder = registry.Decoder("avro", {}, client=client, part="key")
        made = []
        for piece in slices:
            out = slice_writer.OpenSlice(target, piece.partition, piece.start, piece.end,
                                         piece.max_bytes)
            for offset, value in enumerate(by_partition[piece.partition], piece.start):
                key, value = value if isinstance(value, tuple) else (b"k", value)
                out.add(Record(offset, key, value, int(AT.timestamp() * 1000), []))
            made.append(out.finish(storage))
        return made

    rows = job._agreeing(archived, plan, list(pieces), archived(plan, list(pieces)), storage)
    storage.put_bytes(layout.run_file(cfg.archive_root, GROUP, run_id, "plan.json"),
                      plan.to_json())
    storage.put_bytes(layout.run_file(cfg.archive_root, GROUP, run_id, "manifest.json"),
                      json.dumps({"run_id": run_id, "slices": rows}).encode())
    return plan


def commit(env, plan: Plan) -> dict:
    cfg, storage, tokens, tables, _ = env
    return protocol.commit(cfg, plan, storage, tokens, NOW, tables)


def written(env, kind: str, topic: str, **changes) -> bytes:
    serialize = registry_topics.serializer(kind, env[4])
    return serialize(registry_topics.order(kind, AT, **changes),
                     registry_topics.value_context(topic))


def avro(env, schema: str, **changes) -> bytes:
    order = {**registry_topics.ORDER, "at": AT, **changes}
    return AvroSerializer(env[4], schema)(order, registry_topics.value_context(TOPIC))


def rows(table) -> list[dict]:
    return sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["kafka"]["offset"])


def letters(env, topic: str = TOPIC) -> list[dict]:
    return rows(env[3].find(GROUP, topic, dead_letters=True))


@pytest.mark.parametrize("kind, topic", [("avro", TOPIC), ("protobuf", "proto"),
                                         ("json_schema", "json")])
def test_the_schemas_fields_are_the_tables_columns_nested_as_it_nests_them(env, kind, topic):
    cfg, storage, tokens, tables, _ = env
    summary = commit(env, archive(env, "r1", topic, [written(env, kind, topic),
                                                     written(env, kind, topic, note="gift")]))
    assert summary["records"] == 2 and summary["quarantined"] == 0
    t = tables.find(GROUP, topic)
    assert {f.name: iceberg.column_type(f) for f in t.schema().fields[2:]} == {
        "id": "long", "at": "timestamp",
        "customer": {"struct": [["name", "string"], ["vip", "boolean"]]},
        "items": {"list": "string"}, "labels": {"map": ["string", "string"]},
        "status": "string", "note": "string"}
    shown = table_views.render([table_views.describe(tables, GROUP, topic)])
    assert ("columns: id long, at timestamp, customer struct<name: string, vip: boolean>, "
            "items list<string>, labels map<string, string>, status string, note string"
            ) in shown  # what `kafka-archive tables` prints
    got = rows(t)
    assert [r["note"] for r in got] == [None, "gift"]
    first = got[0]
    assert (first["id"], first["customer"], first["items"], dict(first["labels"]),
            first["status"], first["at"], first["event_time"]) == (
        7, {"name": "Ada", "vip": True}, ["pen", "ink"], {"channel": "web"}, "PAID", AT, AT)
    report = verify.verify_group(cfg, GROUP, storage, tokens, files=True, tables=tables)
    assert not report.errors(), report.render()


def test_new_versions_evolve_the_table_in_their_runs_snapshot_and_a_break_is_a_dead_letter(env):
    cfg, storage, tokens, tables, client = env
    commit(env, archive(env, "r1", TOPIC, [avro(env, avro_version(None))]))
    v2 = avro(env, avro_version("int"), qty=3,
              customer={"name": "Bo", "vip": False, "tier": "gold"})
    commit(env, archive(env, "r2", TOPIC, [avro(env, avro_version(None)), v2]))
    t = tables.find(GROUP, TOPIC)
    assert str(t.schema().find_field("qty").field_type) == "int"
    assert [f.name for f in t.schema().find_field("customer").field_type.fields] == [
        "name", "vip", "tier"]
    assert [s.summary[iceberg.RUN_ID] for s in t.metadata.snapshots] == ["r1", "r2"]
    # the table as r1 left it still reads, without the new columns
    assert "qty" not in t.scan(snapshot_id=t.metadata.snapshots[0].snapshot_id).to_arrow().column_names
    v3 = avro(env, avro_version("long"), qty=2 ** 40)
    v4 = avro(env, avro_version("string"), qty="many")
    v2_id, v3_id, v4_id = (client.get_latest_version(f"{TOPIC}-value").schema_id - i
                           for i in (2, 1, 0))
    commit(env, archive(env, "r3", TOPIC, [v3, v4, v2, b"\x00\x00\x00\x03\xe7\x02"]))
    t = tables.find(GROUP, TOPIC)
    assert str(t.schema().find_field("qty").field_type) == "long"
    got = rows(t)
    assert [(r["kafka"]["offset"], r["qty"], r["customer"]["tier"]) for r in got] == [
        (0, None, None), (1, None, None), (2, 3, "gold"), (3, 2 ** 40, None), (5, 3, "gold")]
    dead = letters(env)
    assert [r["kafka"]["offset"] for r in dead] == [4, 6]
    # v4's qty cannot join the long the table has now: both schemas and the field named
    assert (f"schema id {v4_id} has field qty as string, where schema id {v3_id} has it as "
            "long: Iceberg cannot evolve one into the other") in dead[0]["reason"]
    origins = iceberg.column_origins(t)
    assert (origins["qty"], origins["customer"], origins["id"]) == (
        f"schema id {v3_id}", f"schema id {v2_id}", f"schema id {v2_id - 1}")
    assert "schema id 999 is not in the Schema Registry" in dead[1]["reason"]
    assert dead[0]["value"] == v4  # the message whole, schema id and all
    report = verify.verify_group(cfg, GROUP, storage, tokens, files=True, tables=tables)
    assert not report.errors(), report.render()


def test_a_conflict_with_the_tables_column_names_the_schema_id_that_made_it(env):
    commit(env, archive(env, "r1", TOPIC, [avro(env, avro_version("long"), qty=1)]))
    first = env[4].get_latest_version(f"{TOPIC}-value").schema_id
    commit(env, archive(env, "r2", TOPIC, [avro(env, avro_version("string"), qty="x")]))
    (dead,) = letters(env)
    assert (f"schema id {first + 1} has field qty as string, where schema id {first} has it "
            "as long") in dead["reason"]
    assert rows(env[3].find(GROUP, TOPIC))[0]["qty"] == 1


@pytest.mark.parametrize("name", ["kafka", "event_time"])
def test_a_field_named_as_the_tables_own_columns_is_a_dead_letter(env, name):
    schema = json.loads(registry_topics.ORDER_AVRO)
    schema["fields"].append({"name": name, "type": "string", "default": ""})
    commit(env, archive(env, "r1", TOPIC, [avro(env, json.dumps(schema), **{name: "x"})]))
    (dead,) = letters(env)
    assert f"has field '{name}', the name of the table's own column {name}" in dead["reason"]


def test_a_union_of_records_is_a_dead_letter_naming_the_schema_id(env):
    schema = json.loads(registry_topics.ORDER_AVRO)
    schema["fields"].append({"name": "pay", "type": [
        {"type": "record", "name": "Card", "fields": [{"name": "n", "type": "string"}]},
        {"type": "record", "name": "Cash", "fields": [{"name": "c", "type": "long"}]}]})
    commit(env, archive(env, "r1", TOPIC, [avro(env, json.dumps(schema), pay={"c": 5})]))
    (dead,) = letters(env)
    assert "has no table shape: pay is a union of shop.Card, shop.Cash" in dead["reason"] \
        or "has no table shape: pay is a union of Card, Cash" in dead["reason"]


def test_files_of_two_versions_concatenate_into_the_evolved_shape(env):
    """A compaction's input: a file of v2 (qty int) and one of v3 (qty long, no tier)."""
    cfg, storage, tokens, tables, _ = env
    commit(env, archive(env, "r1", TOPIC, [avro(env, avro_version("int"), qty=3)]))
    commit(env, archive(env, "r2", TOPIC, [avro(env, avro_version("long"), qty=2 ** 40)]))
    t = tables.find(GROUP, TOPIC)
    paths = sorted(iceberg.current_files(t, []))
    out = io.BytesIO()
    count, found = parquet.concatenate([storage.get_bytes(p) for p in paths], out)
    merged = pq.read_table(pa.BufferReader(out.getvalue()))
    assert count == 2 and merged.column("qty").to_pylist() == [3, 2 ** 40]
    assert merged.schema.field("qty").type == pa.int64()
    assert dict(found)["qty"] == "long"


KEY_AVRO = json.dumps({"type": "record", "name": "OrderKey", "namespace": "shop",
                       "fields": [{"name": "region", "type": "string"},
                                  {"name": "n", "type": "int"}]})


def test_a_registered_key_is_a_column_of_its_own(env):
    cfg, storage, tokens, tables, client = env
    keys = AvroSerializer(client, KEY_AVRO)
    key_context = SerializationContext("keyed", MessageField.KEY)
    value = written(env, "avro", "keyed")
    commit(env, archive(env, "r1", "keyed", [
        (keys({"region": "eu", "n": 1}, key_context), value), (None, value),
        (b"plain text", value)]))
    t = tables.find(GROUP, "keyed")
    assert iceberg.column_type(t.schema().find_field("key")) == {
        "struct": [["region", "string"], ["n", "int"]]}
    (row,) = rows(t)
    assert row["key"] == {"region": "eu", "n": 1} and row["id"] == 7
    dead = letters(env, "keyed")
    assert "the message has no key (avro expected)" in dead[0]["reason"]
    assert "the key is not avro" in dead[1]["reason"]


def test_a_version_that_makes_the_event_time_text_is_read_or_a_dead_letter(env):
    """`at` becomes ISO text in a later version: a time it is (the parser reads the text),
    but the table's `at` column stays a timestamp, so that version's rows cannot join it:
    dead letters naming the field, the run going on."""
    schema = json.loads(registry_topics.ORDER_AVRO)
    schema["fields"][1] = {"name": "at", "type": "string"}
    as_text = AvroSerializer(env[4], json.dumps(schema))(
        {**registry_topics.ORDER, "at": AT.isoformat()}, registry_topics.value_context(TOPIC))
    not_a_time = AvroSerializer(env[4], json.dumps(schema))(
        {**registry_topics.ORDER, "at": "soon"}, registry_topics.value_context(TOPIC))
    commit(env, archive(env, "r1", TOPIC, [avro(env, registry_topics.ORDER_AVRO), as_text,
                                           not_a_time]))
    assert len(rows(env[3].find(GROUP, TOPIC))) == 1
    first, second = letters(env)
    assert "has field at as string, where schema id" in first["reason"]
    assert "has it as timestamp" in first["reason"]
    assert "at = 'soon' is not" in second["reason"]


def test_a_protobuf_field_the_writers_schema_lacks_is_skipped_and_kept_in_the_bytes(env):
    """A producer that wrote a field number its registered schema does not have: the row
    holds the schema's fields; the value's bytes (the backup group's) keep the field."""
    value = written(env, "protobuf", "proto")
    extra = value + b"\x9a\x06\x03odd"  # field 99, length-delimited: tag 794 as a varint
    commit(env, archive(env, "r1", "proto", [extra]))
    (row,) = rows(env[3].find(GROUP, "proto"))
    assert row["id"] == 7 and row["customer"] == {"name": "Ada", "vip": True}
    assert env[3].find(GROUP, "proto", dead_letters=True) is None  # no dead letter at all


def test_a_typed_file_longer_than_a_chunk_keeps_its_rows_through_a_promotion():
    """The writer turns a typed file's rows into Arrow a chunk at a time: a column a later
    version widens (int to long) or adds reads the same in every chunk after close."""
    import pyarrow as pa

    v1 = pa.schema([pa.field("n", pa.int32())])
    v2 = pa.schema([pa.field("n", pa.int64()), pa.field("s", pa.struct([("a", pa.string())]))])
    out = io.BytesIO()
    writer = parquet.ParsedWriter(out, {"topic": "t", "typed": True}, "1_0_0.parquet")
    rows = parquet.TYPED_CHUNK_ROWS + 10
    for offset in range(rows):
        version, fields = (v1, {"n": offset}) if offset < rows - 5 else (
            v2, {"n": 2 ** 40 + offset, "s": {"a": str(offset)}})
        fitted = schemas.fit(fields, version, "1" if version is v1 else "2", 0, writer.types,
                             writer.origins, native=True)
        writer.append_fitted(Record(offset, None, b"", 0, []), 0, *fitted)
    writer.close()
    read = pq.read_table(pa.BufferReader(out.getvalue()))
    assert read.schema.field("n").type == pa.int64()
    assert read.column("n").to_pylist() == [o for o in range(rows - 5)] + [
        2 ** 40 + o for o in range(rows - 5, rows)]
    assert read.column("s").to_pylist() == [None] * (rows - 5) + [
        {"a": str(o)} for o in range(rows - 5, rows)]
    assert writer.columns_written() == [["n", "long"], ["s", {"struct": [["a", "string"]]}]]


def proto(env, message_class, at=AT, **fields) -> bytes:
    message = message_class(**{"id": 7, **fields})
    message.at.FromDatetime(at)
    return ProtobufSerializer(message_class, env[4], {"use.deprecated.format": False})(
        message, registry_topics.value_context("proto"))


def test_a_renamed_protobuf_field_keeps_its_column_by_number_and_a_reused_name_is_refused(env):
    """Protobuf's field numbers are the table's field ids: `items` renamed `lines` (number
    4) keeps filling column items, in one file or across runs; a later version that gives
    the name items to another number is a dead letter naming both schema ids."""
    v1 = registry_topics.order_message_class()
    v2 = registry_topics.order_message_class(renamed=(("items", "lines"),))
    v3 = registry_topics.order_message_class(renamed=(("items", "lines"),),
                                             added=(("items", 9),))
    commit(env, archive(env, "r1", "proto", [proto(env, v1, items=["a"])]))
    first = env[4].get_latest_version("proto-value").schema_id
    commit(env, archive(env, "r2", "proto", [proto(env, v2, lines=["b"]),
                                             proto(env, v1, items=["c"])]))
    table = env[3].find(GROUP, "proto")
    assert "lines" not in table.schema()._name_to_id
    assert [r["items"] for r in rows(table)] == [["a"], ["b"], ["c"]]
    assert iceberg.column_identities(table)["items"] == ["number 4"]
    commit(env, archive(env, "r3", "proto", [proto(env, v3, lines=["d"], items="x")]))
    (dead,) = letters(env, "proto")
    assert (f"schema id {first + 2} has field items as number 9, where schema id {first} has "
            "number 4 under that name: a column holds one field") in dead["reason"]
    assert len(rows(env[3].find(GROUP, "proto"))) == 3


def test_files_of_one_run_that_name_a_field_two_ways_agree_on_the_first_files_name(env):
    """A new table's first run: partition 0 holds version 1 (items), partition 1 only the
    renaming version 2 (lines): partition 1's file is written again into column items,
    and the table gets one column for number 4."""
    v1 = registry_topics.order_message_class()
    v2 = registry_topics.order_message_class(renamed=(("items", "lines"),))
    commit(env, archive(env, "r1", "proto", {0: [proto(env, v1, items=["a"])],
                                             1: [proto(env, v2, lines=["b"])]}))
    table = env[3].find(GROUP, "proto")
    assert "lines" not in table.schema()._name_to_id
    got = sorted((r["kafka"]["partition"], r["items"]) for r in table.scan().to_arrow().to_pylist())
    assert got == [(0, ["a"]), (1, ["b"])]


def test_an_avro_field_renamed_with_an_alias_keeps_its_column(env):
    """Avro's aliases name a field's earlier names: `qty` renamed `quantity` with alias qty
    keeps filling column qty."""
    commit(env, archive(env, "r1", TOPIC, [avro(env, avro_version("long"), qty=5)]))
    renamed = json.loads(avro_version("long"))
    renamed["fields"][-1] = {**renamed["fields"][-1], "name": "quantity", "aliases": ["qty"]}
    commit(env, archive(env, "r2", TOPIC, [avro(env, json.dumps(renamed), quantity=6)]))
    table = env[3].find(GROUP, TOPIC)
    assert "quantity" not in table.schema()._name_to_id
    assert [r["qty"] for r in rows(table)] == [5, 6]


def test_an_avro_rename_fills_one_column_in_whichever_order_its_versions_come(env):
    """The renaming version first (column quantity, its alias qty recorded), then the
    older one: qty's values fill column quantity, in another partition's file of the same
    run too, and in the next run."""
    renamed = json.loads(avro_version("long"))
    renamed["fields"][-1] = {**renamed["fields"][-1], "name": "quantity", "aliases": ["qty"]}
    commit(env, archive(env, "r1", TOPIC, {0: [avro(env, json.dumps(renamed), quantity=1)],
                                           1: [avro(env, avro_version("long"), qty=2)]}))
    commit(env, archive(env, "r2", TOPIC, [avro(env, avro_version("long"), qty=3)]))
    table = env[3].find(GROUP, TOPIC)
    assert "qty" not in table.schema()._name_to_id
    assert iceberg.column_identities(table)["quantity"] == ["quantity", "qty"]
    assert sorted(r["quantity"] for r in table.scan().to_arrow().to_pylist()) == [1, 2, 3]
