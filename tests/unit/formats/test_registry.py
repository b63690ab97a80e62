"""Values in the Confluent wire format read by their registered schema (formats.registry,
the avro/protobuf/json_schema parsers), against confluent-kafka's own in-memory registry
(`mock://`): the event time of each kind, and what fails told apart: the message's
problems (no header, a corrupt payload, an unknown schema id) are ParseErrors naming the
schema id, a registry that does not answer is a TransientError."""

from __future__ import annotations

from datetime import datetime, timezone

import certifi
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

from kafka_archive.errors import ConfigError, TransientError
from kafka_archive.formats import parsers, registry
from kafka_archive.formats.parsers import ParseError, ParserSpec
from kafka_archive.formats.records import Record
from tests.support import registry_topics

AT = datetime(2026, 11, 29, 9, 30, 15, 250000, tzinfo=timezone.utc)
AT_MS = int(AT.timestamp() * 1000)


@pytest.fixture
def client():
    return SchemaRegistryClient.new_client({"url": "mock://tests"})


def written(kind: str, client, topic: str = "orders") -> bytes:
    return registry_topics.serializer(kind, client)(registry_topics.order(kind, AT),
                                                    registry_topics.value_context(topic))


def parser(kind: str, client) -> parsers.Parser:
    made = parsers.parser_for(ParserSpec(kind, (("field", "at"),)), {"url": "mock://tests"},
                              "orders")
    made.decoder = registry.Decoder(kind, {}, client=client)
    return made


@pytest.mark.parametrize("kind", registry.KINDS)
def test_each_kind_gives_its_fields_and_its_event_time(kind, client):
    value = written(kind, client)
    fields = registry.Decoder(kind, {}, client=client).decode(value, "orders")
    assert fields["customer"] == {"name": "Ada", "vip": True}
    assert fields["items"] == ["pen", "ink"] and fields["labels"] == {"channel": "web"}
    record = Record(offset=41, key=None, value=value, timestamp_ms=0, headers=())
    assert parsers.event_time_ms(parser(kind, client), "orders", record) == AT_MS


def test_a_nested_field_is_the_event_time_by_its_path(client):
    made = parsers.parser_for(ParserSpec("avro", (("field", "customer.name"),)), {}, "orders")
    made.decoder = registry.Decoder("avro", {}, client=client)
    record = Record(offset=3, key=None, value=written("avro", client), timestamp_ms=0, headers=())
    with pytest.raises(ParseError, match=r"topic orders offset 3: customer.name = 'Ada' is not"):
        parsers.event_time_ms(made, "orders", record)


@pytest.mark.parametrize("value, reason", [
    (b'{"id": 7}', r"the value is not avro of schema id \? \(no Confluent wire-format header\)"),
    (b"\x00\x00\x00\x03\xe7" + b"\x02", r"schema id 999 is not in the Schema Registry"),
])
def test_a_value_the_registry_cannot_read_is_a_parse_error_naming_its_schema_id(
        client, value, reason):
    written("avro", client)
    record = Record(offset=9, key=None, value=value, timestamp_ms=0, headers=())
    with pytest.raises(ParseError, match=r"topic orders offset 9: " + reason):
        parsers.event_time_ms(parser("avro", client), "orders", record)


def test_a_corrupt_payload_after_a_valid_header_names_the_schema_id(client):
    value = written("avro", client)
    header_id = int.from_bytes(value[1:5], "big")
    record = Record(offset=5, key=None, value=value[:5] + b"\xff\xff\xff", timestamp_ms=0,
                    headers=())
    with pytest.raises(ParseError, match=f"not avro of schema id {header_id}: "):
        parsers.event_time_ms(parser("avro", client), "orders", record)


def test_a_registry_that_does_not_answer_fails_the_run_not_the_message(client):
    value = written("avro", client)
    decoder = registry.Decoder("avro", {"url": "http://127.0.0.1:9", "max.retries": 0})
    with pytest.raises(TransientError, match=r"http://127.0.0.1:9 does not answer"):
        decoder.decode(value, "orders")


