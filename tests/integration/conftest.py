"""Session fixtures for the real local services (tests/support/localservices.py).

Each service is started once per session if it is not running yet, and stopped at the end
only if this session started it. With KAFKA_ARCHIVE_SERVICES=external the fixtures start
nothing and fail if a service does not answer (to run against services you manage).
"""

from __future__ import annotations

import os
import time
import uuid
import contextlib
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml

from tests.support import localservices
from tests.support.browser import open_browser
from tests.support import pipeline as pipeline_module
from tests.support.pipeline import airflow

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
def spark_connect(service_env, s3) -> str:
    """The local Spark Connect server's URL (localservices `spark-connect`: local[2], the
    executor venv's Python workers, the local S3's credentials as its own)."""
    with running("spark-connect", service_env):
        yield localservices.spark_connect_url(service_env)


@pytest.fixture(scope="session")
def smtp_maildir(service_env) -> Path:
    """Where the capture server keeps every message it received, one .eml file each."""
    with running("smtp", service_env):
        yield localservices.smtp_maildir()


@pytest.fixture(scope="session")
def toxiproxy(service_env) -> str:
    """The URL of Toxiproxy's HTTP API (drive it with fault_proxies.Toxiproxy)."""
    with running("toxiproxy", service_env):
        yield localservices.toxiproxy_url(service_env)


@pytest.fixture(scope="session")
def schema_registry(service_env) -> str:
    """The local Schema Registry's Confluent-compatible URL (Apicurio, in memory,
    compatibility BACKWARD)."""
    with running("schema-registry", service_env):
        yield localservices.schema_registry_url(service_env)


@pytest.fixture(scope="session")
def statsd(service_env) -> str:
    """The URL of statsd_exporter's /metrics, where the Airflow stack's metrics show up."""
    with running("statsd", service_env):
        yield localservices.statsd_metrics_url(service_env)


@pytest.fixture(scope="session")
def iceberg_rest(service_env, s3) -> str:
    """The URL of the local Iceberg REST catalog (its bearer token: service_env's
    KAFKA_ARCHIVE_ICEBERG_REST_TOKEN)."""
    with running("iceberg-rest", service_env):
        yield localservices.iceberg_rest_url(service_env)


@pytest.fixture(scope="session")
def postgres(service_env) -> str:
    """The local PostgreSQL's database for Iceberg's SQL catalog, as a SQLAlchemy URL whose
    password is the ${KAFKA_ARCHIVE_POSTGRES_PASSWORD} reference a config file holds."""
    with running("postgres", service_env):
        yield localservices.postgres_url(
            {**service_env, "KAFKA_ARCHIVE_POSTGRES_PASSWORD": "${KAFKA_ARCHIVE_POSTGRES_PASSWORD}"},
            "iceberg")


@dataclass(frozen=True)
class SparkCluster:
    """The local standalone cluster: a master and two one-core workers whose executors run
    .cache/executor-venv's Python (no project) with no AWS_* variables."""
    master: str                 # spark://127.0.0.1:port
    master_ui: str              # http://127.0.0.1:port (its /json/ lists the workers)
    worker_uis: dict[str, str]  # service name (spark-worker-n) -> its web UI
    conf: dict[str, str]        # what a job needs on it (the executors' Python)


@pytest.fixture(scope="session")
def spark_cluster(service_env) -> SparkCluster:
    names = [s.name for s in localservices.SPARK_SERVICES]
    with contextlib.ExitStack() as stack:
        for name in names:  # the master first: workers register with it
            stack.enter_context(running(name, service_env))
        yield SparkCluster(
            localservices.spark_master_url(service_env), localservices.spark_master_ui(service_env),
            {name: f"http://127.0.0.1:{localservices.spark_worker_ports(service_env, n)[1]}"
             for n, name in enumerate(names[1:], start=1)},
            localservices.spark_cluster_conf(service_env))


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
    """The session's local SparkContext (pipeline.shared_context): Hadoop's own readers,
    to check what the pipeline wrote; archive jobs run in it too."""
    yield pipeline_module.shared_context()


@pytest.fixture(scope="session", autouse=True)
def _stop_spark_at_the_end():
    yield
    pipeline_module.stop_shared_context()


# --- a running Airflow (tests/support/localservices.py `airflow`) and its REST API --------------

