"""Shared test set-up. Airflow reads AIRFLOW_HOME at import: point it at a scratch folder
before any test imports airflow, so no test touches ~/airflow."""

import atexit
import os
import shutil
import tempfile

import pytest

if "AIRFLOW_HOME" not in os.environ:  # a scratch folder of this process, gone at its exit
    os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="kafka-archive-airflow-")
    atexit.register(shutil.rmtree, os.environ["AIRFLOW_HOME"], ignore_errors=True)
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "False")

# The tests are clients of the local S3 (HTTPS) as the services' own clients are: they
# trust its CA through the usual settings, set before pyarrow reads them at its import
from tests.support import localservices  # noqa: E402

# pytest-xdist (scripts/test -n 2): its worker gwN uses service set N, so the workers'
# services (ports, folders, Kafka topics, buckets) never meet
localservices.use_service_set(int(os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:]))

if localservices.TRUSTED_CAS.is_file():
    os.environ.update(localservices.trust_env())


# Tests that need one of these session services run on one worker (--dist loadgroup), so
# the suite starts each stack once; every other test file is a group of its own, so its
# module fixtures are set up once
ONE_WORKER_STACKS = ("airflow_stack", "spark_cluster")


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        stack = next((s for s in ONE_WORKER_STACKS if s in item.fixturenames), None)
        item.add_marker(pytest.mark.xdist_group(stack or item.nodeid.split("::", 1)[0]))

