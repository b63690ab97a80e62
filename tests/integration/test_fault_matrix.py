"""Faults between the pipeline and its services, on real proxies: each S3 fault in 5 runs at
random request positions with new data produced before every run, and Kafka's broker
stopped and restarted during the Spark job and during the plan.

Every run is plan, archive job, commit, as the DAG runs them (the job's `job.run` in one
long-lived local SparkContext, instead of a spark-submit per run, to keep 30 runs to a few
minutes); a failed run is left as a failed Airflow task would leave it. Every failure must
be a TransientError (kafka_archive.errors): these faults pass, and Airflow retries only
what says so; a Spark task's error reaches the driver as the class the task raised. After every run, an independent read of the archived files (listed and
read straight from MinIO, not through the proxies, not through the manifests) must hold
every offset below each token: no token is ever ahead of durable files. After the faults
stop, clean runs until the plan finds nothing left (one, or two when the last faulty run
left a plan in flight, which covers only the data produced before it): every message the
producer got an ack for is archived exactly once.

S3 faults and how they are made:
- `slowdown_503`, `internal_500`: HttpStatusFaults (tests/support/fault_proxies.py), a
  real HTTP proxy in front of MinIO, answers requests k .. k+n-1 of the run (k random in
  1..6, n random in 1..12) with S3's own 503 SlowDown / 500 InternalError body; botocore's
  bounded retries (kafka_archive.retries) absorb short bursts, longer ones fail the run.
  Toxiproxy works on TCP and cannot answer with an HTTP status, hence this proxy.
- `reset_peer`: Toxiproxy's reset_peer toxic: half the connections (toxicity 0.5) get a
  TCP RST a random 50..1500 ms after they open, wherever the request stream is then.
- `cut_mid_upload`: Toxiproxy's limit_data toxic on the client-to-S3 direction: 80% of the
  connections are closed after a random 2..60 KB, mostly inside a PUT body.
- `latency`: Toxiproxy's latency toxic on the S3-to-client direction, 50 ms +- 40 ms:
  the jitter reorders the answers to parallel requests; no timeout is near either at
  this delay or at the 150 ms +- 100 ms it was, which only took 68 s instead of 29 s.
"""

from __future__ import annotations

import io
import json
import os
import random
import signal
import threading
import time
from collections import Counter

import pytest
from kafka import KafkaProducer

from tests.support import localservices
from tests.support.fault_proxies import HttpStatusFaults, Toxiproxy
from kafka_archive import config as config_module, formats
from kafka_archive.airflow.connections import s3_environment
from kafka_archive.archive import job
from kafka_archive.errors import TransientError
from tests.support.pipeline import GROUP, Pipeline, shared_session

RUNS_PER_FAULT = 5
PARTITIONS = 2
SEED = int(os.environ.get("KAFKA_ARCHIVE_FAULT_SEED", time.time_ns() % 1_000_000))
RESULTS: list[str] = []


@pytest.fixture(scope="module")
def bench(service_env, airflow_env, kafka, s3, toxiproxy, sc):
    """The two S3 endpoints with faults (Toxiproxy, the status proxy) and a SparkContext."""
    first_port = int(service_env["KAFKA_ARCHIVE_PROXY_PORT"])
    s3_port = int(service_env["KAFKA_ARCHIVE_S3_PORT"])
    tox = Toxiproxy(toxiproxy)
    tox.proxy("s3", f"127.0.0.1:{first_port}", f"127.0.0.1:{s3_port}")
    statuses = HttpStatusFaults(first_port + 1, ("127.0.0.1", s3_port))
    print(f"\nfault matrix seed {SEED} (KAFKA_ARCHIVE_FAULT_SEED={SEED} repeats it)")
    yield {"toxiproxy": tox, "toxiproxy_endpoint": f"https://127.0.0.1:{first_port}",
           "statuses": statuses, "spark": sc, "session": shared_session(),
           "direct": localservices.s3_endpoint(service_env)}
    tox.delete("s3")
    tox.close()
    statuses.close()
    print("\n" + "\n".join(["FAULT MATRIX (seed %d)" % SEED, *RESULTS]))


