"""Reading what the capturing SMTP server (tests/support/smtp_capture.py) received: the mails
to one test's address, waiting for one by subject, their HTML, and the secrets no mail may
contain."""

from __future__ import annotations

import email
import json
import time
from email import policy

from tests.support import localservices
from tests.support.pipeline import Pipeline

MAIL_TIMEOUT_S = 120


def alerting_pipeline(env: dict[str, str], kafka: str, s3, maildir, prefix: str, tmp_path,
                      **options) -> Pipeline:
    """A Pipeline whose alerts go to an address of its own (`mail_to`), read from `maildir`."""
    mail_to = f"alerts-{prefix}@localhost"
    made = Pipeline(env, kafka, s3, prefix, tmp_path,
                    extra=f"alerts: {{email_to: {mail_to}}}\n", **options)
    made.mail_to, made.maildir = mail_to, maildir
    return made


def mails_to(pipeline: Pipeline) -> list[tuple[float, email.message.EmailMessage]]:
    """(arrival time, message) of every mail to this test's address, oldest first."""
    found = []
    for path in sorted(pipeline.maildir.glob("*.eml")):
        message = email.message_from_bytes(path.read_bytes(), policy=policy.default)
        if pipeline.mail_to in str(message["To"]):
            found.append((int(path.name.split("-")[0]) / 1e9, message))
    return found


def wait_for_mail(pipeline: Pipeline, subject_part: str
                  ) -> tuple[float, email.message.EmailMessage]:
    deadline = time.monotonic() + MAIL_TIMEOUT_S
    while time.monotonic() < deadline:
        for arrived, message in mails_to(pipeline):
            if subject_part in message["Subject"]:
                return arrived, message
        time.sleep(0.2)
    subjects = [m["Subject"] for _, m in mails_to(pipeline)]
    raise AssertionError(f"no mail to {pipeline.mail_to} with {subject_part!r} in the subject "
                         f"after {MAIL_TIMEOUT_S}s; got {subjects}\n{pipeline.dag_output[-3000:]}")


def html_of(message) -> str:
    return message.get_body(("html",)).get_content()


def secrets(env: dict[str, str]) -> list[str]:
    """Every configured secret: the S3 secret key and each Airflow connection's password."""
    found = [localservices.local_env()["KAFKA_ARCHIVE_S3_SECRET_KEY"]]
    for name, value in env.items():
        if name.startswith("AIRFLOW_CONN_") and value.startswith("{"):
            if password := json.loads(value).get("password"):
                found.append(password)
    assert all(len(s) >= 8 for s in found)
    return found
