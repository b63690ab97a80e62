"""pyspark's own spark-submit reads an explicit offset range through Spark's Kafka source,
using the jars scripts/install put in .cache/jars/spark-kafka (nothing downloads)."""

import json
import os
import subprocess
from pathlib import Path

from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic

from kafka_archive import spark


def test_spark_submit_reads_exact_offset_range(kafka, unique, tmp_path):
    topic = f"spark-smoke-{unique}"
    admin = KafkaAdminClient(bootstrap_servers=kafka)
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=kafka, acks="all")
    for i in range(10):
        producer.send(topic, value=f"message-{i}".encode(), partition=0)
    producer.flush()
    producer.close()

    out = tmp_path / "rows.jsonl"
    result = subprocess.run(
        [str(spark.spark_home() / "bin" / "spark-submit"), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
         "--jars", ",".join(spark.kafka_source_jars()), str(Path(__file__).parent / "jobs/read_offset_range.py"),
         kafka, topic, "0", "3", "7", str(out)],
        env={**os.environ, **spark.submit_env()}, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]

    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows == [{"offset": i, "value": f"message-{i}"} for i in range(3, 7)]
