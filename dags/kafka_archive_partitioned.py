"""Airflow DAG kafka_archive_partitioned: archives every selected topic parsed and laid out
by event time (group `partitioned` in config), then finalizes the time partitions that can
receive no more data. This docstring also matters: Airflow's safe mode only parses files
that mention both "airflow" and "dag"."""

from kafka_archive.airflow.dags import archive_dag

dag = archive_dag("partitioned")
