"""The archive job as a Spark Connect client (issue 43) on the real local Connect servers
(`localservices start spark-connect`, and `spark-connect-cluster` on the standalone
cluster): every message once, read back by Hadoop's own reader; the same bytes as
spark-submit writes for the same plan; no credential in a command line, a plan, the
server's UI, event log or logs; a client killed mid-job and the run done again; a server
that cannot be reached, named at once and classified transient."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import signal
import socket
import time
from pathlib import Path

import pytest

from kafka_archive import spark
from kafka_archive.airflow import connections
from kafka_archive.archive import job
from kafka_archive.errors import TransientError
# (by name: the fixture `spark_connect`, the server's URL, would hide the module)
from kafka_archive.spark_connect import connect_session, connected
from tests.integration.test_backup_archive import consumed, varied_messages
from tests.integration.test_kafka_sasl import SASL_PROPERTIES
from tests.support import localservices
from tests.support.pipeline import GROUP, Pipeline, forget_job, objects


@pytest.fixture
def pipeline(airflow_env, kafka, s3, unique, tmp_path, monkeypatch):
    made = Pipeline(airflow_env, kafka, s3, f"c{unique}", tmp_path)
    made.in_env(monkeypatch)
    return made


def over_connect(url: str, plan_url: str) -> dict:
    """What ArchiveOperator does for a group with `spark_connect` (without Airflow's task)."""
    cfg = connections.load_config()
    storage = connections.storage(cfg.s3_conn_id)
    with connected(url, cfg, plan_url, storage) as session:
        return job.recorded(session, cfg, plan_url, storage)


def hadoop_read(pipeline: Pipeline, sc, tmp_path) -> list[tuple]:
    """(topic, partition, offset) of every record Hadoop's SequenceFile reader finds."""
    from kafka_archive.formats.records import decode

    found = []
    for path, data in pipeline.data_files().items():
        local = tmp_path / "read" / path
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_bytes(data)
        topic, partition = local.parts[-3], int(local.parts[-2].split("=")[1])
        for key, value in sc.sequenceFile(str(local), "org.apache.hadoop.io.BytesWritable",
                                          "org.apache.hadoop.io.BytesWritable").collect():
            found.append((topic, partition, decode(bytes(key), bytes(value)).offset))
    return found


def test_a_run_over_connect_archives_each_message_once(pipeline, kafka, spark_connect, sc,
                                                       tmp_path):
    topics = [pipeline.create_topic(name, 4) for name in ("orders", "clicks")]
    for n, topic in enumerate(topics):
        pipeline.produce(varied_messages(topic, 4, 120, seed=n))
    expected = consumed(kafka, topics)
    plan_url = pipeline.plan("connect-1")
    manifest = over_connect(spark_connect, plan_url)
    assert sum(r["records"] for r in manifest["slices"]) == 240
    pipeline.commit(plan_url)
    assert set(pipeline.archived_records()) == expected
    read = hadoop_read(pipeline, sc, tmp_path)
    assert len(read) == len(set(read)) == 240
    assert set(read) == {(t, p, o) for t, p, o, *_ in expected}


@pytest.fixture(scope="module")
def spark_connect_cluster(spark_cluster, service_env, s3) -> str:
    """The Connect server on the standalone cluster (its executors on the workers, the
    executor venv's Python, S3 credentials from the server's spark-defaults.conf)."""
    server = localservices.SERVICES["spark-connect-cluster"]
    started = server.start(service_env)
    try:
        yield localservices.spark_connect_url(service_env, cluster=True)
    finally:
        if started:
            server.stop()


@pytest.mark.parametrize("where", ["local", "cluster"])
def test_over_connect_the_archive_is_what_spark_submit_writes(where, request, pipeline, kafka,
                                                              s3):
    """The same plan archived over Connect and then, its files and manifest forgotten, by
    spark-submit (local[2]): byte for byte the same files."""
    url = request.getfixturevalue("spark_connect_cluster" if where == "cluster" else "spark_connect")
    topics = [pipeline.create_topic(name, 3) for name in ("orders", "clicks")]
    for n, topic in enumerate(topics):
        pipeline.produce(varied_messages(topic, 3, 150, seed=20 + n))
    plan_url = pipeline.plan(f"identity-{where}")
    manifest = over_connect(url, plan_url)
    over_connect_files = pipeline.data_files()
    assert sum(r["records"] for r in manifest["slices"]) == 300
    assert len(over_connect_files) >= 6

    forget_job(s3, plan_url, pipeline.root_key, over_connect_files)
    assert not pipeline.data_files()
    pipeline.archive_to_end(plan_url, spark_submit=True)
    assert pipeline.data_files() == over_connect_files, \
        f"spark-submit wrote other bytes than the job over Connect ({where})"


def _texts_below(folder: Path, skip: tuple[str, ...] = ()) -> dict[str, str]:
    return {str(p): p.read_text(errors="replace") for p in folder.rglob("*")
            if p.is_file() and p.suffix not in (".jar", ".zip") and p.name not in skip}


def _ui_pages(ui: str) -> dict[str, str]:
    """The server's web UI: every tab and the REST API's views of the application."""
    import httpx

    with httpx.Client(base_url=ui, follow_redirects=True, timeout=30) as client:
        app = client.get("/api/v1/applications").json()[0]["id"]
        paths = ["/connect/", "/SQL/", "/jobs/", "/stages/", "/environment/", "/executors/",
                 *(f"/api/v1/applications/{app}/{view}"
                   for view in ("environment", "jobs", "stages", "sql", "executors"))]
        pages = {path: client.get(path) for path in paths}
        sessions = {f"/connect/session/?id={found}" for found in re.findall(
            r"/connect/session/\?id=([\w-]+)", pages["/connect/"].text)}
        pages |= {path: client.get(path) for path in sessions}
    assert all(page.status_code == 200 for page in pages.values()), \
        {path: page.status_code for path, page in pages.items()}
    return {f"the server's UI {path}": page.text for path, page in pages.items()}


def test_no_credential_in_a_command_line_plan_the_ui_event_log_or_a_log(
        airflow_env, kafka, s3, service_env, unique, tmp_path, monkeypatch, spark_connect_cluster,
        capfd):
    """A run over Connect on the cluster, Kafka through the SASL listener (its password in
    the Config the executors' tasks receive) and S3 with the server's own credentials: it
    archives everything, and neither secret appears in any process's command line, the
    plan or manifest, the server's UI (its Connect tab, SQL, jobs, environment, the REST
    API), its event log, the service and executor logs, or the client's output."""
    made = Pipeline(airflow_env, kafka, s3, f"cred{unique}", tmp_path,
                    bootstrap=localservices.kafka_sasl_bootstrap(service_env),
                    kafka_properties=SASL_PROPERTIES)
    made.in_env(monkeypatch)
    password = service_env["KAFKA_ARCHIVE_KAFKA_PASSWORD"]
    s3_secret = service_env["KAFKA_ARCHIVE_S3_SECRET_KEY"]
    topic = made.create_topic("secured", 2)
    made.produce(varied_messages(topic, 2, 60, seed=5))
    plan_url = made.plan("secured-1")
    manifest = over_connect(spark_connect_cluster, plan_url)
    made.commit(plan_url)
    assert sum(r["records"] for r in manifest["slices"]) == 60  # Kafka's password did work
    assert sum(made.token_offsets()[topic].values()) == 60

    texts = {"the client's output": "".join(capfd.readouterr()),
             **{f"s3://{s3.bucket}/{key}": data.decode(errors="replace")
                for key, data in objects(s3, made.root_key, "_runs/").items()},
             **_ui_pages(localservices.spark_connect_cluster_ui(service_env))}
    for pid in filter(str.isdigit, os.listdir("/proc")):  # the server's, its workers', everyone's
        try:
            texts[f"the command line of process {pid}"] = Path(
                f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
    homes = [localservices.SERVICES_DIR / name for name in (
        "spark-connect-cluster", *(s.name for s in localservices.SPARK_SERVICES))]
    for home in homes:  # service logs, executors' stdout and stderr, the event log
        texts |= _texts_below(home, skip=("spark-defaults.conf",))
    events = str(localservices.spark_connect_events())  # the server's application's
    assert any("SparkListenerConnectOperationStarted" in text
               for where, text in texts.items() if where.startswith(events)), "no event log"
    connect_tab = re.sub(r"<[^>]*>|\s+", " ", texts["the server's UI /connect/"])
    # it shows the job's statement, the pickled task (the Config, Kafka's password in it)
    # cut to its first bytes
    assert re.search(r"python_udf .* command: \S*\[truncated\(size=[\d,]+\)\]", connect_tab), \
        connect_tab[-3000:]
    for where, text in texts.items():
        assert password not in text, f"the Kafka password appears in {where}"
        assert s3_secret not in text, f"the S3 secret key appears in {where}"


def test_the_archive_and_replay_dags_run_over_connect(airflow_env, kafka, s3, spark_connect,
                                                      unique, tmp_path):
    """A group with `spark_connect`: `airflow dags test` of its archive DAG and of the replay
    DAG run their jobs as Connect clients (no spark-submit), each message archived once
    and replayed into its partition in order."""
    from tests.integration.test_replay import in_order, new_topic
    from tests.support.pipeline import airflow

    made = Pipeline(airflow_env, kafka, s3, f"cd{unique}", tmp_path,
                    group_extra="spark_connect: kafka_archive_spark_connect\n")
    topic = made.create_topic("src", 3)
    made.produce(varied_messages(topic, 3, 90, seed=3))
    original = in_order(kafka, topic)
    output = made.run_dag()  # fails the test if the run fails
    output = output.stdout + output.stderr
    assert sorted(made.archived_records()) == sorted(consumed(kafka, [topic]))
    assert "archived run" in output and "spark-submit" not in output, output[-3000:]

    target = new_topic(kafka, f"copy{unique}")
    replayed = airflow(made.env, "dags", "test", "kafka_archive_replay",
                       "--conf", json.dumps({"topic": topic, "to_topic": target}))
    output = replayed.stdout + replayed.stderr
    assert "replayed 90 messages" in output and "spark-submit" not in output, output[-3000:]
    assert in_order(kafka, target) == original


def _sleeping(seconds: float, started: str):
    """A task that says it started (a file in `started`, the server's workers being local),
    then sleeps."""
    def task(i: int):
        Path(started, str(i)).touch()
        time.sleep(seconds)
        yield {"i": i}
    return task


def test_a_retry_interrupts_its_own_jobs_earlier_attempt_and_no_other(pipeline, spark_connect,
                                                                     tmp_path):
    """One deployment's session holds every group's jobs: connecting for a job interrupts
    what an earlier attempt of that job left running, while another job (another group's
    run) goes on to its end."""
    from concurrent.futures import ThreadPoolExecutor

    cfg = connections.load_config()
    storage = connections.storage(cfg.s3_conn_id)

    def job_running(plan_url: str, started: Path):
        started.mkdir()
        with connected(spark_connect, cfg, plan_url, storage) as session:
            return spark.mapped(session, 1, _sleeping(30, str(started)), "a long job")

    def under_way(job, started: Path) -> None:
        deadline = time.monotonic() + 60
        while not any(started.glob("*")):
            if job.done():
                job.result()  # its error
            assert time.monotonic() < deadline, f"the job of {started.name} did not start"
            time.sleep(0.05)

    backup_run = "s3://b/root/_runs/backup/r1/plan.json"
    with ThreadPoolExecutor(2) as pool:  # one task each: both run at once on local[2]
        # one after the other: this process is two clients, as two Airflow tasks would be
        other = pool.submit(job_running, "s3://b/root/_runs/tables/r1/plan.json",
                            tmp_path / "other")
        under_way(other, tmp_path / "other")
        killed = pool.submit(job_running, backup_run, tmp_path / "killed")
        under_way(killed, tmp_path / "killed")
        with connected(spark_connect, cfg, backup_run, storage):
            pass  # the retry of backup's run: its earlier attempt's job is interrupted
        with pytest.raises(Exception, match="(?i)cancel|interrupt"):
            killed.result(timeout=60)
        assert other.result(timeout=60) == [{"i": 0}]


def _client(url: str, plan_url: str, env: dict, ready) -> None:
    os.environ.update(env)
    ready.set()
    over_connect(url, plan_url)


def test_a_client_killed_mid_job_and_the_run_done_again_loses_and_repeats_nothing(
        pipeline, kafka, spark_connect, sc, tmp_path):
    """SIGKILL of the client (the Airflow task) while its job runs on the server: the next
    attempt interrupts whatever is left of it in the group's session and archives the
    plan; each message once."""
    topic = pipeline.create_topic("kill", 4)
    pipeline.produce(varied_messages(topic, 4, 400, seed=7))
    expected = {(t, p, o) for t, p, o, *_ in consumed(kafka, [topic])}
    plan_url = pipeline.plan("connect-kill")
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    child = context.Process(target=_client, args=(spark_connect, plan_url, dict(os.environ), ready))
    child.start()
    assert ready.wait(60)
    deadline = time.monotonic() + 120
    while not pipeline.data_files():  # the kill point: the job's first file uploaded
        assert time.monotonic() < deadline and child.is_alive(), "the job wrote no file"
        time.sleep(0.05)
    os.kill(child.pid, signal.SIGKILL)
    child.join()
    over_connect(spark_connect, plan_url)
    pipeline.commit(plan_url)
    read = hadoop_read(pipeline, sc, tmp_path)
    assert len(read) == len(set(read)) == len(expected)  # 0 duplicated
    assert set(read) == expected  # 0 lost


def test_a_server_that_cannot_be_reached_is_named_within_10_s_as_transient(pipeline):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(TransientError, match=rf"Spark Connect server at 127.0.0.1:{port} "
                                             r"cannot be reached: gRPC status UNAVAILABLE"):
        connect_session(f"sc://127.0.0.1:{port}", GROUP)
    assert time.monotonic() - started < 10


def test_a_server_restarted_mid_run_fails_it_transient_and_the_next_run_finishes(
        pipeline, kafka, spark_connect, service_env, sc, tmp_path):
    """The Connect server stopped while a job runs (a restart, a crash): the run fails
    transient (Airflow retries it), and once the server is back the run is done again:
    each message once."""
    from concurrent.futures import ThreadPoolExecutor

    from tests.support import localservices

    topic = pipeline.create_topic("restart", 4)
    pipeline.produce(varied_messages(topic, 4, 400, seed=11))
    expected = {(t, p, o) for t, p, o, *_ in consumed(kafka, [topic])}
    plan_url = pipeline.plan("connect-restart")
    server = localservices.SERVICES["spark-connect"]
    with ThreadPoolExecutor(1) as pool:
        run = pool.submit(over_connect, spark_connect, plan_url)
        deadline = time.monotonic() + 120
        while not pipeline.data_files() and not run.done():  # the job under way
            assert time.monotonic() < deadline, "the job wrote no file"
            time.sleep(0.05)
        server.stop()
        try:
            run.result(timeout=120)
            finished_first = True  # the job was done before the server stopped
        except TransientError as exc:
            finished_first = False
            assert "Spark Connect server" in str(exc)
    server.start(service_env)
    if not finished_first:
        over_connect(spark_connect, plan_url)
    pipeline.commit(plan_url)
    read = hadoop_read(pipeline, sc, tmp_path)
    assert len(read) == len(set(read)) == len(expected)
    assert set(read) == expected
    print(f"server stopped {'after' if finished_first else 'during'} the job")
