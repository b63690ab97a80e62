"""ArchiveOperator: what it hands the Spark provider, per master, without running Spark
(the provider's execute is replaced by a recorder; the standalone cluster itself is
tests/integration/test_spark_cluster.py)."""

import json

import pytest
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from kafka_archive import spark
from kafka_archive.airflow.operators import ArchiveOperator, ReplayOperator

SECRET = "s3cret-key-value"


@pytest.fixture
def submitted(monkeypatch, tmp_path):
    """Runs ArchiveOperator.execute against a Spark connection with the given master; the
    operator as the provider would receive it."""
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_ARCHIVE_S3", json.dumps(
        {"conn_type": "aws", "login": "key-id", "password": SECRET,
         "extra": {"endpoint_url": "http://127.0.0.1:9000"}}))
    monkeypatch.setenv("KAFKA_ARCHIVE_PY_FILES_DIR", str(tmp_path / "py"))
    jars = tmp_path / "jars"
    jars.mkdir()
    (jars / "kafka.jar").write_bytes(b"")
    monkeypatch.setenv("KAFKA_ARCHIVE_SPARK_JARS_DIR", str(jars))
    seen = []
    monkeypatch.setattr(SparkSubmitOperator, "execute", lambda self, context: seen.append(self))

    def run(master: str, spark_section: str = "", operator=ArchiveOperator, context=None
            ) -> ArchiveOperator:
        monkeypatch.setenv("AIRFLOW_CONN_KAFKA_ARCHIVE_SPARK",
                           json.dumps({"conn_type": "spark", "host": master}))
        path = tmp_path / "kafka-archive.yaml"
        path.write_text("kafka: {bootstrap_servers: b:9092}\narchive_root: s3://bucket/p\n"
                        + spark_section)
        operator(task_id="archive", plan_url="s3://bucket/p/plan.json",
                 config_path=str(path), s3_conn_id="kafka_archive_s3",
                 conn_id="kafka_archive_spark").execute(context or {})
        return seen[-1]

    return run


def test_standalone_gets_the_zip_the_config_and_credentials_in_the_environment_only(submitted):
    op = submitted("spark://127.0.0.1:7077", "spark: {conf: {spark.pyspark.python: /opt/py}}\n")
    assert op.py_files.endswith(".zip") and op.files.endswith("kafka-archive.yaml")
    assert op.conf["spark.pyspark.python"] == "/opt/py"
    assert op.env_vars["AWS_SECRET_ACCESS_KEY"] == SECRET
    command = op._get_hook()._build_spark_submit_command(op.application)
    assert not [arg for arg in command if SECRET in arg]
    assert command[command.index("--master") + 1] == "spark://127.0.0.1:7077"


def test_yarn_gets_no_credentials(submitted):
    # Kubernetes takes the same path (Submit.takes_credentials), but the provider builds
    # no hook for k8s:// without the cncf.kubernetes provider, which is not installed here
    op = submitted("yarn", "spark: {deploy_mode: cluster}\n")
    assert op.env_vars is None  # the provider would put them on the command line
    command = op._get_hook()._build_spark_submit_command(op.application)
    assert not [arg for arg in command if SECRET in arg or "AWS_" in arg]
    assert command[command.index("--deploy-mode") + 1] == "cluster"


def test_a_config_master_that_disagrees_with_the_connection_fails(submitted):
    with pytest.raises(ValueError, match="connection kafka_archive_spark says local"):
        submitted("local[2]", "spark: {master: 'spark://elsewhere:7077'}\n")


def test_the_replay_job_is_launched_like_the_archive_job_with_the_runs_rate(submitted):
    op = submitted("spark://127.0.0.1:7077", "", ReplayOperator, {"params": {"max_rate": 50}})
    assert op.application == str(spark.REPLAY_APPLICATION) and op.py_files.endswith(".zip")
    assert op.application_args[2:] == ["--replay", "s3://bucket/p/plan.json", "--max-rate", "50"]
    assert op.env_vars["AWS_SECRET_ACCESS_KEY"] == SECRET
    unlimited = submitted("local[2]", "", ReplayOperator, {"params": {"max_rate": None}})
    assert unlimited.application_args[2:] == ["--replay", "s3://bucket/p/plan.json"]
