"""The archive job on a real Spark standalone cluster (tests/support/localservices.py `spark`: a
master and two one-core workers whose executors run a Python without the project and
have no AWS_* variables): the DAGs archive through it, slices spread over both workers,
the files are byte-identical to the same plan run in local mode, a worker killed mid-job
costs nothing, and the S3 secret shows up in no log, event log, UI page or command line."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from tests.support.pipeline import airflow
from test_backup_archive import consumed
from test_sequencefile_hadoop import hadoop_read

from tests.support import localservices
from kafka_archive.formats.sequencefile import BYTES_WRITABLE
from kafka_archive.storage import crc32c, s3_checksum
from tests.support.pipeline import Pipeline, forget_job, objects

TOPICS, PARTITIONS, PER_PARTITION = ("orders", "clicks", "billing"), 4, 3
HOUR_MS = 3_600_000
# Every Kafka fetch of the worker-kill test waits fetch.max.wait.ms for a minimum it never
# reaches and brings one record batch: a slice of n messages produced one batch each takes
# about n x 1.5 s on any machine, so the test finds its tasks running without any sleep
SLOW_FETCHES = {"fetch.min.bytes": 1_048_576, "fetch.max.wait.ms": 1500,
                "max.partition.fetch.bytes": 1}


def spark_section(cluster, events: Path, **conf: str) -> str:
    """The config's `spark:` section: the cluster's conf plus an uncompressed event log."""
    events.mkdir(parents=True, exist_ok=True)
    conf = {**cluster.conf, "spark.eventLog.enabled": "true", "spark.eventLog.dir": f"file://{events}",
            "spark.eventLog.compress": "false", "spark.eventLog.rolling.enabled": "false", **conf}
    return "spark:\n  conf:\n" + "".join(f"    {k}: {json.dumps(v)}\n" for k, v in conf.items())


def event_log(folder: Path) -> list[dict]:
    apps = sorted(folder.glob("app-*"))
    assert len(apps) == 1, f"expected one application's event log in {folder}: {apps}"
    return [json.loads(line) for line in apps[0].read_text().splitlines()]


def executor_workers(events: list[dict], cluster) -> dict[str, str]:
    """Executor id -> the worker (service name) it ran on, from the executors' log URLs,
    which point at their worker's web UI."""
    by_ui = {url: name for name, url in cluster.worker_uis.items()}
    return {e["Executor ID"]: by_ui[e["Executor Info"]["Log Urls"]["stdout"].split("/logPage")[0]]
            for e in events if e["Event"] == "SparkListenerExecutorAdded"}


def task_ends(events: list[dict]) -> list[tuple[int, str, str]]:
    """(partition index, executor id, end reason) of every task attempt."""
    return [(e["Task Info"]["Partition ID"], e["Task Info"]["Executor ID"],
             e["Task End Reason"]["Reason"]) for e in events if e["Event"] == "SparkListenerTaskEnd"]


def data_files(s3, root_key: str, group: str) -> dict[str, bytes]:
    """The group's data files (no _SUCCESS, _finalized.json or other metadata)."""
    return {k: v for k, v in objects(s3, root_key, f"{group}/").items()
            if not any(part.startswith("_") for part in k.split("/"))}


def planned_run(s3, root_key: str, group: str) -> str:
    plans = [k for k in objects(s3, root_key, f"_runs/{group}/") if k.endswith("/plan.json")]
    assert len(plans) == 1, plans
    return f"s3://{s3.bucket}/{root_key}/{plans[0]}"


def assert_no_secret(secret: str, where: str, text: str) -> None:
    assert secret not in text, f"the S3 secret key appears in {where}"


def spark_texts(cluster_homes: list[Path], *folders: Path) -> dict[str, str]:
    """Every file the Spark services and a job left (service logs, executors' stdout and
    stderr under the workers' work dirs, job logs, event logs), by path."""
    texts = {}
    for folder in [*cluster_homes, *folders]:
        for path in folder.rglob("*"):
            if path.is_file() and path.suffix not in (".jar", ".zip"):
                texts[str(path)] = path.read_text(errors="replace")
    return texts


