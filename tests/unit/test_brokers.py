from kafka_archive import brokers, config


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
    assert brokers.spark_options(loaded) == {  # Spark's source takes text
        "kafka.bootstrap.servers": "b:9092", "kafka.fetch.max.wait.ms": "1500",
        "kafka.security.protocol": "SASL_SSL"}
