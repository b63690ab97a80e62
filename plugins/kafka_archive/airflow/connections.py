"""Clients built from Airflow connections: the one place credentials are looked up.

Secrets stay in the connection (or the secrets backend behind it) and reach the library
only as ready clients, never as arguments or log lines.
"""

from __future__ import annotations

import functools
import json
import os
import socket
from pathlib import Path

from kafka_archive import config as config_module, kafka_connection, registry_connection, retries
from kafka_archive.airflow.hooks import KafkaArchiveKafkaHook, client_properties
from kafka_archive.commit import iceberg
from kafka_archive.config import Config
from kafka_archive.errors import ConfigError, TransientError
from kafka_archive.storage import Storage
from kafka_archive.tokens import TokenStore, open_store


CONFIG_FILE = "kafka-archive.yaml"        # in the DAGs folder, where nothing else names one
CONFIG_VARIABLE = "kafka_archive_config"  # an Airflow Variable holding the config's path


def config_path() -> Path:
    """Where this Airflow's kafka-archive config is, the same in every component (the DAG
    processor, workers, the api-server's pages): $KAFKA_ARCHIVE_CONFIG, else
    kafka-archive.yaml in the DAGs folder, else the path in the Airflow Variable
    `kafka_archive_config`, else a checkout's example config."""
    if named := os.environ.get("KAFKA_ARCHIVE_CONFIG"):
        return Path(named)
    from airflow.configuration import conf

    beside = Path(conf.get("core", "dags_folder")).expanduser() / CONFIG_FILE
    if beside.is_file():
        return beside
    from airflow.sdk import Variable

    if value := Variable.get(CONFIG_VARIABLE, default=None):
        return Path(value)
    if config_module.DEFAULT_PATH.is_file():
        return config_module.DEFAULT_PATH
    raise ConfigError(f"no kafka-archive config: set KAFKA_ARCHIVE_CONFIG, put {CONFIG_FILE} "
                      f"in the DAGs folder ({beside.parent}) or set the Airflow Variable "
                      f"{CONFIG_VARIABLE} to its path")


def load_config(path: str | Path | None = None) -> Config:
    """The config (KAFKA_ARCHIVE_CONFIG's by default) with Kafka's settings from the
    connection `kafka.conn_id` names, where it names one. Tasks, the CLI and the page load
    it this way; the DAG files, parsed without connections, load the YAML alone. A group
    with a problem of its own is left out (its DAG fails with that problem), not the rest."""
    return registry_connection.connected(kafka_connection.connected(
        config_module.load(path or config_path(), groups_apart=True), kafka_extra),
        schema_registry_settings)


def kafka_extra(conn_id: str) -> dict:
    """The Kafka connection's client properties, wherever Airflow keeps it: a
    `kafka_archive_kafka` connection's from its form's fields (hooks.client_properties);
    the Kafka provider's type's from its extra, with its login and password fields as
    sasl.username and sasl.password unless the extra has them: Airflow masks and encrypts the password field, not an extra's keys
    (`airflow connections add --conn-extra` logs the extra whole in its own log table)."""
    from airflow.sdk import BaseHook

    conn = BaseHook.get_connection(conn_id)
    extra = dict(conn.extra_dejson)
    if conn.conn_type == KafkaArchiveKafkaHook.conn_type:  # the provider's own type
        return client_properties(conn.host, conn.port, conn.login, conn.password, extra)
    if conn.password and "sasl.password" not in extra:
        extra["sasl.password"] = conn.password
    if conn.login and "sasl.username" not in extra:
        extra["sasl.username"] = conn.login
    return extra


def connection_environment(config: Config) -> dict[str, str]:
    """The Kafka and Schema Registry connections as Airflow's own variables for them, for
    a Spark job's driver (kafka_connection.from_environment reads their extras there, the
    registry's client settings as its extra): nothing without them."""
    found = {}
    if config.kafka_conn_id:
        connection = {"conn_type": "kafka", "extra": kafka_extra(config.kafka_conn_id)}
        found[f"AIRFLOW_CONN_{config.kafka_conn_id.upper()}"] = json.dumps(connection)
    if conn_id := config.schema_registry_conn_id:
        connection = {"conn_type": "http", "extra": schema_registry_settings(conn_id)}
        found[f"AIRFLOW_CONN_{conn_id.upper()}"] = json.dumps(connection)
    return found


def schema_registry_settings(conn_id: str) -> dict:
    """The Schema Registry client's settings from its Airflow connection
    (registry_connection.client_settings)."""
    from airflow.sdk import BaseHook

    conn = BaseHook.get_connection(conn_id)
    return registry_connection.client_settings(conn.host, conn.schema, conn.port, conn.login,
                                               conn.password, conn.extra_dejson)


def s3_client(conn_id: str):
    """The S3 client of the connection as it reads now, one per process: making one costs
    ~0.25 s (each hook's boto3 session loads botocore's models anew and inspects the
    stack), and a task, a page of the UI or a CLI command opens several stores. A changed
    connection (rotated keys, another endpoint) or AWS_* environment makes a new one."""
    from airflow.exceptions import AirflowNotFoundException
    from airflow.sdk import BaseHook

    try:
        uri = BaseHook.get_connection(conn_id).get_uri()
    except AirflowNotFoundException:  # the hook falls back to boto3's own chain
        uri = None
    aws_environment = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_")))
    return _s3_client(conn_id, uri, aws_environment)


