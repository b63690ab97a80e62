"""The S3 server is real and honours the conditional writes token commits rely on."""

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
