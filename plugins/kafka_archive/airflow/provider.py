"""The provider's description for Airflow (the `apache_airflow_provider` entry point):
`airflow providers list` shows kafka-archive, the connection form offers its connection
type with its fields, and `airflow providers hooks|plugins` list its parts. Pure data:
Airflow reads it in every component without importing a hook, so nothing is imported here.
"""

from __future__ import annotations

from importlib import metadata

PACKAGE = "kafka-archive"
DOCS_URL = "https://kafka-archive.readthedocs.io/"  # the MkDocs site built from docs/


def get_provider_info() -> dict:
    return {
        "package-name": PACKAGE,
        "name": "Kafka Archive",
        "description": "Archive Kafka topics to S3 in scheduled micro-batches: offset token "
                       "files, a Spark job per run, Iceberg tables, audits and alert mails.",
        "versions": [metadata.version(PACKAGE)],
        "integrations": [{"integration-name": "Kafka Archive", "external-doc-url": DOCS_URL,
                          "tags": ["apache"]}],
        "operators": [{"integration-name": "Kafka Archive",
                       "python-modules": ["kafka_archive.airflow.operators"]}],
        "hooks": [{"integration-name": "Kafka Archive",
                   "python-modules": ["kafka_archive.airflow.hooks"]}],
        "connection-types": [KAFKA_CONNECTION],
        "plugins": [{"name": "kafka_archive",
                     "plugin-class": "kafka_archive.airflow.plugin.KafkaArchivePlugin"}],
    }


# Kafka with SASL and TLS in the form's own fields: the Kafka provider's type keeps every
# property, the password too, in its extra (hidden login and password fields), where
# Airflow neither masks nor encrypts it apart. Here the password field holds the secret.
KAFKA_CONNECTION = {
    "connection-type": "kafka_archive_kafka",
    "hook-class-name": "kafka_archive.airflow.hooks.KafkaArchiveKafkaHook",
    "hook-name": "Kafka (kafka-archive)",
    "conn-fields": {
        "security_protocol": {
            "label": "Security protocol",
            "schema": {"type": ["string", "null"], "default": "PLAINTEXT",
                       "enum": ["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]}},
        "sasl_mechanism": {
            "label": "SASL mechanism",
            "schema": {"type": ["string", "null"],
                       "enum": [None, "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]},
            "description": "with the login and password below; empty: no SASL"},
        "ssl_ca_location": {
            "label": "CA certificate (PEM file)",
            "schema": {"type": ["string", "null"]},
            "description": "the brokers' CA, where the system's CAs do not hold it"},
    },
    "ui-field-behaviour": {
        "hidden-fields": ["schema", "port"],
        "relabeling": {"host": "Bootstrap servers", "login": "SASL username",
                       "password": "SASL password", "extra": "More librdkafka properties"},
        "placeholders": {"host": "broker-1:9092,broker-2:9092",
                         "extra": '{"ssl.endpoint.identification.algorithm": "https"}'},
    },
}
