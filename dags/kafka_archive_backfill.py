"""Airflow DAG kafka_archive_backfill, triggered by hand: rebuilds the event-time (partitioned)
output of one topic for an offset or time range from the backup archive's files."""

from kafka_archive.airflow.dags import backfill_dag

dag = backfill_dag()