class FaultRuns:
    """One topic, its producer's acks and its pipeline, with S3 reached through `endpoint`."""

    def __init__(self, bench, airflow_env, kafka, s3, tmp_path, monkeypatch, unique,
                 partitions: int):
        self.b, self.s3, self.monkeypatch = bench, s3, monkeypatch
        self.pipeline = Pipeline(airflow_env, kafka, s3, f"fault{unique}", tmp_path)
        self.pipeline.in_env(monkeypatch)
        self.topic = self.pipeline.create_topic("t", partitions)
        self.partitions = partitions
        self.acked: set[tuple[int, int]] = set()
        self.producer = KafkaProducer(bootstrap_servers=kafka, acks="all")
        self.rng = random.Random(f"{SEED}-{unique}")
        self.outcomes: Counter[str] = Counter()

    def through(self, endpoint: str) -> None:
        """Every S3 client of the next run (tasks, job driver, executors) uses endpoint."""
        conn = json.loads(self.pipeline.env["AIRFLOW_CONN_KAFKA_ARCHIVE_S3"])
        conn["extra"]["endpoint_url"] = endpoint
        self.monkeypatch.setenv("AIRFLOW_CONN_KAFKA_ARCHIVE_S3", json.dumps(conn))
        for name, value in s3_environment("kafka_archive_s3").items():
            self.monkeypatch.setenv(name, value)  # the job's driver (Storage.from_environment)
            self.b["spark"].environment[name] = value  # its Python workers

    def produce(self, count: int) -> None:
        for _ in range(count):
            partition = self.rng.randrange(self.partitions)
            value = self.rng.randbytes(self.rng.randrange(500, 4000))
            sent = self.producer.send(self.topic, value=value, partition=partition).get(timeout=60)
            self.acked.add((sent.partition, sent.offset))

    def run(self, run_id: str, during_job=None) -> str:
        """plan, archive, commit; "ok", "idle" (nothing to plan) or the step that failed."""
        step = "plan"
        try:
            plan_url = self.pipeline.plan(run_id)
            if plan_url is None:
                return "idle"
            step = "archive"
            cfg = config_module.load(self.pipeline.config_path)
            if during_job is None:
                job.run(self.b["session"], cfg, plan_url)
            else:
                failure = []
                worker = threading.Thread(target=lambda: _capture(
                    failure, job.run, self.b["session"], cfg, plan_url))
                worker.start()
                during_job()
                worker.join(timeout=600)
                assert not worker.is_alive(), "the archive job did not end within 600 s"
                if failure:
                    raise failure[0]
            step = "commit"
            self.pipeline.commit(plan_url)
            return "ok"
        except Exception as exc:  # a failed task: Airflow would retry or mail it
            # every fault here passes, so every failure must say it may: Airflow retries a
            # TransientError and fails a TerminalError (or anything unclassified) for good
            assert isinstance(exc, TransientError), (
                f"{run_id}: {step} failed with {type(exc).__module__}.{type(exc).__name__}, "
                f"not a TransientError: {exc}")
            return f"{step} failed: {type(exc).__name__} ({str(exc)[:120]})"

    def archived(self) -> Counter[tuple[int, int]]:
        """(partition, offset) of every archived message, read from the files in MinIO."""
        found: Counter[tuple[int, int]] = Counter()
        prefix = f"{self.pipeline.root_key}/{GROUP}/{self.topic}/"
        for page in self.s3.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.s3.bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                partition = int(obj["Key"][len(prefix):].split("/")[0].split("=")[1])
                data = self.s3.client.get_object(Bucket=self.s3.bucket, Key=obj["Key"])["Body"].read()
                found.update((partition, r.offset) for r in formats.read(io.BytesIO(data)))
        return found

    def assert_no_token_ahead_of_files(self, run: str) -> None:
        files = self.archived()
        token = self.pipeline.token_offsets().get(self.topic, {})
        for partition, next_offset in token.items():
            holes = [o for o in range(next_offset) if (partition, o) not in files]
            assert not holes, (f"after {run}: token of partition {partition} at {next_offset} "
                               f"but no file holds offsets {holes[:10]}")

    def finish_clean(self, fault: str) -> None:
        """Faults stopped: clean runs until nothing is left; then exactly the acked messages."""
        self.through(self.b["direct"])
        clean = 0
        while (outcome := self.run(f"clean-{clean}")) != "idle":
            assert outcome == "ok", f"clean run {clean} after {fault}: {outcome}"
            self.assert_no_token_ahead_of_files(f"clean run {clean}")
            clean += 1
            assert clean <= 2, "more than two clean runs needed"
        files = self.archived()
        missing = self.acked - set(files)
        duplicates = {k: n for k, n in files.items() if n > 1}
        unexpected = set(files) - self.acked
        RESULTS.append(f"{fault:16} runs {sum(self.outcomes.values())}: "
                       + ", ".join(f"{n} {o}" for o, n in sorted(self.outcomes.items()))
                       + f"; clean runs {clean}; acked {len(self.acked)}, archived "
                         f"{sum(files.values())}, missing {len(missing)}, duplicate "
                         f"{len(duplicates)}")
        print("\n" + RESULTS[-1])
        assert not missing and not duplicates and not unexpected, RESULTS[-1]
        self.producer.close()


