"""The hook behind the provider's connection type `kafka_archive_kafka` (its form is in
kafka_archive.airflow.provider): Kafka's client properties from the connection's fields,
in librdkafka's names, as kafka_archive.kafka_connection takes them from any Kafka
connection (this type or the Kafka provider's)."""

from __future__ import annotations

from airflow.sdk import BaseHook

# the form's fields (extra keys) and the librdkafka property each one sets
FIELD_PROPERTIES = {"security_protocol": "security.protocol",
                    "sasl_mechanism": "sasl.mechanism",
                    "ssl_ca_location": "ssl.ca.location"}


def client_properties(host: str | None, port: int | None, login: str | None,
                      password: str | None, extra: dict) -> dict:
    """librdkafka properties of a `kafka_archive_kafka` connection: host (and port) are
    the bootstrap servers, login and password SASL's; the form's fields become their
    properties; any other extra key is a librdkafka property as it stands. Empty fields
    (the form saves them as empty strings or nulls) set nothing."""
    properties = {FIELD_PROPERTIES.get(name.removeprefix("extra__kafka_archive_kafka__"), name):
                  value for name, value in extra.items() if value not in (None, "")}
    if host:
        properties["bootstrap.servers"] = f"{host}:{port}" if port else host
    if login:
        properties["sasl.username"] = login
    if password:
        properties["sasl.password"] = password
    return properties


class KafkaArchiveKafkaHook(BaseHook):
    """A Kafka cluster kafka-archive reads: name it in the config as `kafka.conn_id`."""

    conn_name_attr = "kafka_conn_id"
    default_conn_name = "kafka_archive_kafka"
    conn_type = "kafka_archive_kafka"
    hook_name = "Kafka (kafka-archive)"

    def __init__(self, kafka_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.kafka_conn_id = kafka_conn_id

    def get_conn(self) -> dict:
        """The client properties (librdkafka names)."""
        conn = self.get_connection(self.kafka_conn_id)
        return client_properties(conn.host, conn.port, conn.login, conn.password,
                                 dict(conn.extra_dejson))
