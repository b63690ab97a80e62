"""Shared test set-up. Airflow reads AIRFLOW_HOME at import: point it at a scratch folder
before any test imports airflow, so no test touches ~/airflow."""

import os
import tempfile

os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="kafka-archive-airflow-"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "False")
