"""Kafka's settings from an Airflow connection (kafka.conn_id): the extra's librdkafka
names as every client's settings, refusals by name without the secret, and the job's
reading of Airflow's own variable."""

import pytest

from kafka_archive import brokers, config, kafka_connection
from kafka_archive.config import Config
from kafka_archive.errors import ConfigError


def connection_config(tmp_path, kafka: str) -> Config:
    path = tmp_path / "kafka-archive.yaml"
    path.write_text(f"kafka: {kafka}\narchive_root: file:///a\n")
    return config.load(path)


def test_a_connection_s_librdkafka_extra_becomes_every_client_s_settings(tmp_path):
    cfg = connection_config(tmp_path, "{conn_id: kafka_prod, properties: {client.id: archiver}}")
    assert (cfg.bootstrap_servers, cfg.kafka_conn_id) == ("", "kafka_prod")
    with pytest.raises(ConfigError, match="kafka.conn_id kafka_prod: the connection was not looked up"):
        brokers.librdkafka_settings(cfg)  # a config parsed for a DAG file makes no client
    extra = {"bootstrap.servers": "k1:9094,k2:9094", "security.protocol": "SASL_SSL",
             "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": "archiver",
             "sasl.password": 'p"w\\d', "ssl.ca.location": "/etc/ca.pem",
             "socket.timeout.ms": 20000, "group.id": "the provider's operators'"}
    connected = kafka_connection.connected(cfg, {"kafka_prod": extra}.__getitem__)
    assert connected.bootstrap_servers == "k1:9094,k2:9094"
    assert brokers.librdkafka_settings(connected) == {
        "bootstrap.servers": "k1:9094,k2:9094", "isolation.level": "read_committed",
        "client.id": "archiver", "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "archiver", "sasl.password": 'p"w\\d',
        "ssl.ca.location": "/etc/ca.pem", "socket.timeout.ms": "20000"}
    python = brokers.python_client_settings(connected)
    assert (python["sasl_plain_username"], python["sasl_plain_password"]) == ("archiver", 'p"w\\d')
    assert 'p"w' not in repr(connected)  # a Config's repr shows no Kafka property
    assert kafka_connection.connected(connected, lambda _: pytest.fail("looked up twice")) is connected


@pytest.mark.parametrize("extra, named", [
    ({"security.protocol": "SASL_SSL"}, "its extra has no bootstrap.servers"),
    ({"bootstrap.servers": "k:1", "sasl.kerberos.keytab": "/k"}, "'sasl.kerberos.keytab'"),
    ({"bootstrap.servers": "k:1", "sasl.username": "u"}, "sasl.username and sasl.password together"),
    ({"bootstrap.servers": "k:1", "sasl.mechanism": "OAUTHBEARER", "sasl.username": "u",
      "sasl.password": "topsecret"}, "OAUTHBEARER takes no username"),
    ({"bootstrap.servers": "k:1", "client.id": "twice"}, "kafka.properties client.id also set"),
])
def test_a_connection_the_archive_cannot_use_is_refused_by_name(tmp_path, extra, named):
    cfg = connection_config(tmp_path, "{conn_id: kafka_prod, properties: {client.id: a}}")
    with pytest.raises(ConfigError, match=named) as caught:
        kafka_connection.connected(cfg, lambda _: extra)
    assert "topsecret" not in str(caught.value)


def test_the_yaml_names_one_source_of_bootstrap_servers(tmp_path):
    for kafka, says in [("{conn_id: k, bootstrap_servers: 'k:1'}", "give .*not both"),
                        ("{properties: {}}", "missing required key .or conn_id")]:
        with pytest.raises(ConfigError, match=f"kafka.bootstrap_servers: {says}"):
            connection_config(tmp_path, kafka)


@pytest.mark.parametrize("value", [
    '{"conn_type": "kafka", "extra": {"bootstrap.servers": "k:9", "sasl.password": "s"}}',
    '{"conn_type": "kafka", "extra": "{\\"bootstrap.servers\\": \\"k:9\\", \\"sasl.password\\": \\"s\\"}"}',
    "kafka://?bootstrap.servers=k%3A9&sasl.password=s",
    "kafka://?__extra__=%7B%22bootstrap.servers%22%3A+%22k%3A9%22%2C+%22sasl.password%22%3A+%22s%22%7D",
])
def test_the_job_reads_the_connection_airflow_s_variable_holds(monkeypatch, value):
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_PROD", value)
    assert kafka_connection.from_environment("kafka_prod") == {
        "bootstrap.servers": "k:9", "sasl.password": "s"}


def test_a_missing_or_malformed_connection_variable_is_named_without_its_value(monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_KAFKA_PROD", raising=False)
    with pytest.raises(ConfigError, match="AIRFLOW_CONN_KAFKA_PROD"):
        kafka_connection.from_environment("kafka_prod")
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_PROD", '{"extra": {"sasl.password": "topsecret"')
    with pytest.raises(ConfigError, match="AIRFLOW_CONN_KAFKA_PROD: not an Airflow") as caught:
        kafka_connection.from_environment("kafka_prod")
    assert "topsecret" not in str(caught.value)