@dataclass(frozen=True)
class AirflowStack:
    """A real Airflow 3 (api-server, scheduler, dag-processor, triggerer; LocalExecutor on
    the local PostgreSQL) on 127.0.0.1, and an authenticated client of its REST API v2."""
    url: str
    api: httpx.Client        # base_url = url, Authorization: Bearer <JWT of user admin>
    config_file: Path        # the kafka-archive config its DAGs and tasks use

    def config(self):
        from kafka_archive import config
        return config.load(self.config_file)

    def wait_for_dag(self, dag_id: str, timeout_s: float = 180) -> dict:
        """The DAG once the dag-processor has parsed it; fails naming any import error."""
        deadline = time.monotonic() + timeout_s
        while True:
            r = self.api.get(f"/api/v2/dags/{dag_id}")
            if r.status_code == 200:
                return r.json()
            if r.status_code != 404:
                pytest.fail(f"GET dag {dag_id}: {r.status_code} {r.text}")
            if time.monotonic() > deadline:
                errors = self.api.get("/api/v2/importErrors").json()["import_errors"]
                pytest.fail(f"DAG {dag_id} not parsed after {timeout_s}s; import errors: "
                            f"{[(e['filename'], e['stack_trace'][-500:]) for e in errors]}")
            time.sleep(1)

    def unpause(self, dag_id: str) -> None:
        self.wait_for_dag(dag_id)
        r = self.api.patch(f"/api/v2/dags/{dag_id}", json={"is_paused": False})
        assert r.status_code == 200 and r.json()["is_paused"] is False, r.text

    def trigger(self, dag_id: str, conf: dict, run_id: str | None = None) -> httpx.Response:
        """POST a manual run, as the UI's trigger form does."""
        body = {"logical_date": None, "conf": conf}
        if run_id:
            body["dag_run_id"] = run_id
        return self.api.post(f"/api/v2/dags/{dag_id}/dagRuns", json=body)

    def wait_for_run(self, dag_id: str, run_id: str, timeout_s: float = 600) -> dict:
        """The run once it is finished (success or failed); fails the test after timeout_s."""
        deadline = time.monotonic() + timeout_s
        while True:
            r = self.api.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")
            assert r.status_code == 200, r.text
            if r.json()["state"] in ("success", "failed"):
                return r.json()
            if time.monotonic() > deadline:
                pytest.fail(f"run {dag_id}/{run_id} still {r.json()['state']} after {timeout_s}s; "
                            f"tasks: {self.task_states(dag_id, run_id)}")
            time.sleep(1)

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str | None]:
        r = self.api.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances")
        return {t["task_id"]: t["state"] for t in r.json()["task_instances"]}

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int = 1) -> str:
        r = self.api.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/"
                         f"{try_number}", headers={"Accept": "application/json"})
        assert r.status_code == 200, r.text
        content = r.json()["content"]
        return "\n".join(c.get("event", "") if isinstance(c, dict) else str(c) for c in content)


def _no_schedules(node):
    """The node with every `schedule` set to null: the test stack runs only what tests trigger."""
    if isinstance(node, dict):
        return {k: None if k == "schedule" else _no_schedules(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_no_schedules(v) for v in node]
    return node


# the test stack's run deadline (Deadline Alert), every group: shorter than any run can be
# (four tasks, one a Spark job), so a test's run misses it however fast the machine
STACK_DEADLINE = "5s"


def _airflow_test_config(bucket: str) -> Path:
    """The repo's example config with an archive root and token store of the test stack's
    own, and no schedules. A fixed path and content, so every session means the same."""
    raw = _no_schedules(yaml.safe_load((localservices.ROOT / "config" / "kafka-archive.yaml")
                                       .read_text()))
    home = localservices.SERVICES_DIR / "airflow"
    raw["archive_root"] = f"s3://{bucket}/airflow-stack"
    raw["token_root"] = str(home / "tokens")
    for group in raw["groups"].values():  # mail to alerts.email_to, subject naming the run
        group["deadline"] = STACK_DEADLINE
        # the stack's tests kill and time spark-submit: the example's Connect server is the
        # demo's (tests/integration/test_spark_connect.py runs the job over Connect)
        group.pop("spark_connect", None)
    path = home / "test-config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("# written by tests/integration/conftest.py for the airflow fixture\n"
                    + yaml.safe_dump(raw, sort_keys=False))
    return path


@pytest.fixture(scope="session")
def airflow_stack(service_env, kafka, s3, smtp_maildir, postgres) -> AirflowStack:
    """A running Airflow for tests that go through its REST API or scheduler.

    Started once per session (about 15 s, plus `airflow db migrate` the first time) unless
    already running, and stopped at the end only if this session started it. Its DAGs are
    the repo's dags/ with the config `_airflow_test_config` writes: the example config
    with its own archive root (s3://<bucket>/airflow-stack) and token store
    (.cache/services/airflow/tokens), and no schedules, so nothing runs unless triggered.
    Kafka, S3, SMTP and PostgreSQL (its metadata database) are started first; alert mail
    lands in `smtp_maildir`.

    Use it like this (DAGs start paused; runs of one group queue one at a time):

        def test_x(airflow_stack):
            airflow_stack.unpause("kafka_archive_backup")
            r = airflow_stack.trigger("kafka_archive_backup", {"topics": ["t"]})
            assert r.status_code == 200, r.text
            run = airflow_stack.wait_for_run("kafka_archive_backup", r.json()["dag_run_id"])
            airflow_stack.api.get(...)   # any REST API v2 call, already authenticated

    Trigger with a `topics` subset of your own unique topics: the broker is shared with
    other tests. The stack's own files: .cache/services/airflow/ (service.log,
    components/<name>.log, logs/ for task logs). A stack started by hand
    (`localservices.py start airflow`) is reused with whatever config it was started with.
    """
    env = {**service_env, "KAFKA_ARCHIVE_CONFIG": str(_airflow_test_config(s3.bucket))}
    if localservices.AIRFLOW.pid() is not None or EXTERNAL:
        env = service_env  # reuse the running one as it is
    with running("airflow", env):
        url = localservices.airflow_url(service_env)
        r = httpx.post(f"{url}/auth/token", timeout=30, json={
            "username": localservices.AIRFLOW_USER,
            "password": localservices.airflow_password(service_env)})
        assert r.status_code == 201, f"POST /auth/token: {r.status_code} {r.text}"
        with httpx.Client(base_url=url, timeout=30, headers={
                "Authorization": f"Bearer {r.json()['access_token']}"}) as api:
            yield AirflowStack(url, api, localservices.airflow_config_file())


@pytest.fixture
def browser(tmp_path):
    """Headless Chromium for one test (tests/support/browser.py)."""
    with open_browser(tmp_path / "chromium-profile") as driver:
        yield driver
