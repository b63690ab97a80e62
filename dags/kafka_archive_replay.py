"""Airflow DAG kafka_archive_replay, triggered by hand: produces archived messages of an
offset or time range back into a Kafka topic, in order, with their keys, values,
timestamps and headers. Triggering it again with the same params resumes the replay."""

from kafka_archive.airflow.dags import replay_dag

dag = replay_dag()
