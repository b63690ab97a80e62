"""ArchiveOperator: spark-submit of spark_jobs/archive.py on one plan, through the Spark
provider's SparkSubmitHook (and ReplayOperator, spark_jobs/replay.py on one replay's plan).

Everything environment-specific is resolved when the task runs, not when the DAG is
parsed: the Spark master and deploy mode (the Spark connection), the config's `spark:`
settings and the library zip (kafka_archive.spark.archive_submit), the S3 credentials
and the Kafka connection (`kafka.conn_id`). Where the driver runs beside this task, both
reach it through spark-submit's process environment (boto3's AWS_* variables, Airflow's
AIRFLOW_CONN_<ID> for Kafka) and the executors through the driver (spark.executorEnv for
S3; the Config their tasks receive for Kafka): never through a templated field, a command
line or a log. A driver on the cluster (cluster deploy mode) uses the cluster's own.
"""

from __future__ import annotations

import os
import time

from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.sdk import BaseHook, BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from kafka_archive import config, spark, spark_connect
from kafka_archive.airflow import alerting, assets, connections, lazy_module
from kafka_archive.errors import ArchiveError, TerminalError

# the jobs' launch and their driver's work: a task's cost, not a DAG file parse's
job = lazy_module("kafka_archive.archive.job")
progress = lazy_module("kafka_archive.archive.progress")
replay_job = lazy_module("kafka_archive.archive.replay_job")
tasks = lazy_module("kafka_archive.airflow.tasks")


def submit_environment(cfg: config.Config, master: str | None = None) -> dict[str, str]:
    """The environment for running a job's spark-submit from this process (CLI, benchmark,
    tests) as ArchiveOperator does: pyspark's launcher and this interpreter, plus the S3
    connection's credentials where the driver runs here (Submit.takes_credentials) and
    the archive is on S3; elsewhere the cluster's own serve."""
    takes = (cfg.archive_root.startswith("s3://")
             and spark.archive_submit(cfg, master).takes_credentials())
    return {**os.environ, **spark.submit_env(), **connections.connection_environment(cfg),
            **(connections.s3_environment(cfg.s3_conn_id) if takes else {})}


def spark_master(conn) -> str:
    """The master a Spark connection names, by the rule SparkSubmitHook applies (it keeps
    the result private): a `spark` connection made in the UI holds the whole URL in its
    host (`local[2]`, `yarn`, `spark://host:7077`, `k8s://https://...`); one made from a URI
    holds the scheme in its type and the host alone; the port, if any, is appended."""
    if conn.conn_type == "spark" and conn.host and ("://" in conn.host or not conn.port):
        master = conn.host
    else:
        master = f"{conn.conn_type}://{conn.host or ''}"
    return f"{master}:{conn.port}" if conn.port else master


