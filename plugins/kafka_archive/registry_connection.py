"""The Schema Registry's client settings from an Airflow connection (`schema_registry.
conn_id` in the config) instead of the YAML: its host is the registry's URL (or a host,
with the scheme in its schema field and its port), login and password are basic auth (a
password alone: a bearer token), and its extra holds `ca` (the TLS CA file) and any
other confluent-kafka client setting. The secret stays in the password field, which
Airflow masks and encrypts.

As with Kafka's connection (kafka_connection): in Airflow it is looked up like any other;
the Spark job's driver reads the settings its operator hands it in its environment
(AIRFLOW_CONN_<ID>, kafka_connection.from_environment); executors get them inside the
Config their tasks receive. Never on a command line or in a plan.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Mapping

from kafka_archive import kafka_connection
from kafka_archive.config import Config
from kafka_archive.errors import ConfigError


def connected(config: Config, lookup: Callable[[str], Mapping] | None = None) -> Config:
    """The config with the registry's client settings from the connection its
    `schema_registry.conn_id` names (lookup(conn_id) gives them; default: this
    process's AIRFLOW_CONN_<ID>, whose extra holds them)."""
    if not config.schema_registry_conn_id or config.schema_registry.get("url"):
        return config  # no connection, or looked up already
    settings = dict((lookup or kafka_connection.from_environment)(config.schema_registry_conn_id))
    if not settings.get("url"):
        raise ConfigError(f"schema_registry.conn_id {config.schema_registry_conn_id}: the "
                          "connection names no URL (its host)")
    if both := sorted(set(settings) & set(config.schema_registry)):
        raise ConfigError(f"{config.path}: schema_registry.properties {', '.join(both)} also "
                          f"set by the connection {config.schema_registry_conn_id}: keep one")
    return replace(config, schema_registry={**config.schema_registry, **settings})


def client_settings(host: str | None, schema: str | None, port: int | None,
                    login: str | None, password: str | None, extra: Mapping) -> dict:
    """confluent-kafka's SchemaRegistryClient settings from a connection's fields."""
    if not host:
        return {}
    url = host if "://" in host else f"{schema or 'https'}://{host}{f':{port}' if port else ''}"
    settings = {"url": url}
    if login:
        settings["basic.auth.user.info"] = f"{login}:{password or ''}"
    elif password:
        settings |= {"bearer.auth.credentials.source": "STATIC_TOKEN",
                     "bearer.auth.token": password}
    extra = dict(extra)
    if ca := extra.pop("ca", None):
        settings["ssl.ca.location"] = ca
    return settings | {k: str(v) for k, v in extra.items()}
