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
- `operators`: `ArchiveOperator`, spark-submit (or Spark Connect) of the archive job
  through the Spark provider; `CommitOperator`, the commit and its Asset events;
  `ReplayOperator`.
- `lineage`: their OpenLineage facets, for Airflow's OpenLineage provider.
- `metrics`: the archive's figures through Airflow's own metrics client.
- `connections`: what Airflow connections give: storage, token store, the SMTP check.
- `alerting`: the mails (failure, deadline, audit, freshness) through Airflow's notifiers.
- `ui`: the Airflow plugin serving the group pages (monitor.page) behind Airflow's login.
"""


def dags_from_config(path=None):
    """kafka_archive.airflow.dags.dags_from_config, imported when first called: importing
    this package imports no Airflow."""
    from kafka_archive.airflow.dags import dags_from_config as made

    return made(path)


def lazy_module(name: str):
    """The module, loaded when its first attribute is read (importlib's LazyLoader): what
    only a running task needs stays out of every DAG file parse (Airflow's parse budget is
    per file, and a deployment's file builds every group's DAG)."""
    import importlib.util
    import sys

    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
