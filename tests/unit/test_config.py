import pytest

from kafka_archive import config
from kafka_archive.errors import ConfigError

MINIMAL = """
kafka:
  bootstrap_servers: broker-1:9092
archive_root: s3://archive-bucket/prefix
"""


def write(tmp_path, text):
    path = tmp_path / "kafka-archive.yaml"
    path.write_text(text)
    return path


def test_minimal_config_gets_defaults(tmp_path):
    loaded = config.load(write(tmp_path, MINIMAL))
    assert loaded.bootstrap_servers == "broker-1:9092"
    assert loaded.archive_root == "s3://archive-bucket/prefix"
    assert loaded.token_root == str(tmp_path.resolve() / "offsets")  # beside the config file
    assert loaded.s3_conn_id == "kafka_archive_s3"


def test_environment_references_expand_with_defaults(tmp_path, monkeypatch):
    monkeypatch.setenv("BROKERS", "10.0.0.1:9092")
    monkeypatch.delenv("ROOT_UNSET", raising=False)
    loaded = config.load(write(tmp_path, """
kafka: {bootstrap_servers: "${BROKERS}"}
archive_root: "${ROOT_UNSET:-file:///data/archive}"
"""))
    assert loaded.bootstrap_servers == "10.0.0.1:9092"
    assert loaded.archive_root == "file:///data/archive"


def test_unset_reference_without_default_names_the_variable(tmp_path, monkeypatch):
    monkeypatch.delenv("NO_SUCH_VAR", raising=False)
    with pytest.raises(ConfigError, match=r"\$\{NO_SUCH_VAR\} is not set"):
        config.load(write(tmp_path, MINIMAL + "token_root: ${NO_SUCH_VAR}\n"))


def test_missing_key_is_named_with_the_file(tmp_path):
    path = write(tmp_path, "archive_root: s3://b/p\n")
    with pytest.raises(ConfigError, match=rf"{path}: kafka.bootstrap_servers: missing required key"):
        config.load(path)


@pytest.mark.parametrize("root", ["relative/path", "s3://", "http://host/x", ""])
def test_bad_archive_root_is_refused(tmp_path, root):
    text = MINIMAL.replace("s3://archive-bucket/prefix", repr(root))
    with pytest.raises(ConfigError, match=r": archive_root: must be s3://bucket/prefix or file:///absolute/path"):
        config.load(write(tmp_path, text))


def test_invalid_yaml_and_missing_file_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="not valid YAML"):
        config.load(write(tmp_path, "kafka: [unclosed\n"))
    with pytest.raises(ConfigError, match="config file not found"):
        config.load(tmp_path / "absent.yaml")


def test_shipped_example_config_loads(monkeypatch):
    for name in ("KAFKA_ARCHIVE_BOOTSTRAP", "KAFKA_ARCHIVE_ROOT", "KAFKA_ARCHIVE_TOKEN_ROOT"):
        monkeypatch.delenv(name, raising=False)
    loaded = config.load(config.DEFAULT_PATH)
    assert loaded.bootstrap_servers == "127.0.0.1:19092"
    assert loaded.archive_root.startswith("s3://")


def test_deadline_and_freshness_default_and_override_per_topic(tmp_path):
    loaded = config.load(write(tmp_path, MINIMAL + """
groups:
  backup:
    deadline: 10m
    policy: {freshness: 1h}
    topic_policies:
      "billing\\\\..*": {freshness: 5m}
  other: {}
"""))
    backup = loaded.group("backup")
    assert backup.deadline_s == 600
    assert backup.policy_for("orders").freshness_s == 3600
    assert backup.policy_for("billing.invoices").freshness_s == 300
    assert loaded.group("other").deadline_s == 1800
    assert loaded.group("other").policy.freshness_s == 7200


@pytest.mark.parametrize("setting, key", [("deadline: 0", "groups.backup.deadline"),
                                          ("deadline: soon", "groups.backup.deadline"),
                                          ("policy: {freshness: 0s}", "groups.backup.policy.freshness")])
def test_bad_deadline_or_freshness_names_the_key(tmp_path, setting, key):
    with pytest.raises(ConfigError, match=rf": {key}: must be"):
        config.load(write(tmp_path, MINIMAL + f"groups:\n  backup:\n    {setting}\n"))


def test_spark_section_is_optional_and_typed(tmp_path):
    assert config.load(write(tmp_path, MINIMAL)).spark == config.SparkSettings()
    loaded = config.load(write(tmp_path, MINIMAL + """
spark:
  master: spark://spark-master:7077
  deploy_mode: client
  conf: {spark.executor.memory: 2g, spark.dynamicAllocation.enabled: false}
"""))
    assert loaded.spark == config.SparkSettings(
        "spark://spark-master:7077", "client",
        (("spark.dynamicAllocation.enabled", "false"), ("spark.executor.memory", "2g")))


@pytest.mark.parametrize("section, message", [
    ("spark: {masters: x}", r"spark.masters: unknown key; did you mean master\?"),
    ("spark: {deploy_mode: remote}", r"spark.deploy_mode: must be 'client' or 'cluster'"),
    ("spark: {conf: {executor.memory: 2g}}", r"spark.conf.executor.memory: must be a Spark property"),
])
def test_spark_section_errors_name_the_key(tmp_path, section, message):
    with pytest.raises(ConfigError, match=message):
        config.load(write(tmp_path, MINIMAL + section + "\n"))


def test_the_repr_shows_no_kafka_property_value(tmp_path):
    """A SASL password among the Kafka properties (from ${ENV} or a connection) must not
    reach a log line or an error through repr (issue 41)."""
    loaded = config.load(write(tmp_path, MINIMAL.replace("  bootstrap_servers: broker-1:9092", (
        "  bootstrap_servers: broker-1:9092\n  properties:\n    sasl.jaas.config: >-\n"
        "      org.apache.kafka.common.security.scram.ScramLoginModule required\n"
        "      username=\"u\" password=\"s3cret-value\";"))))
    assert "s3cret-value" in loaded.kafka_properties["sasl.jaas.config"]
    assert "s3cret-value" not in repr(loaded)