@pytest.fixture
def loopback_registry():
    """A registry on loopback, a real HTTP server, so the real client's own handling of
    each answer is what is tested: it serves the schemas in `schemas` (id -> Avro text) at
    /schemas/ids/<id>, finds those `subjects` (subject -> ids) hold by their text at
    POST /subjects/<subject> (404 for another), answers anything else with `status` (a
    JSON error body, as Confluent's API gives) after `delay_s`, and lists every path
    asked in `asked` (a POST's as "POST <path>")."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    answer = {"status": 500, "delay_s": 0.0, "schemas": {}, "subjects": {}, "asked": []}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            answer["asked"].append(self.path.split("?")[0])
            threading.Event().wait(answer["delay_s"])  # a slow registry, not a readiness wait
            found = answer["schemas"].get(self.path.split("?")[0].rsplit("/", 1)[-1])
            self.reply(200 if found else answer["status"],
                       {"schema": found, "schemaType": "AVRO"} if found else None)

        def do_POST(self):
            path = self.path.split("?")[0]
            answer["asked"].append(f"POST {path}")
            text = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["schema"]
            subject = path.rsplit("/", 1)[-1]
            found = [i for i in answer["subjects"].get(subject, ())
                     if answer["schemas"][str(i)] == text]
            self.reply(200 if found else 404, {"subject": subject, "id": found[0], "version": 1,
                                               "schema": text} if found else None)

        def reply(self, status: int, found: dict | None) -> None:
            body = json.dumps(found or {"error_code": status, "message": "refused"}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield answer, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_a_task_asks_the_registry_once_per_schema_id(client, loopback_registry):
    """Issue 58's figure: schema look-ups at most one per schema id per task (per Decoder,
    as a task has one per topic), decoding and typing alike, counted at the server."""
    import json

    from confluent_kafka.schema_registry.avro import AvroSerializer

    answer, url = loopback_registry
    second = json.loads(registry_topics.ORDER_AVRO)
    second["fields"].append({"name": "qty", "type": "int", "default": 1})
    values = [written("avro", client),
              AvroSerializer(client, json.dumps(second))(
                  {**registry_topics.ORDER, "at": AT, "qty": 2},
                  registry_topics.value_context("orders"))]
    ids = [int.from_bytes(v[1:5], "big") for v in values]
    answer["schemas"] = {str(i): client.get_schema(i).schema_str for i in ids}
    answer["subjects"] = {"orders-value": ids}
    decoder = registry.Decoder("avro", {"url": url})
    for n in range(400):
        decoded = decoder.decode(values[n % 2], "orders")
        assert decoded.schema.names[-1] == ("qty" if n % 2 else "note")
    # per schema id: its schema, and whether the topic's subject has it
    assert sorted(answer["asked"]) == sorted(
        [f"/schemas/ids/{i}" for i in ids] + ["POST /subjects/orders-value"] * 2)


def test_a_schema_id_of_another_subject_is_the_messages_problem_asked_once(
        client, loopback_registry):
    """A producer that wrote another topic's schema: the value decodes, but it is not one
    of the topic's records; a dead letter naming the schema id and the subject."""
    answer, url = loopback_registry
    value = written("avro", client, topic="payments")
    schema_id = int.from_bytes(value[1:5], "big")
    answer["schemas"] = {str(schema_id): client.get_schema(schema_id).schema_str}
    answer["subjects"] = {"payments-value": [schema_id]}
    decoder = registry.Decoder("avro", {"url": url})
    for _ in range(3):
        with pytest.raises(ParseError, match=f"schema id {schema_id} is not a version of "
                                             "subject orders-value .*topic orders"):
            decoder.decode(value, "orders")
    assert decoder.decode(value, "payments")["id"] == 7
    assert answer["asked"].count("POST /subjects/orders-value") == 1


@pytest.mark.parametrize("status, delay_s, reason", [
    (401, 0, "answered 401 for schema id"), (403, 0, "answered 403 for schema id"),
    (500, 0, "answered 500 for schema id"), (503, 0, "answered 503 for schema id"),
    (200, 3, "does not answer"),
])
def test_a_registry_that_refuses_fails_or_is_slow_fails_the_run_not_the_message(
        client, loopback_registry, status, delay_s, reason):
    answer, url = loopback_registry
    answer.update(status=status, delay_s=delay_s)
    value = written("avro", client)
    decoder = registry.Decoder("avro", {"url": url, "max.retries": 0, "timeout": 1})
    with pytest.raises(TransientError, match=f"{url} {reason}"):
        decoder.decode(value, "orders")


def test_a_schema_id_the_registry_answers_404_for_is_the_messages_problem(
        client, loopback_registry):
    answer, url = loopback_registry
    answer.update(status=404)
    value = written("avro", client)
    decoder = registry.Decoder("avro", {"url": url, "max.retries": 0})
    with pytest.raises(ParseError, match=f"schema id {int.from_bytes(value[1:5], 'big')} is "
                                         "not in the Schema Registry"):
        decoder.decode(value, "orders")


