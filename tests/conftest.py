"""Shared test set-up. Airflow reads AIRFLOW_HOME at import: point it at a scratch folder
before any test imports airflow, so no test touches ~/airflow."""

import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))  # localservices, the service manager

os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="kafka-archive-airflow-"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "False")
