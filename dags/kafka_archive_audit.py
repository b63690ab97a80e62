"""Airflow DAG kafka_archive_audit: reconcile producers' monitoring counts with the archive.
Built by kafka_archive.airflow.dags.audit_dag from the config's `audit` section."""

from kafka_archive.airflow.dags import audit_dag

dag = audit_dag()
