"""Any step may crash; the next run completes, and the archive is exactly what an
uninterrupted run writes, byte for byte, with no duplicate and no hole."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from test_backup_archive import consumed, varied_messages

from kafka_archive import config, layout
from kafka_archive.airflow import connections
from kafka_archive.commit import protocol as committing
from kafka_archive.errors import TerminalError, TransientError
from kafka_archive.plan import runs
from kafka_archive.plan.planning import Plan
from kafka_archive.tokens import TokenConflictError
from tests.support.pipeline import Pipeline


@pytest.fixture(scope="module")
def data(airflow_env, kafka, s3, tmp_path_factory):
    """Two topics, produced once, and the archive of an uninterrupted run of them."""
    prefix = f"crash{os.getpid()}{int(time.time())}"
    reference = Pipeline(airflow_env, kafka, s3, prefix, tmp_path_factory.mktemp("ref"), name="ref")
    topics = [reference.create_topic("a", 4), reference.create_topic("b", 2)]
    for n, topic in enumerate(topics):
        reference.produce(varied_messages(topic, 4 if n == 0 else 2, 4000, seed=n))
    reference.run()
    return prefix, topics, reference.data_files(), consumed(kafka, topics)


@pytest.fixture
def crashing(data, airflow_env, kafka, s3, tmp_path, monkeypatch, unique):
    pipeline = Pipeline(airflow_env, kafka, s3, data[0], tmp_path, name=f"crash-{unique}")
    pipeline.in_env(monkeypatch)
    return pipeline


def assert_same_as_uninterrupted(pipeline: Pipeline, data) -> None:
    _, topics, reference_files, expected = data
    archived = pipeline.archived_records()
    assert len(archived) == len(set(archived))        # no duplicate
    assert set(archived) == expected                   # no hole, nothing lost
    assert pipeline.data_files() == reference_files    # byte for byte
    assert connections.storage("kafka_archive_s3").get_or_none(
        layout.inflight_marker(pipeline.root, "backup")) is None


def test_crash_after_plan(crashing, data):
    assert crashing.plan("crashed-run") is not None
    crashing.run()
    assert_same_as_uninterrupted(crashing, data)


def test_crash_in_the_middle_of_the_spark_job(crashing, data):
    plan_url = crashing.plan("crashed-run")
    planned = len(Plan.from_json(connections.storage("kafka_archive_s3").get_bytes(plan_url)).slices)
    job = crashing.archive(plan_url)
    deadline = time.monotonic() + 180
    while not crashing.data_files():  # kill as soon as the first file is durable
        assert job.poll() is None, "the job finished before it could be interrupted"
        assert time.monotonic() < deadline, "no file appeared within 180 s"
        time.sleep(0.05)
    os.killpg(job.pid, signal.SIGKILL)
    job.wait()
    assert 0 < len(crashing.data_files()) < planned  # really the middle
    crashing.run_dag()  # the next Airflow run resumes the killed job's plan
    assert_same_as_uninterrupted(crashing, data)


def test_crash_after_files_written_before_commit(crashing, data):
    plan_url = crashing.plan("crashed-run")
    crashing.archive_to_end(plan_url)
    crashing.run()
    assert_same_as_uninterrupted(crashing, data)


class CrashAfterFirstWrite:
    """The real token store, except that the process 'dies' after one token write."""

    def __init__(self, store):
        self.store, self.writes = store, 0

    def __getattr__(self, name):
        return getattr(self.store, name)

    def write(self, token, expected_version):
        if self.writes == 1:
            raise SystemExit("simulated crash between two topics")
        self.writes += 1
        return self.store.write(token, expected_version)


def test_crash_during_commit_between_two_topics(crashing, data, smtp_maildir):
    plan_url = crashing.plan("crashed-run")
    crashing.archive_to_end(plan_url)
    storage = connections.storage("kafka_archive_s3")
    plan = Plan.from_json(storage.get_bytes(plan_url))
    assert len(plan.topics()) == 2
    with pytest.raises(SystemExit):
        committing.commit(config.load(), plan, storage, CrashAfterFirstWrite(crashing.tokens),
                          runs.now_utc())
    assert len(crashing.token_offsets()) == 1  # one topic advanced, one not
    crashing.run()  # finishes the commit, and mails the token it found advanced
    assert_same_as_uninterrupted(crashing, data)


def test_two_commits_racing_on_one_token_exactly_one_wins(crashing, data):
    storage = connections.storage("kafka_archive_s3")
    first = crashing.plan("racer-1")
    crashing.archive_to_end(first)  # a job writes only while its plan is in flight
    # a second planner that knew of no other plan (the in-flight mark and the note of the
    # last plan both gone) plans from the same token version: the tokens' compare-and-swap
    # is what stands between the two (with the note, the second plan gives the first up,
    # and the first's commit refuses: the simulation's GIVEN_UP_RUNS_COMMIT_RE_EXECUTED)
    storage.delete(layout.inflight_marker(crashing.root, "backup"))
    storage.delete(layout.last_plan_marker(crashing.root, "backup"))
    second = crashing.plan("racer-2")
    crashing.archive_to_end(second)
    barrier, outcomes = threading.Barrier(2), {}

    def commit(plan_url):
        barrier.wait()
        for _ in range(3):  # a transient error (the other's catalog rebuild under way) is
            try:            # retried, as the commit task's retries do
                outcomes[plan_url] = crashing.commit(plan_url)
                return
            except TransientError:
                continue
            except TerminalError as exc:
                outcomes[plan_url] = exc
                return

    threads = [threading.Thread(target=commit, args=(u,)) for u in (first, second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lost = [o for o in outcomes.values() if isinstance(o, TokenConflictError)]
    won = [o for o in outcomes.values() if isinstance(o, dict)]
    assert len(lost) == 1 and len(won) == 1, outcomes
    assert "backup" in str(lost[0]) and "expected" in str(lost[0])
    winner = won[0]["run_id"]
    for topic in data[1]:
        assert crashing.tokens.read("backup", topic).token.run_id == winner
    loser = "racer-1" if winner == "racer-2" else "racer-2"
    assert storage.get_or_none(layout.run_file(crashing.root, "backup", loser,
                                               "committed.json")) is None