def test_the_registry_settings_are_not_a_parser_option():
    with pytest.raises(ConfigError, match="registry is not an option"):
        parsers.load_checked("avro", {"field": "at", "registry": {"url": "http://x"}})
    with pytest.raises(ConfigError, match="subject_name_strategy must be one of"):
        parsers.load_checked("avro", {"field": "at", "subject_name_strategy": "subject"})


def test_a_table_group_takes_a_registry_parser_and_a_files_group_too(tmp_path):
    from kafka_archive import config

    path = tmp_path / "kafka-archive.yaml"
    path.write_text("kafka: {bootstrap_servers: 'b:9092'}\narchive_root: s3://b/a\n"
                    "schema_registry: {url: 'http://registry:8081'}\n"
                    "groups: {t: {format: {kind: parquet}, table: {}, parser: {kind: avro, "
                    "field: at}, layout: {kind: event_time, granularity: hour}}}\n")
    assert config.load(path).group("t").parsed_table
    path.write_text(path.read_text().replace("format: {kind: parquet}, table: {}, ", ""))
    assert config.load(path).schema_registry == {"url": "http://registry:8081"}


@pytest.mark.parametrize("fields, settings", [
    (("https://registry:8081/apis/ccompat/v7", None, None, None, None, {}),
     {"url": "https://registry:8081/apis/ccompat/v7"}),
    (("registry", "http", 8081, "archiver", "s3cret", {"ca": certifi.where()}),
     {"url": "http://registry:8081", "basic.auth.user.info": "archiver:s3cret",
      "ssl.ca.location": certifi.where()}),
    (("https://r", None, None, None, "t0ken", {"bearer.auth.logical.cluster": "lsrc-1"}),
     {"url": "https://r", "bearer.auth.credentials.source": "STATIC_TOKEN",
      "bearer.auth.token": "t0ken", "bearer.auth.logical.cluster": "lsrc-1"}),
])
def test_a_connections_fields_become_the_clients_settings(fields, settings):
    from kafka_archive import registry_connection

    assert registry_connection.client_settings(*fields) == settings
    SchemaRegistryClient.new_client(settings)  # the client takes them as they are


def test_the_config_takes_the_registry_from_its_connection_and_keeps_it_out_of_its_repr(
        tmp_path, monkeypatch):
    from kafka_archive import config, registry_connection

    path = tmp_path / "kafka-archive.yaml"
    path.write_text("kafka: {bootstrap_servers: 'b:9092'}\narchive_root: s3://b/a\n"
                    "schema_registry: {conn_id: registry}\ngroups: {g: {}}\n")
    monkeypatch.setenv("AIRFLOW_CONN_REGISTRY", '{"conn_type": "http", "extra": '
                       '{"url": "https://r", "basic.auth.user.info": "a:s3cret"}}')
    made = registry_connection.connected(config.load(path))
    assert made.schema_registry == {"url": "https://r", "basic.auth.user.info": "a:s3cret"}
    assert "s3cret" not in repr(made)
    path.write_text(path.read_text().replace("{conn_id: registry}",
                                             "{conn_id: registry, url: 'https://r'}"))
    with pytest.raises(ConfigError, match="give url or conn_id"):
        config.load(path)


@pytest.mark.parametrize("kind, subject", [("avro", "shop.Order"), ("protobuf", "shop.Order")])
def test_the_subject_checked_is_the_one_the_strategy_names(client, kind, subject):
    """A value written under the record name strategy (subject: the record's full name):
    read with that strategy it is the topic's; read with the topic strategy, it is a
    value of another subject (`orders-value` holds no version of it)."""
    import confluent_kafka.schema_registry as sr
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

    conf = {"subject.name.strategy": sr.record_subject_name_strategy}
    serialize = (AvroSerializer(client, registry_topics.ORDER_AVRO, conf=conf)
                 if kind == "avro" else ProtobufSerializer(
                     registry_topics.order_message_class(), client,
                     {**conf, "use.deprecated.format": False}))
    value = serialize(registry_topics.order(kind, AT), registry_topics.value_context("orders"))
    assert client.get_subjects() == [subject]
    read = registry.Decoder(kind, {}, strategy="record", client=client).decode(value, "orders")
    assert read["id"] in (7, "7")
    with pytest.raises(ParseError, match="is not a version of subject orders-value"):
        registry.Decoder(kind, {}, client=client).decode(value, "orders")
