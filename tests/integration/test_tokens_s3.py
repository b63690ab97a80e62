"""Token compare-and-swap against the real S3 server (conditional PUTs)."""

import threading

import pytest

from kafka_archive.tokens import (MalformedTokenError, S3TokenStore, Token, TokenConflictError,
                                  Versioned, render)


@pytest.fixture
def store(s3, unique) -> S3TokenStore:
    return S3TokenStore(s3.client, f"s3://{s3.bucket}/tokens-{unique}")


def _token(offset: int, topic: str = "orders.v1") -> Token:
    return Token(group="backup", topic=topic, bootstrap="broker:9092", offsets={0: offset, 1: 5},
                 committed_at="2024-05-01T12:00:00+00:00", run_id=f"run-{offset}")


def _body(s3, unique, topic: str = "orders.v1") -> bytes:
    key = f"tokens-{unique}/backup/{topic}.token"
    return s3.client.get_object(Bucket=s3.bucket, Key=key)["Body"].read()


def test_missing_token_reads_as_absent(store):
    assert store.read("backup", "orders.v1") == Versioned(None, None)


def test_create_then_conflicting_create_is_refused(store, s3, unique):
    version = store.write(_token(1), None)
    assert store.read("backup", "orders.v1") == Versioned(_token(1), version)

    with pytest.raises(TokenConflictError) as excinfo:
        store.write(_token(2), None)
    assert (excinfo.value.expected, excinfo.value.found) == (None, version)
    assert _body(s3, unique) == render(_token(1)).encode()


def test_stale_etag_is_refused_and_the_object_is_unchanged(store, s3, unique):
    stale = store.write(_token(1), None)
    current = store.write(_token(2), stale)
    with pytest.raises(TokenConflictError, match=f"expected version {stale}, found {current}"):
        store.write(_token(3), stale)
    assert _body(s3, unique) == render(_token(2)).encode()
    assert store.read("backup", "orders.v1") == Versioned(_token(2), current)


def test_replacing_a_deleted_token_is_a_conflict(store):
    version = store.write(_token(1), None)
    store.delete("backup", "orders.v1")
    with pytest.raises(TokenConflictError, match="found <absent>"):
        store.write(_token(2), version)
    assert store.read("backup", "orders.v1") == Versioned(None, None)


def test_two_writers_racing_from_the_same_etag_exactly_one_wins(store):
    for round_ in range(5):  # a few rounds: the race is decided by the server each time
        expected = store.read("backup", "orders.v1").version
        barrier = threading.Barrier(2)
        outcomes: dict[int, str] = {}

        def write(offset: int) -> None:
            barrier.wait()
            try:
                store.write(_token(offset), expected)
                outcomes[offset] = "won"
            except TokenConflictError:
                outcomes[offset] = "lost"

        racers = [threading.Thread(target=write, args=(100 * round_ + n,)) for n in (1, 2)]
        for racer in racers:
            racer.start()
        for racer in racers:
            racer.join(timeout=60)
        assert sorted(outcomes.values()) == ["lost", "won"]
        winner = next(offset for offset, outcome in outcomes.items() if outcome == "won")
        assert store.read("backup", "orders.v1").token == _token(winner)


def test_delete_then_read_is_absent(store):
    store.write(_token(1), None)
    store.delete("backup", "orders.v1")
    assert store.read("backup", "orders.v1") == Versioned(None, None)
    store.delete("backup", "orders.v1")  # deleting an absent token is fine


def test_topics_lists_the_group_s_tokens(store):
    assert store.topics("backup") == []
    for topic in ("b.x", "a-y", "c_z"):
        store.write(_token(1, topic), None)
    store.write(Token("partitioned", "other", "b", {0: 1}), None)
    store.delete("backup", "c_z")
    assert store.topics("backup") == ["a-y", "b.x"]


def test_malformed_object_is_named_by_url_and_line(store, s3, unique):
    key = f"tokens-{unique}/backup/orders.v1.token"
    s3.client.put_object(Bucket=s3.bucket, Key=key,
                         Body=b"# topic: orders.v1\nbroker:9092 orders.v1 0 1\n"
                              b"broker:9092 orders.v1 0 2\n")
    with pytest.raises(MalformedTokenError) as excinfo:
        store.read("backup", "orders.v1")
    assert excinfo.value.path == f"s3://{s3.bucket}/{key}"
    assert f"s3://{s3.bucket}/{key}, line 3: duplicate partition 0" in str(excinfo.value)
