"""Mail sent through Airflow's SMTP notifier arrives at the real SMTP server."""

import email
import time
from email import policy

from airflow.providers.smtp.notifications.smtp import SmtpNotifier


def test_airflow_smtp_notifier_delivers_to_the_capture_server(airflow_env, smtp_maildir, unique,
                                                              monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_ARCHIVE_SMTP", airflow_env["AIRFLOW_CONN_KAFKA_ARCHIVE_SMTP"])
    subject = f"kafka-archive smoke {unique}"
    SmtpNotifier(smtp_conn_id="kafka_archive_smtp", from_email="kafka-archive@localhost",
                 to="oncall@example.com", subject=subject,
                 html_content=f"<p>body {unique}</p>").notify({})

    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        for path in smtp_maildir.glob("*.eml"):
            message = email.message_from_bytes(path.read_bytes(), policy=policy.default)
            if message["Subject"] == subject:
                assert message["To"] == "oncall@example.com"
                assert f"body {unique}" in message.get_body(("html",)).get_content()
                return
        time.sleep(0.2)
    raise AssertionError(f"no mail with subject {subject!r} in {smtp_maildir} after 15 s")
