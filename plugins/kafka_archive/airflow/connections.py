"""Clients built from Airflow connections: the one place credentials are looked up.

Secrets stay in the connection (or the secrets backend behind it) and reach the library
only as ready clients, never as arguments or log lines.
"""

from __future__ import annotations

from airflow.providers.amazon.aws.hooks.s3 import S3Hook

from kafka_archive import retries
from kafka_archive.config import Config
from kafka_archive.errors import TransientError
from kafka_archive.storage import Storage
from kafka_archive.tokens import TokenStore, open_store


def s3_client(conn_id: str):
    return S3Hook(aws_conn_id=conn_id, config=retries.s3_config()).get_conn()


def storage(conn_id: str) -> Storage:
    """The archive root's storage, its S3 client made from the connection when first used."""
    return Storage(lambda: s3_client(conn_id))


def token_store(config: Config) -> TokenStore:
    return open_store(config.token_root, lambda: s3_client(config.s3_conn_id))


def check_smtp(conn_id: str) -> str:
    """Connect (and log in, when the connection has credentials) to the alert mail
    server, then hang up; the server reached."""
    from airflow.providers.smtp.hooks.smtp import SmtpHook

    with SmtpHook(smtp_conn_id=conn_id) as hook:  # connects, and logs in with credentials
        ok, answer = hook.test_connection()       # then the hook's own check: a NOOP
        if not ok:
            raise TransientError(f"the alert mail server {hook.host}:{hook.port} (connection "
                                 f"{conn_id}) did not answer a NOOP: {answer}")
        return f"{hook.host}:{hook.port} (connection {conn_id})"
