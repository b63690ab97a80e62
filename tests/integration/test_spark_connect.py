"""The archive job as a Spark Connect client (issue 43) on the real local Connect server
(`localservices start spark-connect`): every message once, read back by Hadoop's own
reader; a client killed mid-job and the run done again; a server that cannot be reached,
named at once and classified transient."""

from __future__ import annotations

import multiprocessing
import os
import signal
import socket
import time

import pytest

from kafka_archive import spark
from kafka_archive.airflow import connections
from kafka_archive.archive import job
from kafka_archive.errors import TransientError
from tests.integration.test_backup_archive import consumed, varied_messages
from tests.support.pipeline import GROUP, Pipeline


@pytest.fixture
def pipeline(airflow_env, kafka, s3, unique, tmp_path, monkeypatch):
    made = Pipeline(airflow_env, kafka, s3, f"c{unique}", tmp_path)
    made.in_env(monkeypatch)
    return made


def over_connect(url: str, plan_url: str) -> dict:
    """What ArchiveOperator does for a group with `spark_connect` (without Airflow's task)."""
    cfg = connections.load_config()
    session = spark.connect_session(url, GROUP)
    try:
        session.interruptAll()
        return job.recorded(session, cfg, plan_url, connections.storage(cfg.s3_conn_id))
    finally:
        spark.close_client(session)


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
        spark.connect_session(f"sc://127.0.0.1:{port}", GROUP)
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
