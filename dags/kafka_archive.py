"""Airflow DAGs of kafka-archive, every one from the config ($KAFKA_ARCHIVE_CONFIG): an
archive DAG per configured group (`kafka_archive_<group>`), the audit DAG when
`audit.groups` names a group, the backfill DAG when a group is laid out by event time and
the replay DAG when one is laid out by partition. Adding, removing or renaming a group in
the config changes this list; no code. (This docstring also matters: Airflow's safe mode
only parses files that mention both "airflow" and "dag".)"""

from kafka_archive.airflow.dags import all_dags

globals().update(all_dags())