def _capture(failure: list, fn, *args) -> None:
    try:
        fn(*args)
    except Exception as exc:
        failure.append(exc)


@pytest.fixture
def faults(request, bench, airflow_env, kafka, s3, tmp_path, monkeypatch, unique) -> FaultRuns:
    partitions = getattr(request, "param", PARTITIONS)
    return FaultRuns(bench, airflow_env, kafka, s3, tmp_path, monkeypatch, unique, partitions)


def _toxic(faults: FaultRuns, fault: str) -> tuple[str, dict, str, float]:
    rng = faults.rng
    return {
        "reset_peer": ("reset_peer", {"timeout": rng.randrange(50, 1500)}, "upstream", 0.5),
        "cut_mid_upload": ("limit_data", {"bytes": rng.randrange(2_000, 60_000)}, "upstream", 0.8),
        "latency": ("latency", {"latency": 50, "jitter": 40}, "downstream", 1.0),
    }[fault]


@pytest.mark.parametrize("fault", ["slowdown_503", "internal_500", "reset_peer",
                                   "cut_mid_upload", "latency"])
def test_s3_fault(faults, bench, fault):
    for n in range(RUNS_PER_FAULT):
        faults.produce(faults.rng.randrange(4, 10))
        if fault in ("slowdown_503", "internal_500"):
            status = 503 if fault == "slowdown_503" else 500
            first, count = faults.rng.randrange(1, 7), faults.rng.randrange(1, 13)
            bench["statuses"].arm(status, first, count)
            faults.through(bench["statuses"].endpoint)
            outcome = faults.run(f"{fault}-{n}")
            statuses = bench["statuses"]
            where = (f"{statuses.failed} of {statuses.requests} requests answered {status}, "
                     f"from request {first}")
            assert statuses.failed > 0, "the fault hit no request"
            bench["statuses"].arm(None)
        else:
            kind, attributes, stream, toxicity = _toxic(faults, fault)
            name = bench["toxiproxy"].add_toxic("s3", kind, attributes, stream, toxicity)
            faults.through(bench["toxiproxy_endpoint"])
            try:
                outcome = faults.run(f"{fault}-{n}")
            finally:
                bench["toxiproxy"].remove_toxic("s3", name)
            where = json.dumps(attributes)
        print(f"{fault} run {n} ({where}): {outcome}")
        faults.outcomes[outcome.split(" (")[0]] += 1
        faults.assert_no_token_ahead_of_files(f"{fault} run {n}")
    faults.finish_clean(fault)


