import pytest

from kafka_archive import storage
from kafka_archive.errors import TerminalError


def test_join_normalises_slashes():
    assert storage.join("s3://bucket/root/", "/_runs/", "g") == "s3://bucket/root/_runs/g"


def test_split_s3_url():
    assert storage.split_s3_url("s3://bucket/a/b.json") == ("bucket", "a/b.json")
    with pytest.raises(TerminalError, match="not an s3://bucket/key URL"):
        storage.split_s3_url("file:///tmp/x")


def test_local_put_replaces_atomically_and_reads_back(tmp_path):
    url = f"file://{tmp_path}/deep/dir/object.json"
    storage.put_bytes(url, b"one", conn_id="unused")
    storage.put_bytes(url, b"two", conn_id="unused")
    assert storage.get_bytes(url, conn_id="unused") == b"two"
    assert [p.name for p in (tmp_path / "deep/dir").iterdir()] == ["object.json"]  # no temp left
