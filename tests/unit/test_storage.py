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
    store, url = storage.Storage(), f"file://{tmp_path}/deep/dir/object.json"
    store.put_bytes(url, b"one")
    store.put_bytes(url, b"two")
    assert store.get_bytes(url) == b"two"
    assert [p.name for p in (tmp_path / "deep/dir").iterdir()] == ["object.json"]  # no temp left


def test_local_list_size_move_and_missing(tmp_path):
    store, root = storage.Storage(), f"file://{tmp_path}/root"
    store.put_bytes(f"{root}/b/2.seq", b"22")
    store.put_bytes(f"{root}/a/1.seq", b"1")
    assert list(store.list(root)) == [(f"{root}/a/1.seq", 1), (f"{root}/b/2.seq", 2)]
    store.move(f"{root}/b/2.seq", f"{root}/_superseded/r1/b/2.seq")
    assert store.size(f"{root}/b/2.seq") is None
    assert store.get_or_none(f"{root}/_superseded/r1/b/2.seq") == b"22"
    assert store.get_or_none(f"{root}/nothing") is None


def test_s3_url_without_client_is_a_clear_error():
    with pytest.raises(TerminalError, match="no S3 client is configured"):
        storage.Storage().get_bytes("s3://bucket/key")


def test_local_list_after_a_name(tmp_path):
    store, root = storage.Storage(), f"file://{tmp_path}/root"
    for name in ("1_0_01.seq", "1_0_02.seq", "1_0_03.txt.gz"):
        store.put_bytes(f"{root}/{name}", b"x")
    assert [url for url, _ in store.list(root, start_after=f"{root}/1_0_01~")] == [
        f"{root}/1_0_02.seq", f"{root}/1_0_03.txt.gz"]
    with pytest.raises(ValueError, match="is not under"):
        list(store.list(root, start_after=f"file://{tmp_path}/elsewhere/1"))


def test_the_local_file_system_honours_conditional_writes_and_leaves_no_probe(tmp_path):
    from kafka_archive.storage import Storage

    said = Storage().check_conditional_writes(f"file://{tmp_path}/runs")
    assert said == "the local file system honours If-None-Match: * and If-Match"
    assert list((tmp_path / "runs").glob("_conditional_write_probe*")) == []


def test_probes_of_one_root_at_once_never_refuse_a_server_that_honours_conditions(tmp_path):
    """Plans of several groups probe the same archive root at the same time: a probe
    object shared between them let one delete the other's and look like a server that
    ignores If-None-Match."""
    from concurrent.futures import ThreadPoolExecutor

    from kafka_archive.storage import Storage

    folder = f"file://{tmp_path}/_preflight"
    with ThreadPoolExecutor(4) as pool:
        said = list(pool.map(lambda _: Storage().check_conditional_writes(folder), range(40)))
    assert set(said) == {"the local file system honours If-None-Match: * and If-Match"}


def test_sizes_of_many_urls_each_looked_up_once(tmp_path):
    store = storage.Storage()
    urls = [f"file://{tmp_path}/f{i}" for i in range(40)]
    for i, url in enumerate(urls[:30]):
        store.put_bytes(url, b"x" * i)
    found = store.sizes(urls + urls[:5])  # a URL named twice is looked up once
    assert found == {url: (i if i < 30 else None) for i, url in enumerate(urls)}
