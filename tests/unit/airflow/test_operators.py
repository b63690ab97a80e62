"""ArchiveOperator: what it hands the Spark provider's SparkSubmitHook, per master,
without running Spark (the hook's public submit is replaced by a recorder; the standalone
cluster itself is tests/integration/test_spark_cluster.py)."""

import json
import os
from types import SimpleNamespace

import pytest
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

from kafka_archive import spark
from kafka_archive.airflow import operators
from kafka_archive.airflow.operators import ArchiveOperator, ReplayOperator, spark_master

SECRET = "s3cret-key-value"


class RecordingHook:
    """SparkSubmitHook's constructor arguments and what submit got."""
    made: list["RecordingHook"] = []

    def __init__(self, **kwargs):
        SparkSubmitHook(**kwargs)  # the provider accepts these arguments
        self.kwargs, self.submitted = kwargs, None
        RecordingHook.made.append(self)

    def submit(self, application: str, **popen):
        self.submitted = (application, popen)


@pytest.fixture
def submitted(monkeypatch, tmp_path):
    """Runs ArchiveOperator.execute against a Spark connection with the given master."""
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_ARCHIVE_S3", json.dumps(
        {"conn_type": "aws", "login": "key-id", "password": SECRET,
         "extra": {"endpoint_url": "http://127.0.0.1:9000"}}))
    monkeypatch.setenv("KAFKA_ARCHIVE_PY_FILES_DIR", str(tmp_path / "py"))
    monkeypatch.setattr(operators, "SparkSubmitHook", RecordingHook)

    def run(master: str, spark_section: str = "", operator=ArchiveOperator, context=None
            ) -> RecordingHook:
        monkeypatch.setenv("AIRFLOW_CONN_KAFKA_ARCHIVE_SPARK",
                           json.dumps({"conn_type": "spark", "host": master}))
        path = tmp_path / "kafka-archive.yaml"
        path.write_text("kafka: {bootstrap_servers: b:9092}\narchive_root: s3://bucket/p\n"
                        + spark_section)
        operator(task_id="archive", plan_url=f"file://{tmp_path}/p/plan.json",
                 config_path=str(path), s3_conn_id="kafka_archive_s3",
                 conn_id="kafka_archive_spark").execute(context or {})
        return RecordingHook.made[-1]

    return run


def test_standalone_gets_the_zip_the_config_and_credentials_in_the_environment_only(submitted):
    hook = submitted("spark://127.0.0.1:7077", "spark: {conf: {spark.pyspark.python: /opt/py}}\n")
    args = hook.kwargs
    assert args["py_files"].endswith(".zip") and args["files"].endswith("kafka-archive.yaml")
    assert args["conf"]["spark.pyspark.python"] == "/opt/py"
    assert args["env_vars"]["AWS_SECRET_ACCESS_KEY"] == SECRET
    assert SECRET not in json.dumps({k: v for k, v in args.items() if k != "env_vars"})
    assert hook.submitted == (str(spark.APPLICATION), {})  # the hook adds env_vars itself


def test_yarn_gets_no_credentials_and_the_launcher_its_environment(submitted):
    # Kubernetes takes the same path (Submit.takes_credentials)
    hook = submitted("yarn", "spark: {deploy_mode: cluster}\n")
    assert hook.kwargs["env_vars"] is None  # the provider would put them on the command line
    assert hook.kwargs["deploy_mode"] == "cluster"
    _, popen = hook.submitted
    assert popen["env"] == {**os.environ, **spark.launcher_env()}  # nothing from the S3 connection
    assert SECRET not in json.dumps(hook.kwargs)


def test_a_config_master_that_disagrees_with_the_connection_fails(submitted):
    with pytest.raises(ValueError, match="connection kafka_archive_spark says local"):
        submitted("local[2]", "spark: {master: 'spark://elsewhere:7077'}\n")


def test_the_replay_job_is_launched_like_the_archive_job_with_the_runs_rate(submitted, tmp_path):
    hook = submitted("spark://127.0.0.1:7077", "", ReplayOperator,
                     {"params": {"max_rate": 50, "group": "backup"}})
    assert hook.submitted[0] == str(spark.REPLAY_APPLICATION)
    assert hook.kwargs["application_args"][2:] == ["--replay", f"file://{tmp_path}/p/plan.json",
                                                   "--max-rate", "50"]
    assert hook.kwargs["env_vars"]["AWS_SECRET_ACCESS_KEY"] == SECRET
    unlimited = submitted("local[2]", "", ReplayOperator,
                          {"params": {"max_rate": None, "group": "backup"}})
    assert unlimited.kwargs["application_args"][2:] == ["--replay",
                                                         f"file://{tmp_path}/p/plan.json"]


@pytest.mark.parametrize("conn_type, host, port, master", [
    ("spark", "local[2]", None, "local[2]"),                       # made in the UI
    ("spark", "yarn", None, "yarn"),
    ("spark", "spark://10.0.0.1", 7077, "spark://10.0.0.1:7077"),
    ("spark", "k8s://https://api.example", 443, "k8s://https://api.example:443"),
    ("spark", "10.0.0.1", 7077, "spark://10.0.0.1:7077"),          # from a URI
    ("k8s", "https://api.example", None, "k8s://https://api.example"),
])
def test_the_master_is_the_connections_as_the_provider_reads_it(conn_type, host, port, master):
    assert spark_master(SimpleNamespace(conn_type=conn_type, host=host, port=port)) == master


@pytest.mark.parametrize("terminal", [True, False])
def test_the_jobs_classified_failure_decides_whether_airflow_retries(submitted, monkeypatch,
                                                                     tmp_path, terminal):
    """spark-submit's exit code says only that the job failed; its driver records the
    error it failed with beside the plan (issue 31 §6)."""
    from airflow.sdk.exceptions import AirflowException, AirflowFailException

    from kafka_archive.archive import job
    from kafka_archive.errors import TerminalError, TransientError

    recorded = {"class": "ManifestMismatchError" if terminal else "TransientError",
                "terminal": terminal, "message": "run r1 cannot commit: what the job said"}

    def fails(self, application, **popen):  # the job records its error, then exits 1
        if recorded:
            (tmp_path / "run" / "job_failure.json").write_text(json.dumps(recorded))
        raise AirflowException("Cannot execute: spark-submit ... Error code is: 1.")

    submitted("local[2]")  # the connections and the recording hook are in place
    monkeypatch.setattr(RecordingHook, "submit", fails)
    plan_url = f"file://{tmp_path}/run/plan.json"
    (tmp_path / "run").mkdir()
    assert job.failure_url(plan_url) == f"file://{tmp_path}/run/job_failure.json"
    operator = ArchiveOperator(task_id="archive", plan_url=plan_url,
                               config_path=str(tmp_path / "kafka-archive.yaml"),
                               s3_conn_id="kafka_archive_s3", conn_id="kafka_archive_spark")
    expected = AirflowFailException if terminal else TransientError
    with pytest.raises(expected, match="run r1 cannot commit: what the job said") as failed:
        operator.execute({})
    if terminal:
        assert isinstance(failed.value.__cause__, TerminalError)
    # spark-submit failing before the job starts records nothing: the earlier attempt's
    # record is not raised again as this one's (issue 41)
    recorded.clear()
    with pytest.raises(AirflowException, match="Error code is: 1"):
        operator.execute({})
    assert not (tmp_path / "run" / "job_failure.json").exists()
