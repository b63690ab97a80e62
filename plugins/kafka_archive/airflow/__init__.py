"""The Airflow adapter, and the only package that imports Airflow (none of it on import of
the package itself). Everything here is thin: each task builds its clients and calls one
library function.

- `dags`: the DAG factory a DAG file calls (`dags_from_config`), one DAG per group (plus
  audit, backfill, replay).
- `params`: the manual-trigger parameters as JSON schemas, and their conversion to the
  plan's arguments (no Airflow import: unit-tested as data; the CLI shares its time syntax).
- `trigger_check`: refuses a trigger whose params name an unknown key or a topic the group
  does not archive (400 before a run exists).
- `tasks`: the task bodies (plan, commit, freshness, audit, replay...).
- `operators`: `ArchiveOperator`, spark-submit of the archive job through the Spark provider.
- `connections`: what Airflow connections give: storage, token store, the SMTP check.
- `alerting`: the mails (failure, deadline, audit, freshness) through Airflow's notifiers.
- `ui`: the Airflow plugin serving the group pages (monitor.page) behind Airflow's login.
"""


def dags_from_config(path=None):
    """kafka_archive.airflow.dags.dags_from_config, imported when first called: importing
    this package imports no Airflow."""
    from kafka_archive.airflow.dags import dags_from_config as made

    return made(path)