@pytest.mark.parametrize("faults", [6], indirect=True)  # six slices, read one after another
def test_broker_stopped_and_restarted_during_the_spark_job(faults, bench, service_env):
    faults.produce(40)
    # slow S3 answers (latency) stretch the job's stage over its slices, so the broker
    # stops while the stage runs and its later slices must reach Kafka after that
    name = bench["toxiproxy"].add_toxic("s3", "latency", {"latency": 400}, "downstream")
    faults.through(bench["toxiproxy_endpoint"])
    tracker = bench["spark"].statusTracker()
    killed_mid_stage = []

    def stop_broker_mid_stage():
        deadline = time.monotonic() + 120
        while not tracker.getActiveStageIds():
            assert time.monotonic() < deadline, "the job started no stage within 120 s"
            time.sleep(0.02)
        # SIGTERM: the broker stops at once (a SIGKILL leaves its port in TIME_WAIT, and
        # Kafka then cannot bind it again for a minute)
        os.kill(localservices.KAFKA.pid(), signal.SIGTERM)
        killed_mid_stage.append(bool(tracker.getActiveStageIds()))
        localservices.KAFKA.stop()  # waits until it is gone
        localservices.KAFKA.start(service_env)

    try:
        outcome = faults.run("broker-during-job", during_job=stop_broker_mid_stage)
    finally:
        bench["toxiproxy"].remove_toxic("s3", name)
    print(f"broker stopped during the job's stage ({killed_mid_stage}): {outcome}")
    assert killed_mid_stage == [True], "the stage ended before the broker went down"
    faults.outcomes[outcome.split(" (")[0]] += 1
    faults.assert_no_token_ahead_of_files("broker-during-job")
    faults.finish_clean("broker_in_job")


def test_broker_stopped_and_restarted_during_plan(faults, bench, service_env):
    faults.produce(30)
    faults.through(bench["direct"])
    assert localservices.KAFKA.stop(), "the broker was not running"
    restart = threading.Thread(target=localservices.KAFKA.start, args=(service_env,))
    restart.start()  # back within the plan's bounded retries of reaching Kafka
    try:
        outcome = faults.run("broker-during-plan")
    finally:
        restart.join(timeout=300)
    print(f"broker stopped during plan: {outcome}")
    faults.outcomes[outcome.split(" (")[0]] += 1
    faults.assert_no_token_ahead_of_files("broker-during-plan")
    faults.finish_clean("broker_in_plan")


def test_a_spark_task_s_failure_reaches_the_driver_as_the_class_it_raised(faults, bench):
    """S3 answers 503 to every request after the driver's reads: the tasks'
    uploads fail in the Python workers, and job.run raises what they raised (a
    TransientError naming the S3 call), not Spark's PythonException. Clean runs then
    archive everything once."""
    faults.produce(6)
    faults.through(bench["direct"])
    plan_url = faults.pipeline.plan("task-failure")
    assert plan_url is not None
    statuses = bench["statuses"]
    # requests 1-6 are the driver's: clearing an earlier try's failure record, reading
    # plan.json, looking for a manifest (none: the job runs), reading the in-flight mark,
    # looking for an earlier attempt's record (none) and writing this attempt's
    statuses.arm(503, 7, 100_000)
    faults.through(statuses.endpoint)
    cfg = config_module.load(faults.pipeline.config_path)
    try:
        with pytest.raises(TransientError, match=r"^cannot \w+ s3://.*\(HTTP 503\)") as failed:
            job.run(bench["session"], cfg, plan_url)
    finally:
        statuses.arm(None)
    assert type(failed.value.__cause__).__name__ == "PythonException"  # what Spark raised
    print(f"task failure at the driver: {type(failed.value).__name__}: {failed.value}")
    faults.outcomes["archive failed: TransientError"] += 1
    faults.finish_clean("task_failure")
