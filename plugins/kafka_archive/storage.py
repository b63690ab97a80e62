"""Reading and writing objects under an archive or token root: s3://bucket/prefix or
file:///path. S3 access goes through the Airflow connection's boto3 client, so
credentials and endpoint live in Airflow (or AIRFLOW_CONN_* in the environment)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from urllib.parse import urlparse

from kafka_archive.errors import TerminalError


def s3_client(conn_id: str):
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook

    return S3Hook(aws_conn_id=conn_id).get_conn()


def split_s3_url(url: str) -> tuple[str, str]:
    parsed = urlparse(url)
    if parsed.scheme != "s3" or not parsed.netloc:
        raise TerminalError(f"not an s3://bucket/key URL: {url!r}")
    return parsed.netloc, parsed.path.lstrip("/")


def join(root: str, *parts: str) -> str:
    return "/".join([root.rstrip("/"), *(p.strip("/") for p in parts)])


def put_bytes(url: str, data: bytes, conn_id: str) -> None:
    """Write data at url, replacing any object there; atomic for readers on both backends."""
    if url.startswith("s3://"):
        bucket, key = split_s3_url(url)
        s3_client(conn_id).put_object(Bucket=bucket, Key=key, Body=data)
        return
    path = Path(urlparse(url).path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", delete=False) as tmp:
        tmp.write(data)
        tmp.flush()
        os.fsync(tmp.fileno())
    os.replace(tmp.name, path)


def get_bytes(url: str, conn_id: str) -> bytes:
    if url.startswith("s3://"):
        bucket, key = split_s3_url(url)
        return s3_client(conn_id).get_object(Bucket=bucket, Key=key)["Body"].read()
    return Path(urlparse(url).path).read_bytes()
