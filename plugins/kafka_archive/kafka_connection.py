"""Kafka's settings from an Airflow connection of the Kafka provider's type
(`kafka.conn_id` in the config) instead of the YAML: its extra holds librdkafka's
properties, bootstrap.servers among them, which `connected` turns into the config's own
(Java-named) form, so every client kafka_archive.brokers makes takes them alike.

In Airflow the connection is looked up like any other (metadata database, secrets
backend, AIRFLOW_CONN_* variable: kafka_archive.airflow.connections); the Spark job's
driver reads the one its operator hands it in its environment (from_environment);
executors get the settings inside the Config their tasks receive.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from typing import Callable, Mapping
from urllib.parse import parse_qsl, urlsplit

from kafka_archive import brokers
from kafka_archive.config import Config
from kafka_archive.errors import ConfigError


def connected(config: Config,
              lookup: Callable[[str], Mapping] | None = None) -> Config:
    """The config with its Kafka settings from the Airflow connection `kafka.conn_id`
    names, if it names one: lookup(conn_id) gives that connection's extra (default:
    from_environment). The YAML's own `kafka.properties` stay beside them; a property
    set in both is refused by name (one place decides each)."""
    if not config.kafka_conn_id or config.bootstrap_servers:
        return config  # no connection, or looked up already
    extra = (lookup or from_environment)(config.kafka_conn_id)
    bootstrap, properties = from_extra(config.kafka_conn_id, extra)
    if both := sorted(set(properties) & set(config.kafka_properties)):
        raise ConfigError(f"{config.path}: kafka.properties {', '.join(both)} also set by the "
                          f"Kafka connection {config.kafka_conn_id}: keep one")
    return replace(config, bootstrap_servers=bootstrap,
                   kafka_properties={**config.kafka_properties, **properties})


def from_environment(conn_id: str) -> dict:
    """A connection's extra from Airflow's own variable for it, AIRFLOW_CONN_<ID>, in either
    of its forms: JSON ({"conn_type": "kafka", "extra": {...}}) or a URI whose query holds
    the extra (`kafka://?bootstrap.servers=...`, or `?__extra__=<JSON>`)."""
    name = f"AIRFLOW_CONN_{conn_id.upper()}"
    raw = os.environ.get(name)
    if raw is None:
        raise ConfigError(f"kafka.conn_id {conn_id}: no such connection in this process's "
                          f"environment ({name}); in Airflow make it in the UI or a secrets "
                          "backend, elsewhere set the variable")
    try:
        if raw.lstrip().startswith("{"):
            extra = json.loads(raw).get("extra") or {}
            return json.loads(extra) if isinstance(extra, str) else dict(extra)
        query = dict(parse_qsl(urlsplit(raw).query, keep_blank_values=True))
        return json.loads(query["__extra__"]) if "__extra__" in query else query
    except (ValueError, AttributeError):  # the value holds secrets: name it, never show it
        raise ConfigError(f"{name}: not an Airflow connection in JSON or URI form with a JSON "
                          "object as its extra") from None


# a librdkafka property of a connection's extra that the archive has no use for: it joins
# no consumer group (a connection shared with the Kafka provider's operators may hold them)
_CONSUMER_GROUP_SETTINGS = {"group.id", "enable.auto.commit", "auto.offset.reset",
                            "auto.commit.interval.ms", "session.timeout.ms"}


def from_extra(conn_id: str, extra: Mapping) -> tuple[str, dict[str, str]]:
    """(bootstrap servers, Java-named properties) of a Kafka connection's extra, written
    in librdkafka's names as the Kafka provider wants them. sasl.username and
    sasl.password become the PLAIN or SCRAM JAAS line of the mechanism; a property with
    no Java equivalent known here is refused by name (its value may be a secret)."""
    where = f"the Kafka connection {conn_id}"
    settings = {name: str(value).lower() if isinstance(value, bool) else str(value)
                for name, value in extra.items() if name not in _CONSUMER_GROUP_SETTINGS}
    bootstrap = settings.pop("bootstrap.servers", "")
    if not bootstrap:
        raise ConfigError(f"{where}: its extra has no bootstrap.servers")
    if "sasl.mechanisms" in settings:  # librdkafka's older name
        settings.setdefault("sasl.mechanism", settings.pop("sasl.mechanisms"))
    user, password = settings.pop("sasl.username", None), settings.pop("sasl.password", None)
    java_name = {v: k for k, v in brokers.RENAMED_IN_LIBRDKAFKA.items()}
    properties: dict[str, str] = {}
    for name, value in settings.items():
        if name == "ssl.ca.location":
            properties |= {"ssl.truststore.location": value, "ssl.truststore.type": "PEM"}
        elif name == "ssl.keystore.location":  # librdkafka's keystore is PKCS#12
            properties |= {name: value, "ssl.keystore.type": "PKCS12"}
        elif name in brokers.SAME_IN_LIBRDKAFKA:
            properties[name] = value
        elif name in java_name:
            properties[java_name[name]] = value
        else:
            raise ConfigError(f"{where}: extra key {name!r} is not a Kafka client property "
                              "kafka-archive can use (librdkafka names; it reads and "
                              "produces with librdkafka and kafka-python): remove it")
    if (user is None) != (password is None):
        raise ConfigError(f"{where}: its extra needs sasl.username and sasl.password together")
    if user is not None:
        mechanism = properties.get("sasl.mechanism", "PLAIN").upper()
        plain, scram = brokers.JAAS_MODULES
        module = scram if mechanism.startswith("SCRAM-") else plain
        if mechanism != "PLAIN" and not mechanism.startswith("SCRAM-"):
            raise ConfigError(f"{where}: sasl.mechanism {mechanism} takes no username and "
                              "password; kafka-archive logs in with PLAIN or SCRAM")
        properties["sasl.jaas.config"] = (f'{module} required username="{_escape(user)}" '
                                          f'password="{_escape(password)}";')
    return bootstrap, properties


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')