@functools.lru_cache(maxsize=8)
def _s3_client(conn_id: str, uri: str | None, aws_environment: tuple) -> object:
    """The client of s3_client, cached by what it is made from (the arguments are the key)."""
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook  # boto3: not at DAG parse

    return S3Hook(aws_conn_id=conn_id, config=retries.s3_config()).get_conn()


def storage(conn_id: str) -> Storage:
    """The archive root's storage, its S3 client made from the connection when first used."""
    return Storage(lambda: s3_client(conn_id))


def s3_environment(conn_id: str) -> dict[str, str]:
    """boto3's standard variables, from the Airflow connection."""
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook

    hook = S3Hook(aws_conn_id=conn_id)
    credentials = hook.get_credentials()
    env = {"AWS_ACCESS_KEY_ID": credentials.access_key,
           "AWS_SECRET_ACCESS_KEY": credentials.secret_key,
           "AWS_DEFAULT_REGION": hook.conn_config.region_name or "us-east-1"}
    if credentials.token:
        env["AWS_SESSION_TOKEN"] = credentials.token
    if endpoint := hook.conn_config.get_service_endpoint_url("s3"):
        env["AWS_ENDPOINT_URL_S3"] = endpoint
    return env


def iceberg_file_io(config: Config) -> dict[str, str]:
    """pyiceberg's FileIO properties for the archive root: the S3 connection's credentials."""
    if not config.archive_root.startswith("s3://"):
        return {}
    names = {"AWS_ACCESS_KEY_ID": "s3.access-key-id", "AWS_SECRET_ACCESS_KEY": "s3.secret-access-key",
             "AWS_SESSION_TOKEN": "s3.session-token", "AWS_DEFAULT_REGION": "s3.region",
             "AWS_ENDPOINT_URL_S3": "s3.endpoint"}
    return {names[k]: v for k, v in s3_environment(config.s3_conn_id).items()}


def iceberg_tables(config: Config) -> iceberg.Tables:
    """Table groups' tables, their files read and written with the S3 connection's
    credentials and their catalogs reached with their connections' (`conn_id`), looked up
    when a table is first opened."""
    return iceberg.Tables(config, lambda: iceberg_file_io(config), iceberg_catalog_properties)


def iceberg_catalog_properties(conn_id: str) -> dict[str, str]:
    """pyiceberg catalog properties from an Airflow connection: its extra's keys (a REST
    catalog's `uri`, `credential`, `token`, `warehouse`...), and for a `postgres`
    connection the SQL catalog's `uri` made from its host, port, login, password and
    database (unless the extra gives one)."""
    from airflow.sdk import BaseHook
    from sqlalchemy.engine import URL

    conn = BaseHook.get_connection(conn_id)
    properties = {name: str(value) for name, value in conn.extra_dejson.items()}
    if conn.conn_type in ("postgres", "postgresql") and "uri" not in properties:
        properties["uri"] = URL.create(
            "postgresql+psycopg2", username=conn.login, password=conn.password,
            host=conn.host, port=conn.port, database=conn.schema).render_as_string(
                hide_password=False)
    return properties


def token_store(config: Config) -> TokenStore:
    return open_store(config.token_root, lambda: s3_client(config.s3_conn_id))


def check_spark_connect(config: Config, conn_id: str) -> str:
    """Attach the deployment's session on the Spark Connect server the connection names
    (the library uploaded as a job would) and run a small job there; the server and its
    cores. Unreachable: TransientError naming the server (spark_connect.connect_session)."""
    from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

    from kafka_archive import spark, spark_connect

    url = SparkConnectHook(conn_id).get_connection_url()
    with spark_connect.connected(url, config, "preflight", storage(config.s3_conn_id)) as session:
        cores = spark.parallelism(session)
    return f"{_connect_server(url)} (connection {conn_id}): {cores} cores"


def spark_connect_unreachable(conn_id: str, timeout_s: float = 2) -> str | None:
    """Why the Spark Connect server the connection names cannot be reached (no TCP
    connection to its port within timeout_s, or no such connection), or None: the
    all-groups page's quick look on every load; preflight runs a job there."""
    from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

    try:
        server = _connect_server(SparkConnectHook(conn_id).get_connection_url())
    except Exception as exc:  # noqa: BLE001 (Airflow's own: no such connection, a bad one)
        return f"connection {conn_id}: {exc}"
    host, _, port = server.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout_s).close()
    except (OSError, ValueError) as exc:
        return f"{server} (connection {conn_id}): {exc}"
    return None


def _connect_server(url: str) -> str:
    """host:port of an sc:// URL (its token left out)."""
    return url.partition("/;")[0].removeprefix("sc://").rstrip("/")


def check_smtp(conn_id: str) -> str:
    """Connect (and log in, when the connection has credentials) to the alert mail
    server, then hang up; the server reached."""
    from airflow.providers.smtp.hooks.smtp import SmtpHook

    with SmtpHook(smtp_conn_id=conn_id) as hook:  # connects, and logs in with credentials
        ok, answer = hook.test_connection()       # then the hook's own check: a NOOP
        if not ok:
            raise TransientError(f"the alert mail server {hook.host}:{hook.port} (connection "
                                 f"{conn_id}) did not answer a NOOP: {answer}")
        return f"{hook.host}:{hook.port} (connection {conn_id})"
