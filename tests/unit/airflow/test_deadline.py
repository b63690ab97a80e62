"""The deadline callback mails only a run still queued or running: a run that failed
before its deadline had its failure mailed already."""

import asyncio

import pytest

from kafka_archive.airflow import alerting


@pytest.mark.parametrize("state", ["failed", "success"])
def test_a_finished_run_gets_no_deadline_alert(state):
    context = {"dag_run": {"dag_run_id": "manual__1", "state": state, "dag_id": "kafka_archive_b"}}
    outcome = asyncio.run(alerting.on_deadline_missed(
        "b", 60, "s3://nowhere/root", "no_such_conn",
        {"smtp_conn_id": "no_such_smtp", "email_to": ["x@example.com"], "email_from": "a@b"},
        context))
    assert outcome == f"no alert: run manual__1 already {state}"  # before any S3 or SMTP call
