from pathlib import Path

import pytest

from kafka_archive import brokers, config
from kafka_archive.config import Config
from kafka_archive.errors import ConfigError

SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


def make_config(properties: dict) -> Config:
    return Config(path=Path("/etc/ka.yaml"), bootstrap_servers="k:9094",
                  kafka_properties=properties, archive_root="file:///a", token_root="/t",
                  s3_conn_id="s3", generation=1, groups={})


def test_java_properties_become_kafka_python_settings():
    settings = brokers.python_client_settings(make_config({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": f'{SCRAM} required username="archiver" password="s3\\"cr=t";'}))
    assert settings == {"bootstrap_servers": "k:9094", "security_protocol": "SASL_PLAINTEXT",
                        "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "archiver",
                        "sasl_plain_password": 's3"cr=t'}


@pytest.mark.parametrize("jaas", [
    'com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true;',
    f'{SCRAM} required username="archiver";',
    f"{SCRAM} required username=archiver password=topsecret;",
])
def test_unsupported_jaas_is_named_without_its_secret(jaas):
    with pytest.raises(ConfigError, match="kafka.properties.sasl.jaas.config") as caught:
        brokers.python_client_settings(make_config({"sasl.jaas.config": jaas}))
    assert "topsecret" not in str(caught.value) and "/etc/ka.yaml" in str(caught.value)


def test_kafka_properties_reach_kafka_python_with_numbers_as_numbers(tmp_path):
    path = tmp_path / "kafka-archive.yaml"
    path.write_text("""
kafka:
  bootstrap_servers: b:9092
  properties: {fetch.max.wait.ms: 1500, security.protocol: SASL_SSL}
archive_root: s3://bucket/prefix
""")
    loaded = config.load(path)
    assert brokers.python_client_settings(loaded) == {
        "bootstrap_servers": "b:9092", "fetch_max_wait_ms": 1500, "security_protocol": "SASL_SSL"}
    assert brokers.librdkafka_settings(loaded) == {  # librdkafka's names, text as given
        "bootstrap.servers": "b:9092", "fetch.wait.max.ms": "1500",
        "security.protocol": "SASL_SSL", "isolation.level": "read_committed"}


def test_java_properties_become_librdkafka_settings():
    settings = brokers.librdkafka_settings(make_config({
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": f'{SCRAM} required username="archiver" password="pw";',
        "ssl.truststore.type": "PEM", "ssl.truststore.location": "/etc/ca.pem",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": "/etc/client.pem",
        "ssl.key.password": "kp", "ssl.endpoint.identification.algorithm": "",
        "fetch.max.wait.ms": "200", "client.id": "archiver"}))
    assert settings == {
        "bootstrap.servers": "k:9094", "isolation.level": "read_committed",
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "archiver", "sasl.password": "pw", "ssl.ca.location": "/etc/ca.pem",
        "ssl.certificate.location": "/etc/client.pem", "ssl.key.location": "/etc/client.pem",
        "ssl.key.password": "kp", "ssl.endpoint.identification.algorithm": "none",
        "fetch.wait.max.ms": "200", "client.id": "archiver"}
    pkcs12 = brokers.librdkafka_settings(make_config({
        "ssl.keystore.type": "PKCS12", "ssl.keystore.location": "/etc/c.p12",
        "ssl.keystore.password": "s", "isolation.level": "read_uncommitted"}))
    assert pkcs12["ssl.keystore.location"] == "/etc/c.p12"
    assert pkcs12["isolation.level"] == "read_uncommitted"


@pytest.mark.parametrize("properties, named", [
    ({"ssl.truststore.location": "/etc/trust.jks", "ssl.truststore.password": "secret1"},
     "kafka.properties.ssl.truststore.location: a JKS truststore has no librdkafka equivalent"),
    ({"ssl.keystore.type": "JKS", "ssl.keystore.location": "/k.jks"},
     "kafka.properties.ssl.keystore.location: a JKS keystore"),
    ({"sasl.login.callback.handler.class": "com.example.Secret1"},
     "kafka.properties.sasl.login.callback.handler.class has no librdkafka equivalent"),
    ({"isolation.level": "read_maybe"}, "isolation.level must be read_committed or read_uncommitted"),
])
def test_a_property_librdkafka_cannot_honour_is_refused_by_name(properties, named):
    with pytest.raises(ConfigError) as caught:
        brokers.librdkafka_settings(make_config(properties))
    assert named in str(caught.value) and "/etc/ka.yaml" in str(caught.value)
    assert "secret1" not in str(caught.value)  # a value may be a password: never shown


def test_kafka_python_consumers_read_committed_and_producers_get_no_isolation():
    cfg = make_config({"isolation.level": "read_uncommitted", "client.id": "a"})
    assert "isolation_level" not in brokers.python_client_settings(cfg)
    assert brokers.isolation_level(cfg) == "read_uncommitted"
    assert brokers.isolation_level(make_config({})) == "read_committed"


class FlakyLookups:
    """Answers end_offsets after `failures` KafkaTimeoutErrors; refuses topics()."""

    def __init__(self, failures: int):
        self.failures, self.calls = failures, 0

    def end_offsets(self, partitions):
        self.calls += 1
        if self.calls <= self.failures:
            from kafka.errors import KafkaTimeoutError
            raise KafkaTimeoutError("Failed to get offsets by times in 30000 ms")
        return {tp: 42 for tp in partitions}

    def topics(self):
        from kafka.errors import TopicAuthorizationFailedError
        self.calls += 1
        raise TopicAuthorizationFailedError()

    def assign(self, partitions):
        self.assigned = partitions


def test_a_look_up_that_times_out_is_retried():
    flaky = FlakyLookups(failures=1)
    consumer = brokers.LookupRetrying(flaky, "Kafka at k:9094")
    assert consumer.end_offsets(["tp"]) == {"tp": 42}
    assert flaky.calls == 2


def test_a_refused_look_up_fails_at_once_classified_and_named():
    from kafka_archive.errors import TerminalError

    flaky = FlakyLookups(failures=0)
    with pytest.raises(TerminalError, match=r"Kafka at k:9094: topics: .*TopicAuthorizationFailed"):
        brokers.LookupRetrying(flaky, "Kafka at k:9094").topics()
    assert flaky.calls == 1


def test_other_calls_are_the_consumer_s_own():
    flaky = FlakyLookups(failures=0)
    brokers.LookupRetrying(flaky, "k").assign(["tp"])
    assert flaky.assigned == ["tp"]

