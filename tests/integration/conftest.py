"""Session fixtures for the real local services (scripts/localservices.py).

Each service is started once per session if it is not running yet, and stopped at the end
only if this session started it. With KAFKA_ARCHIVE_SERVICES=external the fixtures start
nothing and fail if a service does not answer (to run against services you manage).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

import localservices

EXTERNAL = os.environ.get("KAFKA_ARCHIVE_SERVICES") == "external"


@pytest.fixture(scope="session")
def service_env() -> dict[str, str]:
    return localservices.local_env()


@contextmanager
def running(name: str, env: dict[str, str]):
    service = localservices.SERVICES[name]
    if EXTERNAL:
        try:
            service.ready(env)
        except Exception as exc:
            pytest.fail(f"{name} is not reachable and KAFKA_ARCHIVE_SERVICES=external: {exc!r}")
        yield
        return
    started = service.start(env)
    try:
        yield
    finally:
        if started:
            service.stop()


@pytest.fixture(scope="session")
def kafka(service_env) -> str:
    """The broker's bootstrap address."""
    with running("kafka", service_env):
        yield localservices.kafka_bootstrap(service_env)


@dataclass(frozen=True)
class S3:
    client: object
    bucket: str


@pytest.fixture(scope="session")
def s3(service_env) -> S3:
    with running("s3", service_env):
        yield S3(localservices.s3_client(service_env), service_env["KAFKA_ARCHIVE_S3_BUCKET"])


@pytest.fixture(scope="session")
def smtp_maildir(service_env) -> Path:
    """Where the capture server keeps every message it received, one .eml file each."""
    with running("smtp", service_env):
        yield localservices.smtp_maildir()


@pytest.fixture
def unique() -> str:
    """A short random suffix for topic, bucket-prefix and subject names."""
    return uuid.uuid4().hex[:10]


@pytest.fixture(scope="session")
def airflow_env(service_env, tmp_path_factory) -> dict[str, str]:
    """Environment for the `airflow` CLI and the library: the local services' connections
    and a fresh AIRFLOW_HOME whose SQLite metadata DB is migrated once per session."""
    env = {**os.environ,
           **localservices.client_env(service_env, tmp_path_factory.mktemp("airflow-home"))}
    airflow(env, "db", "migrate")
    return env


@pytest.fixture(scope="session")
def sc():
    """A local SparkContext: Hadoop's own readers, to check what the pipeline wrote."""
    from pyspark.sql import SparkSession

    from kafka_archive import spark

    with pytest.MonkeyPatch.context() as patch:  # undone after the session
        for name, value in spark.submit_env().items():
            patch.setenv(name, value)
        session = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
                   .getOrCreate())
        gateway = session.sparkContext._gateway
        yield session.sparkContext
        session.stop()
        # stop() leaves pyspark's gateway JVM running until this process exits; end it
        # now (it exits when its stdin closes) so the suite leaves no process behind
        gateway.shutdown()
        gateway.proc.stdin.close()
        gateway.proc.wait(timeout=60)


def airflow(env: dict[str, str], *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """Run the airflow CLI of this venv; fail the test with its output if it fails."""
    result = subprocess.run([str(Path(sys.executable).parent / "airflow"), *args], env=env,
                            capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        pytest.fail(f"airflow {' '.join(args)} exited {result.returncode}:\n"
                    f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result