SPARK_HOMES = [localservices.SERVICES_DIR / s.name for s in localservices.SPARK_SERVICES]


class ClusterArchive(Pipeline):
    """Both default groups (backup, partitioned: hourly from the JSON field ts) over the
    test's topics, archived on the cluster."""

    def __init__(self, env, kafka, s3, prefix, tmp_path, cluster):
        super().__init__(env, kafka, s3, prefix, tmp_path)
        self.events = tmp_path / "events"
        self.config_path.write_text(f"""\
kafka: {{bootstrap_servers: "{kafka}"}}
archive_root: {self.root}
token_root: {self.token_root}
groups:
  backup:
    topics: {{include: ["{prefix}-.*"]}}
  partitioned:
    topics: {{include: ["{prefix}-.*"]}}
    layout: {{kind: event_time, granularity: hour}}
    parser: {{kind: json, field: ts, unit: ms}}
""" + spark_section(cluster, self.events))
        # the DAG's archive task reaches the cluster through the Spark connection
        self.env["AIRFLOW_CONN_KAFKA_ARCHIVE_SPARK"] = json.dumps(
            {"conn_type": "spark", "host": cluster.master})


@pytest.fixture(scope="module")
def archive(airflow_env, kafka, s3, spark_cluster, tmp_path_factory):
    """3 topics x 4 partitions, a few JSON messages each over two hours of event time."""
    prefix = f"cl{os.urandom(4).hex()}"
    archive = ClusterArchive(airflow_env, kafka, s3, prefix, tmp_path_factory.mktemp("cluster"),
                             spark_cluster)
    topics = [archive.create_topic(name, PARTITIONS) for name in TOPICS]
    now = int(time.time() * 1000)
    archive.produce((topic, p, f"k{i}".encode(), json.dumps({"ts": now - HOUR_MS + i * 60_000,
                                                            "i": i}).encode(),
                     [("source", b"test")] if i % 2 else None)
                    for topic in topics for p in range(PARTITIONS) for i in range(PER_PARTITION))
    archive.expected = consumed(kafka, topics)
    assert len(archive.expected) == len(TOPICS) * PARTITIONS * PER_PARTITION
    return archive


