"""Shared test set-up. Airflow reads AIRFLOW_HOME at import: point it at a scratch folder
before any test imports airflow, so no test touches ~/airflow."""

import atexit
import resource
import os
import shutil
import tempfile

import pytest

if "AIRFLOW_HOME" not in os.environ:  # a scratch folder of this process, gone at its exit
    os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="kafka-archive-airflow-")
    atexit.register(shutil.rmtree, os.environ["AIRFLOW_HOME"], ignore_errors=True)
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "False")
# the Airflow service's metadata on PostgreSQL (scripts/install --for-tests installs it), as
# a deployment's; the demo's on SQLite (localservices.airflow_on_postgres)
os.environ.setdefault("KAFKA_ARCHIVE_AIRFLOW_DB", "postgres")

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



# --- CPU seconds per test (issue 42): the suite is CPU-bound on 2 cores, so what a test
# costs the suite is its CPU, not its wall time. Counted: this process and the children it
# reaped (spark-submit and its JVM and Python workers, airflow and kafka-archive commands);
# not the long-lived services, which serve every test

def _cpu_s() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
        resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    item.stash[_CPU_AT_SETUP] = _cpu_s()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if call.when == "teardown" and _CPU_AT_SETUP in item.stash:
        outcome.get_result().user_properties.append(
            ("cpu_s", round(_cpu_s() - item.stash[_CPU_AT_SETUP], 2)))


def pytest_terminal_summary(terminalreporter):
    spent: dict[str, float] = {}
    for report in (r for reports in terminalreporter.stats.values() for r in reports):
        for name, value in getattr(report, "user_properties", ()):
            if name == "cpu_s" and getattr(report, "when", None) == "teardown":
                path = report.nodeid.split("::", 1)[0]
                spent[path] = spent.get(path, 0.0) + value
    if not spent:
        return
    terminalreporter.write_sep("=", f"CPU seconds by test file (tests and the processes they "
                                    f"ran): {sum(spent.values()):.0f} in all")
    for path, seconds in sorted(spent.items(), key=lambda kv: -kv[1])[:CPU_FILES_SHOWN]:
        terminalreporter.write_line(f"{seconds:8.1f}  {path}")


_CPU_AT_SETUP = pytest.StashKey[float]()
CPU_FILES_SHOWN = 25
