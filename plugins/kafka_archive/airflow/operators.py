"""ArchiveOperator: SparkSubmitOperator running spark_jobs/archive.py on one plan.

Everything environment-specific is resolved when the task runs, not when the DAG is
parsed: the Kafka source jars, and the S3 credentials, which reach the job through its
process environment (boto3's AWS_* variables) and never through a templated field,
a command line or a log.
"""

from __future__ import annotations

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from kafka_archive import spark

APPLICATION = str(spark.REPO / "spark_jobs" / "archive.py")


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


class ArchiveOperator(SparkSubmitOperator):
    template_fields = (*SparkSubmitOperator.template_fields, "plan_url")

    def __init__(self, *, plan_url: str, config_path: str, s3_conn_id: str, **kwargs):
        super().__init__(application=APPLICATION, name="kafka-archive", **kwargs)
        self.plan_url = plan_url
        self.config_path = config_path
        self.s3_conn_id = s3_conn_id

    def execute(self, context):
        self.jars = ",".join(spark.kafka_source_jars())
        self.application_args = ["--config", self.config_path, "--plan", self.plan_url]
        self.env_vars = {**spark.submit_env(), **s3_environment(self.s3_conn_id)}
        return super().execute(context)