class ArchiveOperator(BaseOperator):
    """Thin, over the Spark provider's SparkSubmitHook: resolves the job's settings when
    the task runs, then submits and waits (on_kill kills the spark-submit)."""
    template_fields = ("plan_url",)
    job, job_name = spark.APPLICATION, "kafka-archive"

    def __init__(self, *, plan_url: str, config_path: str, s3_conn_id: str,
                 conn_id: str = "spark_default", connect_conn_id: str | None = None,
                 **kwargs):
        super().__init__(**kwargs)
        self.plan_url = plan_url
        self.config_path = config_path
        self.s3_conn_id = s3_conn_id
        self.conn_id = conn_id
        self.connect_conn_id = connect_conn_id  # the group's spark_connect: no spark-submit
        self.hook: SparkSubmitHook | None = None
        self.session = None

    def job_args(self) -> list[str]:
        return ["--plan", self.plan_url]

    def execute(self, context):
        cfg = connections.load_config(self.config_path)
        if connect_conn_id := self.connect_conn(cfg, context):
            return self.over_connect(cfg, connect_conn_id)
        master = spark_master(BaseHook.get_connection(self.conn_id))
        if cfg.spark.master and cfg.spark.master != master:
            raise ValueError(f"{cfg.path}: spark.master is {cfg.spark.master} but the Spark "
                             f"connection {self.conn_id} says {master}: in Airflow the "
                             "connection decides; make them agree or drop spark.master")
        submit = spark.archive_submit(cfg, master)
        popen = {}
        if submit.takes_credentials():
            env_vars = {**spark.submit_env(), **connections.s3_environment(self.s3_conn_id),
                        **connections.connection_environment(cfg)}
        else:
            # the provider would hand env_vars to the driver's node (spark.yarn.appMasterEnv,
            # spark.kubernetes.driverEnv), on the command line: spark-submit alone gets what
            # it needs to start, as its process environment
            env_vars = None
            popen["env"] = {**os.environ, **spark.launcher_env()}
            self.log.info("Spark master %s: the driver and executors use the cluster's own "
                          "S3 credentials (instance profile, IRSA), none from %s",
                          master, self.s3_conn_id)
        self.hook = SparkSubmitHook(
            conn_id=self.conn_id, conf=submit.conf, py_files=",".join(submit.py_files),
            files=",".join(submit.files), name=self.job_name, env_vars=env_vars,
            deploy_mode=submit.deploy_mode,
            application_args=["--config", str(cfg.path), *self.job_args()])
        try:
            job.launched(connections.storage(self.s3_conn_id), self.plan_url,
                         lambda: self.hook.submit(str(self.job), **popen), AirflowException)
        except TerminalError as exc:  # the job's own, recorded: no retry can help
            raise AirflowFailException(f"TerminalError: {exc}") from exc

    def connect_conn(self, cfg: config.Config, context) -> str | None:
        """The Spark Connect connection the job runs over; None: spark-submit."""
        return self.connect_conn_id

    def over_connect(self, cfg: config.Config, connect_conn_id: str) -> None:
        """The job as a Spark Connect client in this task's process: no JVM here. The
        executors are the server's, with its own S3 credentials; Kafka's reach them in the
        Config their tasks receive, as on a cluster. The deployment's server session is
        reattached (spark_connect.connected: what an earlier attempt of this job left running is
        interrupted)."""
        storage = connections.storage(self.s3_conn_id)
        url = SparkConnectHook(connect_conn_id).get_connection_url()

        def launch():
            started = time.monotonic()
            try:
                with spark_connect.connected(url, cfg, self.plan_url, storage) as self.session:
                    connected = time.monotonic()
                    lines = self.run_connected(self.session, cfg, storage, started, connected)
            finally:
                self.session = None  # closed: nothing left for on_kill to interrupt
            for line in lines:
                self.log.info("%s", line)
        try:
            job.launched(storage, self.plan_url, launch, ArchiveError)
        except TerminalError as exc:  # the job's own, recorded: no retry can help
            raise AirflowFailException(f"TerminalError: {exc}") from exc

    def run_connected(self, session, cfg, storage, started: float, connected: float) -> list[str]:
        """The job in a Connect session; the lines to log."""
        manifest = job.recorded(session, cfg, self.plan_url, storage)
        return progress.lines(manifest, time.monotonic() - started, connected - started)

    def get_openlineage_facets_on_complete(self, task_instance):
        """For Airflow's OpenLineage provider: the topics read, the folders or tables
        written, with the run's figures (airflow.lineage)."""
        from kafka_archive.airflow import lineage

        return lineage.of_run(connections.load_config(self.config_path),
                              connections.storage(self.s3_conn_id), self.plan_url)

    def on_kill(self) -> None:
        if self.hook:
            self.hook.on_kill()
        if self.session is not None:  # this job's operations, not the other groups'
            self.session.interruptTag(spark_connect.job_tag(self.plan_url))


class CommitOperator(BaseOperator):
    """The run's commit (airflow.tasks.commit), then an Asset event per topic it advanced
    through the group's alias, its outlet; an operator (not a TaskFlow task) for the
    OpenLineage provider to ask what it read and wrote."""
    template_fields = ("plan_url",)

    def __init__(self, *, group: str, plan_url: str, config_path: str, s3_conn_id: str,
                 **kwargs):
        super().__init__(outlets=[assets.alias(group)], **kwargs)
        self.group = group
        self.plan_url = plan_url
        self.config_path = config_path
        self.s3_conn_id = s3_conn_id

    @alerting.fails_at_once_when_terminal
    def execute(self, context) -> dict:
        summary = tasks.commit(self.plan_url)
        if summary["announce"]:  # an event per commit; again only where it never went out
            assets.add(context["outlet_events"], self.group, assets.commit_events(
                config.load(self.config_path), self.group, summary,
                replaces=summary["announce"] == "again"))
        return summary

    get_openlineage_facets_on_complete = ArchiveOperator.get_openlineage_facets_on_complete


class ReplayOperator(ArchiveOperator):
    """The replay job (spark_jobs/replay.py) on a replay's plan, launched like the archive
    job (over the source group's `spark_connect` where it has one); `plan_url` is the
    replay's replay.json, the rate limit the run's `max_rate` param."""
    job, job_name = spark.REPLAY_APPLICATION, "kafka-archive-replay"

    def execute(self, context):
        self.max_rate = context["params"].get("max_rate")
        return super().execute(context)

    def connect_conn(self, cfg: config.Config, context) -> str | None:
        return cfg.group(context["params"]["group"]).spark_connect  # the source group's

    def job_args(self) -> list[str]:
        return spark.replay_args(self.plan_url, self.max_rate)

    def get_openlineage_facets_on_complete(self, task_instance):
        from kafka_archive.airflow import lineage

        return lineage.of_replay(connections.load_config(self.config_path),
                                 connections.storage(self.s3_conn_id), self.plan_url)

    def run_connected(self, session, cfg, storage, started: float, connected: float) -> list[str]:
        rows = replay_job.run(session, cfg, self.plan_url, self.max_rate, storage)
        return replay_job.summary_lines(rows, time.monotonic() - started)
