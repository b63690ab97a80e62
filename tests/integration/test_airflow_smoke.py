"""`airflow dags test` runs a DAG from dags/ that imports the library from plugins/ and
talks to the real Kafka and S3 servers."""

import json

from conftest import airflow
from kafka import KafkaAdminClient
from kafka.admin import NewTopic


def test_dags_test_runs_preflight_dag_against_real_services(airflow_env, kafka, s3, unique):
    topic = f"preflight-{unique}"
    admin = KafkaAdminClient(bootstrap_servers=kafka)
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    admin.close()
    prefix = f"smoke-{unique}"
    env = {**airflow_env, "KAFKA_ARCHIVE_ROOT": f"s3://{s3.bucket}/{prefix}"}

    airflow(env, "dags", "test", "kafka_archive_preflight")

    report = json.loads(s3.client.get_object(
        Bucket=s3.bucket, Key=f"{prefix}/_preflight/report.json")["Body"].read())
    assert topic in report["topics"]
    assert report["bootstrap_servers"] == kafka
    assert report["run_id"].startswith("manual__")  # written by the DAG run, not the CLI
