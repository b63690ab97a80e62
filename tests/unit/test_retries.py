import errno

import pytest
from botocore.exceptions import (ClientError, ConnectionClosedError, EndpointConnectionError,
                                 ReadTimeoutError)
from kafka.errors import (KafkaConnectionError, KafkaTimeoutError,
                          SaslAuthenticationFailedError, TopicAuthorizationFailedError)

from kafka_archive import retries
from kafka_archive.errors import TerminalError, TransientError


def s3_error(code: str, status: int) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": code},
                        "ResponseMetadata": {"HTTPStatusCode": status}}, "PutObject")


@pytest.mark.parametrize("exc", [
    s3_error("SlowDown", 503), s3_error("InternalError", 500), s3_error("ServiceUnavailable", 503),
    s3_error("RequestTimeout", 400), s3_error("TooManyRequests", 429),
    ConnectionClosedError(endpoint_url="http://s3"), ReadTimeoutError(endpoint_url="http://s3"),
    EndpointConnectionError(endpoint_url="http://s3"), ConnectionResetError(104, "reset"),
    KafkaConnectionError(), KafkaTimeoutError(), TransientError("x"),
])
def test_transient(exc):
    assert retries.is_transient(exc)
    assert isinstance(retries.classify(exc, "doing it"), TransientError)


@pytest.mark.parametrize("exc", [
    s3_error("AccessDenied", 403), s3_error("NoSuchKey", 404), s3_error("NoSuchBucket", 404),
    s3_error("PreconditionFailed", 412), s3_error("ConditionalRequestConflict", 409),
    SaslAuthenticationFailedError(), TopicAuthorizationFailedError(),
    OSError(errno.ENOSPC, "No space left on device"), PermissionError(13, "denied"),
    ValueError("a bug"), TerminalError("x"),
])
def test_terminal(exc):
    assert not retries.is_transient(exc)
    assert isinstance(retries.classify(exc, "doing it"), TerminalError)


def test_classified_message_names_what_failed_and_the_status():
    error = retries.classify(s3_error("SlowDown", 503), "cannot write token s3://b/t")
    assert str(error).startswith("cannot write token s3://b/t: ")
    assert "SlowDown" in str(error) and "HTTP 503" in str(error)


def test_missing_and_conflict_codes():
    assert retries.is_missing(s3_error("NoSuchKey", 404)) and retries.is_missing(s3_error("404", 404))
    assert retries.is_conflict(s3_error("PreconditionFailed", 412))
    assert not retries.is_missing(s3_error("SlowDown", 503))


def test_call_retries_transient_failures_with_growing_back_off():
    failures, waits = [ConnectionResetError(104, "reset"), KafkaTimeoutError("Unable to bootstrap")], []

    def flaky():
        if failures:
            raise failures.pop(0)
        return "ok"

    assert retries.call(flaky, "look-up", attempts=3, backoff_s=0.5, sleep=waits.append) == "ok"
    assert waits == [0.5, 1.0]


def test_call_is_bounded_and_raises_the_classified_last_failure():
    calls, waits = [], []

    def down():
        calls.append(1)
        raise KafkaTimeoutError("Unable to bootstrap")

    with pytest.raises(TransientError, match="Kafka at k:9092 is unreachable: KafkaTimeoutError"):
        retries.call(down, "Kafka at k:9092 is unreachable", attempts=3, sleep=waits.append)
    assert len(calls) == 3 and len(waits) == 2


def test_call_does_not_retry_terminal_failures():
    calls = []

    def denied():
        calls.append(1)
        raise SaslAuthenticationFailedError("bad password")

    with pytest.raises(TerminalError):
        retries.call(denied, "login", sleep=lambda s: pytest.fail("slept"))
    assert calls == [1]


def test_disk_full_names_path_and_free_space(tmp_path):
    path = tmp_path / "slice.part"
    path.write_bytes(b"x")
    error = retries.disk_full(OSError(errno.ENOSPC, "No space left on device"), str(path),
                              "writing s3://b/k")
    assert isinstance(error, TerminalError)
    assert str(path) in str(error) and "bytes free of" in str(error)
    assert retries.is_disk_full(OSError(errno.ENOSPC, "full"))


def test_s3_config_bounds_retries():
    config = retries.s3_config()
    assert config.retries == {"max_attempts": retries.S3_MAX_ATTEMPTS, "mode": "standard"}
    assert config.read_timeout == retries.S3_READ_TIMEOUT_S


def test_a_refusal_that_repeats_says_so_and_what_to_change():
    denied = retries.classify(s3_error("AccessDenied", 403), "S3 PUT s3://b/k")
    assert isinstance(denied, TerminalError)
    assert "this refusal repeats on every retry: the S3 connection's credentials may not" in str(denied)
    assert "create the bucket" in str(retries.classify(s3_error("NoSuchBucket", 404), "x"))
    assert "repeats" not in str(retries.classify(s3_error("SlowDown", 503), "x"))  # transient


def test_librdkafka_errors_are_classified_as_librdkafka_says():
    from confluent_kafka import KafkaError

    from kafka_archive.errors import TerminalError, TransientError

    moving = KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION, "leader moved", retriable=True)
    refused = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "not allowed")
    fatal = KafkaError(KafkaError._FENCED, "fenced", fatal=True, retriable=True)
    assert isinstance(retries.librdkafka_error(moving, "producing"), TransientError)
    assert isinstance(retries.librdkafka_error(refused, "producing"), TerminalError)
    assert isinstance(retries.librdkafka_error(fatal, "producing"), TerminalError)
    assert str(retries.librdkafka_error(refused, "reading t partition 0")).startswith(
        "reading t partition 0: not allowed (TOPIC_AUTHORIZATION_FAILED)")