@pytest.mark.parametrize("group", ["backup", "partitioned"])
def test_dag_on_the_cluster_writes_what_local_mode_writes(archive, group, spark_cluster, s3, sc,
                                                          service_env, monkeypatch, tmp_path):
    for old in archive.events.glob("app-*"):
        old.unlink()  # the other group's run
    dag = airflow(archive.env, "dags", "test", f"kafka_archive_{group}")

    events = event_log(archive.events)
    workers = executor_workers(events, spark_cluster)
    ends = task_ends(events)
    assert len(ends) == len(TOPICS) * PARTITIONS  # one task per slice, none retried
    assert {reason for _, _, reason in ends} == {"Success"}
    used = {workers[executor] for _, executor, _ in ends}
    assert used == set(spark_cluster.worker_uis), f"tasks ran only on {used}"
    environment = next(e for e in events if e["Event"] == "SparkListenerEnvironmentUpdate")
    assert environment["Spark Properties"]["spark.pyspark.python"].endswith(
        "executor-venv/bin/python")

    on_cluster = data_files(s3, archive.root_key, group)
    plan_url = planned_run(s3, archive.root_key, group)
    manifest = json.loads(s3.client.get_object(
        Bucket=s3.bucket, Key=plan_url.split(f"{s3.bucket}/", 1)[1].replace(
            "plan.json", "manifest.json"))["Body"].read())
    listed = {f["url"].split(f"{archive.root_key}/", 1)[1]: f["crc32c"]
              for row in manifest["slices"] for f in row["files"]}
    assert {path: s3_checksum(crc32c(data)) for path, data in on_cluster.items()} == listed
    assert len(on_cluster) >= len(TOPICS) * PARTITIONS

    archive.in_env(monkeypatch)
    forget_job(s3, plan_url, archive.root_key, on_cluster)
    archive.archive_to_end(plan_url, master="local[2]")
    assert data_files(s3, archive.root_key, group) == on_cluster, \
        "the same plan in local mode wrote other bytes than the cluster"

    folder = tmp_path / "hadoop"
    folder.mkdir()
    for n, data in enumerate(on_cluster.values()):
        (folder / f"part-{n:05d}").write_bytes(data)
    values = sorted(value for _, value in hadoop_read(sc, folder, BYTES_WRITABLE))
    assert values == sorted(value for *_, value, _, _ in archive.expected)

    secret = service_env["KAFKA_ARCHIVE_S3_SECRET_KEY"]
    assert_no_secret(secret, f"the output of airflow dags test kafka_archive_{group}",
                     dag.stdout + dag.stderr)
    assert "--py-files" in dag.stdout + dag.stderr  # the command line the task logged


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_worker_killed_mid_job_changes_nothing_and_no_secret_leaks(
        airflow_env, kafka, s3, spark_cluster, service_env, monkeypatch, tmp_path):
    ui = _free_port()
    events = tmp_path / "events"
    p = Pipeline(airflow_env, kafka, s3, f"kill{os.urandom(4).hex()}", tmp_path,
                 kafka_properties=SLOW_FETCHES,
                 extra=spark_section(spark_cluster, events, **{"spark.ui.enabled": "true",
                                                                    "spark.ui.port": str(ui)}))
    topic = p.create_topic("slow", PARTITIONS)
    for i in range(PARTITIONS * 6):  # one batch per message: one message per fetch
        p.produce([(topic, i % PARTITIONS, None, f"message {i}".encode(), None)])
    p.in_env(monkeypatch)
    plan_url = p.plan("manual__kill")
    secret = service_env["KAFKA_ARCHIVE_S3_SECRET_KEY"]

    job = p.archive(plan_url, spark_cluster.master)
    try:
        driver = f"http://127.0.0.1:{ui}/api/v1/applications"
        executors = _wait_for_both_executors_busy(job, p, driver)
        app = httpx.get(driver, timeout=10).json()[0]["id"]
        live = {
            "the driver UI's environment (REST)": httpx.get(f"{driver}/{app}/environment", timeout=10).text,
            "the driver UI's environment page": httpx.get(f"http://127.0.0.1:{ui}/environment/",
                                                          timeout=10, follow_redirects=True).text,
            "the master UI (JSON)": httpx.get(f"{spark_cluster.master_ui}/json/", timeout=10).text,
            "the master UI's application page": httpx.get(f"{spark_cluster.master_ui}/app/",
                                                          params={"appId": app}, timeout=10).text,
            **{f"the {name} UI (JSON)": httpx.get(f"{url}/json/", timeout=10).text
               for name, url in spark_cluster.worker_uis.items()},
            "ps": subprocess.run(["ps", "-eww", "-o", "pid,args"], capture_output=True,
                                 text=True, check=True).stdout,
        }
        assert "spark.executorEnv.AWS_SECRET_ACCESS_KEY" in live["the driver UI's environment (REST)"]
        for where, text in live.items():
            assert_no_secret(secret, where, text)
        _assert_executors_run_the_small_python(app)

        victim = next(name for name, url in spark_cluster.worker_uis.items()
                      if url in executors[-1]["executorLogs"]["stdout"])
        pid = localservices.SERVICES[victim].pid()
        assert b"deploy.worker.Worker" in Path(f"/proc/{pid}/cmdline").read_bytes()
        os.kill(pid, signal.SIGKILL)
        assert job.wait(timeout=600) == 0, p.job_log.read_text()[-3000:]
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
        localservices.SERVICES["spark-worker-2"].start(service_env)
        localservices.SERVICES["spark-worker-1"].start(service_env)

    log = event_log(events)
    workers = executor_workers(log, spark_cluster)
    ends = task_ends(log)
    lost = [(part, ex) for part, ex, reason in ends if reason != "Success"]
    assert lost and all(workers[ex] == victim for _, ex in lost), ends
    succeeded = {part: workers[ex] for part, ex, reason in ends if reason == "Success"}
    assert set(succeeded) == set(range(PARTITIONS))
    assert all(succeeded[part] != victim for part, _ in lost)  # retried on the other worker

    summary = p.commit(plan_url)
    assert summary["records"] == PARTITIONS * 6
    records = p.archived_records()
    assert len(records) == len({r[:3] for r in records}) == PARTITIONS * 6  # no duplicate
    on_cluster = p.data_files()
    forget_job(s3, plan_url, p.root_key, on_cluster)
    p.archive_to_end(plan_url, master="local[2]")
    assert p.data_files() == on_cluster

    environment = next(e for e in log if e["Event"] == "SparkListenerEnvironmentUpdate")
    assert environment["Spark Properties"]["spark.executorEnv.AWS_SECRET_ACCESS_KEY"] \
        == "*********(redacted)"
    for where, text in spark_texts(SPARK_HOMES, tmp_path).items():
        assert_no_secret(secret, where, text)
    for service in localservices.SPARK_SERVICES:  # the workers' (executors') environment
        environ = Path(f"/proc/{service.pid()}/environ").read_bytes()
        assert secret.encode() not in environ and b"AWS_" not in environ, service.name


