"""ArchiveOperator: SparkSubmitOperator running spark_jobs/archive.py on one plan (and
ReplayOperator, spark_jobs/replay.py on one replay's plan).

Everything environment-specific is resolved when the task runs, not when the DAG is
parsed: the Spark master and deploy mode (the Spark connection), the config's `spark:`
settings and the library zip (kafka_archive.spark.archive_submit),
and the S3 credentials, which reach the driver through spark-submit's process
environment (boto3's AWS_* variables) and the executors through the driver
(spark.executorEnv, set inside the job): never through a templated field, a command line
or a log.
"""

from __future__ import annotations

import os

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from kafka_archive import config, spark


def s3_environment(conn_id: str) -> dict[str, str]:
    """boto3's standard variables, from the Airflow connection."""
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook

    hook = S3Hook(aws_conn_id=conn_id)
    credentials = hook.get_credentials()
    env = {"AWS_ACCESS_KEY_ID": credentials.access_key,
           "AWS_SECRET_ACCESS_KEY": credentials.secret_key,
           "AWS_DEFAULT_REGION": hook.conn_config.region_name or "us-east-1"}
    if credentials.token:
        env["AWS_SESSION_TOKEN"] = credentials.token
    if endpoint := hook.conn_config.get_service_endpoint_url("s3"):
        env["AWS_ENDPOINT_URL_S3"] = endpoint
    return env


def submit_environment(cfg: config.Config, master: str | None = None) -> dict[str, str]:
    """The environment for running a job's spark-submit from this process (CLI, benchmark,
    tests) as ArchiveOperator does: pyspark's launcher and this interpreter, plus the S3
    connection's credentials where the driver runs here (Submit.takes_credentials) and
    the archive is on S3; elsewhere the cluster's own serve."""
    takes = (cfg.archive_root.startswith("s3://")
             and spark.archive_submit(cfg, master).takes_credentials())
    return {**os.environ, **spark.submit_env(), **(s3_environment(cfg.s3_conn_id) if takes else {})}


class ArchiveOperator(SparkSubmitOperator):
    template_fields = (*SparkSubmitOperator.template_fields, "plan_url")
    job, job_name = spark.APPLICATION, "kafka-archive"

    def __init__(self, *, plan_url: str, config_path: str, s3_conn_id: str, **kwargs):
        super().__init__(application=str(self.job), name=self.job_name, **kwargs)
        self.plan_url = plan_url
        self.config_path = config_path
        self.s3_conn_id = s3_conn_id

    def job_args(self) -> list[str]:
        return ["--plan", self.plan_url]

    def execute(self, context):
        cfg = config.load(self.config_path)
        master = self._get_hook()._connection["master"]  # the Spark connection's
        if cfg.spark.master and cfg.spark.master != master:
            raise ValueError(f"{cfg.path}: spark.master is {cfg.spark.master} but the Spark "
                             f"connection {self._conn_id} says {master}: in Airflow the "
                             "connection decides; make them agree or drop spark.master")
        submit = spark.archive_submit(cfg, master)
        self.py_files = ",".join(submit.py_files)
        self.files = ",".join(submit.files)
        self.conf = {**submit.conf, **(self.conf or {})}
        self._deploy_mode = submit.deploy_mode or self._deploy_mode
        self.application_args = ["--config", str(cfg.path), *self.job_args()]
        if submit.takes_credentials():
            self.env_vars = {**spark.submit_env(), **s3_environment(self.s3_conn_id)}
        else:
            # the provider would hand env_vars to the driver's node (spark.yarn.appMasterEnv,
            # spark.kubernetes.driverEnv), on the command line: spark-submit alone gets what
            # it needs, through this task process's environment
            self.env_vars = None
            os.environ.update(spark.launcher_env())
            self.log.info("Spark master %s: the driver and executors use the cluster's own "
                          "S3 credentials (instance profile, IRSA), none from %s",
                          master, self.s3_conn_id)
        self._hook = None  # built again by execute with the settings above
        return super().execute(context)


class ReplayOperator(ArchiveOperator):
    """The replay job (spark_jobs/replay.py) on a replay's plan, launched like the archive
    job; `plan_url` is the replay's replay.json, the rate limit the run's `max_rate` param."""
    job, job_name = spark.REPLAY_APPLICATION, "kafka-archive-replay"

    def execute(self, context):
        self.max_rate = context["params"].get("max_rate")
        return super().execute(context)

    def job_args(self) -> list[str]:
        return spark.replay_args(self.plan_url, self.max_rate)
