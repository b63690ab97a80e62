"""Airflow DAGs of kafka-archive, every one from the config: an archive DAG per group, and
the audit, backfill and replay DAGs the config asks for (kafka_archive.airflow.dags). A
deployment's DAG file is these two lines too."""

from kafka_archive.airflow import dags_from_config

globals().update(dags_from_config())