def _wait_for_both_executors_busy(job, p, driver: str, timeout_s: float = 300) -> list[dict]:
    """The driver's executors (REST API) once each is running a task."""
    deadline = time.monotonic() + timeout_s
    while True:
        assert job.poll() is None, f"the job ended early:\n{p.job_log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"no task on both executors after {timeout_s} s"
        try:
            apps = httpx.get(driver, timeout=5).json()
            executors = [e for e in httpx.get(f"{driver}/{apps[0]['id']}/executors", timeout=5).json()
                         if e["id"] != "driver"] if apps else []
        except (httpx.TransportError, ValueError):  # no UI yet, or "Spark is starting up"
            executors = []
        if len(executors) == 2 and all(e["activeTasks"] > 0 for e in executors):
            return executors
        time.sleep(0.5)


def _assert_executors_run_the_small_python(app: str, timeout_s: float = 120) -> None:
    """The executors' Python workers run .cache/executor-venv's interpreter, which cannot
    import the project: the library they run came in the job's zip."""
    python = str(localservices.executor_python())
    deadline = time.monotonic() + timeout_s
    while len(daemons := _executor_pythons(app)) < 2:  # each executor starts its own
        assert time.monotonic() < deadline, f"Python workers of two executors: {daemons}"
        time.sleep(0.5)
    assert set(daemons.values()) == {python}, daemons
    check = subprocess.run([python, "-c", "import kafka_archive"], capture_output=True, text=True)
    assert check.returncode != 0 and "No module named 'kafka_archive'" in check.stderr


def _executor_pythons(app: str) -> dict[int, str]:
    """Executor pid -> the interpreter of the PySpark daemon it started, for this app."""
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            parent_argv = Path(f"/proc/{parent}/cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if b"pyspark.daemon" in argv and app.encode() in parent_argv:
            found[parent] = argv[0].decode()
    return found


def test_executor_python_imports_the_job_from_the_zip_alone(tmp_path):
    """Fast and without services: every module the executors unpickle imports in
    .cache/executor-venv with only the library zip (what a new import in the job breaks)."""
    from kafka_archive import spark

    code = ("import sys; sys.path.insert(0, sys.argv[1]); "
            "import kafka_archive.archive.job as job, kafka_archive.formats.batch; "
            "print(job.__file__)")
    result = subprocess.run([str(localservices.executor_python()), "-c", code,
                             str(spark.library_zip(tmp_path))], capture_output=True, text=True,
                            cwd=tmp_path, env={"PATH": os.environ["PATH"]})
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().startswith(str(tmp_path))
