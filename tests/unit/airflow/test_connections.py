"""The Kafka connection as the tasks and the CLI read it (an AIRFLOW_CONN_ variable here)."""

import json

from kafka_archive import kafka_connection
from kafka_archive.airflow import connections


def test_the_password_field_is_the_sasl_password(monkeypatch):
    """Issue 41 §4: Airflow masks and encrypts a connection's password field, not its
    extra; the password goes there, the extra keeps the other properties."""
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_FIELDS", json.dumps({
        "conn_type": "kafka", "login": "archiver", "password": "pw-from-the-field",
        "extra": {"bootstrap.servers": "b:9094", "security.protocol": "SASL_PLAINTEXT",
                  "sasl.mechanism": "SCRAM-SHA-512"}}))
    extra = connections.kafka_extra("kafka_fields")
    assert (extra["sasl.username"], extra["sasl.password"]) == ("archiver", "pw-from-the-field")
    bootstrap, properties = kafka_connection.from_extra("kafka_fields", extra)
    assert bootstrap == "b:9094"
    assert 'username="archiver" password="pw-from-the-field"' in properties["sasl.jaas.config"]


def test_an_extra_that_names_the_credentials_keeps_them(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_EXTRA", json.dumps({
        "conn_type": "kafka", "password": "ignored",
        "extra": {"bootstrap.servers": "b:9094", "sasl.username": "u", "sasl.password": "p"}}))
    extra = connections.kafka_extra("kafka_extra")
    assert (extra["sasl.username"], extra["sasl.password"]) == ("u", "p")


def test_one_s3_client_per_connection_as_it_reads_now(monkeypatch):
    """Making a client costs ~0.25 s: a process asks once per connection; rotated keys,
    another endpoint or AWS_* environment get a client of their own."""
    def connection(password: str, endpoint: str = "http://127.0.0.1:9") -> str:
        return json.dumps({"conn_type": "aws", "login": "key", "password": password,
                           "extra": {"endpoint_url": endpoint}})

    monkeypatch.setenv("AIRFLOW_CONN_S3_CACHED", connection("first"))
    first = connections.s3_client("s3_cached")
    assert connections.s3_client("s3_cached") is first
    assert first.meta.endpoint_url == "http://127.0.0.1:9"
    monkeypatch.setenv("AIRFLOW_CONN_S3_CACHED", connection("rotated"))
    rotated = connections.s3_client("s3_cached")
    assert rotated is not first
    assert rotated._request_signer._credentials.secret_key == "rotated"
    monkeypatch.setenv("AIRFLOW_CONN_S3_CACHED", connection("rotated", "http://127.0.0.1:8"))
    assert connections.s3_client("s3_cached").meta.endpoint_url == "http://127.0.0.1:8"
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-3")
    assert connections.s3_client("s3_cached").meta.region_name == "eu-west-3"


def test_the_all_groups_page_looks_whether_a_connect_server_answers(monkeypatch):
    """A TCP connection to the server's port (a real listening socket, then a port
    nothing listens on), and a connection that does not exist, each said as such."""
    import socket

    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        monkeypatch.setenv("AIRFLOW_CONN_CONNECT_UP", json.dumps(
            {"conn_type": "spark_connect", "host": "127.0.0.1", "port": port}))
        assert connections.spark_connect_unreachable("connect_up") is None
    problem = connections.spark_connect_unreachable("connect_up")  # closed now
    assert problem.startswith(f"127.0.0.1:{port} (connection connect_up): ") and (
        "refused" in problem), problem
    assert connections.spark_connect_unreachable("connect_missing").startswith(
        "connection connect_missing: ")
