"""The S3 server is real and honours the conditional writes token commits rely on."""

import json

import pytest
from botocore.exceptions import ClientError


def _status(excinfo) -> int:
    return excinfo.value.response["ResponseMetadata"]["HTTPStatusCode"]


def test_if_match_with_stale_etag_is_refused_and_changes_nothing(s3, unique):
    key = f"smoke/{unique}/token"
    first = s3.client.put_object(Bucket=s3.bucket, Key=key, Body=b"v1")["ETag"]
    s3.client.put_object(Bucket=s3.bucket, Key=key, Body=b"v2", IfMatch=first)

    with pytest.raises(ClientError) as refused:
        s3.client.put_object(Bucket=s3.bucket, Key=key, Body=b"v3", IfMatch=first)
    assert _status(refused) == 412
    assert s3.client.get_object(Bucket=s3.bucket, Key=key)["Body"].read() == b"v2"


def test_if_none_match_star_refuses_to_overwrite(s3, unique):
    key = f"smoke/{unique}/created-once"
    s3.client.put_object(Bucket=s3.bucket, Key=key, Body=b"first", IfNoneMatch="*")

    with pytest.raises(ClientError) as refused:
        s3.client.put_object(Bucket=s3.bucket, Key=key, Body=b"second", IfNoneMatch="*")
    assert _status(refused) == 412
    assert s3.client.get_object(Bucket=s3.bucket, Key=key)["Body"].read() == b"first"


# --- Storage's classification of what S3 answered (kafka_archive.retries) ------------------

def _file(tmp_path):
    source = tmp_path / "part"
    source.write_bytes(b"x" * 1000)
    return source


def test_an_upload_into_a_missing_bucket_is_terminal_and_says_what_to_do(s3, unique, tmp_path):
    """boto3's upload_file wraps the refusal in S3UploadFailedError, which has no code."""
    from kafka_archive.errors import TerminalError
    from kafka_archive.storage import Storage

    url = f"s3://no-such-bucket-{unique}/archive/part"
    with pytest.raises(TerminalError, match=rf"cannot upload {url}: .*NoSuchBucket.*"
                                            r"create the bucket") as refused:
        Storage(lambda: s3.client).upload_file(_file(tmp_path), url)
    assert type(refused.value).__name__ == "TerminalError"


@pytest.mark.parametrize("size", [1000, 20 << 20])  # one PUT; a multipart upload
def test_an_upload_carries_its_crc32c_and_s3_refuses_other_bytes(s3, unique, tmp_path, size):
    """The CRC32C the slice writer took goes with the upload: S3 checks it against what it
    received and keeps it (a multipart upload's as a full-object checksum)."""
    import os

    from kafka_archive.errors import TerminalError
    from kafka_archive.storage import Storage, crc32c, s3_checksum

    source = tmp_path / "part"
    source.write_bytes(data := os.urandom(size))
    storage, url = Storage(lambda: s3.client), f"s3://{s3.bucket}/smoke/{unique}/part"
    storage.upload_file(source, url, crc32c(data))
    head = s3.client.head_object(Bucket=s3.bucket, Key=f"smoke/{unique}/part",
                                 ChecksumMode="ENABLED")
    assert (head["ChecksumCRC32C"], head["ChecksumType"]) == (s3_checksum(crc32c(data)), "FULL_OBJECT")

    # MinIO's XAmzContentChecksumMismatch; AWS says BadDigest
    with pytest.raises(TerminalError, match=rf"cannot upload {url}-bad: .*(Checksum|BadDigest)"):
        storage.upload_file(source, f"{url}-bad", crc32c(data + b"!"))
    assert s3.client.list_objects_v2(Bucket=s3.bucket, Prefix=f"smoke/{unique}/part-bad")["KeyCount"] == 0


def test_an_upload_answered_503_is_transient(s3, service_env, unique, tmp_path):
    import boto3
    from botocore.config import Config

    from kafka_archive.errors import TransientError
    from kafka_archive.storage import Storage
    from tests.support import localservices
    from tests.support.fault_proxies import HttpStatusFaults

    upstream = ("127.0.0.1", int(service_env["KAFKA_ARCHIVE_S3_PORT"]))
    statuses = HttpStatusFaults(0, upstream)
    try:
        statuses.arm(503, 1, 10)
        key, secret = localservices.generated(service_env, "KAFKA_ARCHIVE_S3_ACCESS_KEY",
                                              "KAFKA_ARCHIVE_S3_SECRET_KEY")
        client = boto3.client("s3", endpoint_url=statuses.endpoint, aws_access_key_id=key,
                              aws_secret_access_key=secret, region_name="us-east-1",
                              config=Config(retries={"max_attempts": 1}))
        url = f"s3://{s3.bucket}/smoke/{unique}/part"
        with pytest.raises(TransientError, match=rf"cannot upload {url}: .*SlowDown.*HTTP 503"):
            Storage(lambda: client).upload_file(_file(tmp_path), url)
        assert statuses.failed >= 1
    finally:
        statuses.close()


def test_a_server_that_ignores_conditional_writes_is_refused_by_name(s3, service_env, unique,
                                                                     tmp_path, airflow_env,
                                                                     kafka, monkeypatch):
    """Issue 31 §2.8: two writers could both win a token or a catalog entry on it. The
    plan and preflight refuse it, naming the server; MinIO itself passes."""
    import boto3

    from kafka_archive import config
    from kafka_archive.errors import TerminalError
    from kafka_archive.monitor import preflight
    from kafka_archive.storage import Storage
    from tests.support import localservices
    from tests.support.fault_proxies import HttpStatusFaults
    from tests.support.pipeline import Pipeline, objects

    upstream = ("127.0.0.1", int(service_env["KAFKA_ARCHIVE_S3_PORT"]))
    key, secret = localservices.generated(service_env, "KAFKA_ARCHIVE_S3_ACCESS_KEY",
                                          "KAFKA_ARCHIVE_S3_SECRET_KEY")
    folder = f"s3://{s3.bucket}/smoke/{unique}"
    assert "honours" in Storage(lambda: s3.client).check_conditional_writes(folder)
    forgetful = HttpStatusFaults(0, upstream, ignore_conditions=True)
    try:
        client = boto3.client("s3", endpoint_url=forgetful.endpoint, aws_access_key_id=key,
                              aws_secret_access_key=secret, region_name="us-east-1")
        with pytest.raises(TerminalError, match=rf"the S3 server at {forgetful.endpoint} does "
                                                r"not honour conditional writes: a PUT of .* "
                                                r"with If-None-Match: \*"):
            Storage(lambda: client).check_conditional_writes(folder)

        pipeline = Pipeline(airflow_env, kafka, s3, f"cw{unique}", tmp_path)
        pipeline.in_env(monkeypatch)
        connection = json.loads(pipeline.env["AIRFLOW_CONN_KAFKA_ARCHIVE_S3"])
        connection["extra"]["endpoint_url"] = forgetful.endpoint
        monkeypatch.setenv("AIRFLOW_CONN_KAFKA_ARCHIVE_S3", json.dumps(connection))
        with pytest.raises(TerminalError, match=f"{forgetful.endpoint} does not honour"):
            pipeline.plan("refused")  # before anything is planned or written
        with pytest.raises(TerminalError, match=f"{forgetful.endpoint} does not honour"):
            preflight.conditional_writes(config.load(), Storage(lambda: client), None)
        assert not pipeline.data_files() and not objects(s3, pipeline.root_key, "_runs/")
    finally:
        forgetful.close()
