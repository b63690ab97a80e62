"""Which failures are worth a retry, and the few retries the library makes itself.

Two families (kafka_archive.errors): transient, where a retry may succeed (S3 throttling
and server errors, connection resets and timeouts, Kafka's retriable errors), and
terminal, where a person must act (access denied, no such bucket, a failed precondition
= a lost compare-and-swap, a full disk, bad config). Every S3, Kafka and local I/O error
the library turns into an ArchiveError is classified here, and only here.

Retrying is bounded and reserved for small idempotent calls:
- S3 calls retry inside botocore, configured once by `s3_config` (standard mode:
  throttling, 5xx and connection errors, at most S3_MAX_ATTEMPTS attempts with jittered
  exponential back-off). Every S3 client the library makes uses it. A conditional PUT
  retried after a lost response may then find its own write: commit checks for that.
- Kafka look-ups (metadata, offsets) retry with `call`.
- Anything bigger (a Spark job, a whole task) is retried by Airflow (`retries`,
  `retry_delay`), from a state the commit protocol keeps consistent.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import time
from typing import Callable, TypeVar

from kafka_archive.errors import ArchiveError, TerminalError, TransientError

log = logging.getLogger(__name__)
T = TypeVar("T")

S3_MAX_ATTEMPTS = 5          # first try included
S3_CONNECT_TIMEOUT_S = 10
S3_READ_TIMEOUT_S = 60
S3_CONNECTIONS = 32           # connections a client keeps (threads sharing it at once)

MISSING_CODES = frozenset({"NoSuchKey", "404", "NotFound"})
# a failed precondition: AWS and MinIO say 412 PreconditionFailed; AWS says 409
# ConditionalRequestConflict when a concurrent conditional write wins meanwhile
CONFLICT_CODES = frozenset({"PreconditionFailed", "412", "ConditionalRequestConflict", "409"})
# S3 error codes a retry may get past, whatever their HTTP status
TRANSIENT_S3_CODES = frozenset({"SlowDown", "Throttling", "ThrottlingException",
                                "RequestTimeout", "RequestTimeoutException", "InternalError",
                                "ServiceUnavailable", "503", "500", "502", "504"})
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
# refusals that repeat on every retry, and what a person changes for each
S3_REFUSALS = {
    "AccessDenied": "the S3 connection's credentials may not do this: grant them the "
                    "bucket and prefix (its policy), or use a connection that may",
    "NoSuchBucket": "create the bucket, or correct archive_root / token_root",
    "InvalidAccessKeyId": "the S3 connection's access key is unknown to the server: fix "
                          "its login",
    "SignatureDoesNotMatch": "the S3 connection's secret key is wrong: fix its password",
    "InvalidBucketName": "correct the bucket name in archive_root / token_root",
}


class DiskFullError(TerminalError):
    """A local file could not be written for lack of space; names the path and what is free."""


def s3_config():
    """The botocore client config of every S3 client the library makes: bounded retries
    with back-off for throttling, server errors and broken connections; timeouts that
    turn a hung connection into a retry; connections kept for S3_CONNECTIONS threads
    (the catalog's rebuild reads 16 documents at once: with botocore's default of 10,
    every request beyond it opened a new connection and threw it away)."""
    from botocore.config import Config

    return Config(retries={"max_attempts": S3_MAX_ATTEMPTS, "mode": "standard"},
                  connect_timeout=S3_CONNECT_TIMEOUT_S, read_timeout=S3_READ_TIMEOUT_S,
                  max_pool_connections=S3_CONNECTIONS)


def s3_error_code(exc: BaseException) -> str:
    """The S3 error code of a botocore ClientError ("NoSuchKey", "SlowDown"), else ""."""
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


def s3_status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None) or {}
    return response.get("ResponseMetadata", {}).get("HTTPStatusCode")


def is_missing(exc: BaseException) -> bool:
    """An S3 'no such object' (botocore's NoSuchKey class is generated per client)."""
    return s3_error_code(exc) in MISSING_CODES


def is_conflict(exc: BaseException) -> bool:
    """An S3 conditional write whose condition failed: somebody else wrote first."""
    return s3_error_code(exc) in CONFLICT_CODES


def is_s3_error(exc: BaseException) -> bool:
    """An error botocore raised (a refusal, a broken connection, a timeout)."""
    from botocore.exceptions import BotoCoreError, ClientError

    return isinstance(exc, (BotoCoreError, ClientError))


def underlying_s3_error(exc: BaseException) -> BaseException:
    """What S3 answered, under boto3's wrapper: `upload_file` turns a refusal into
    S3UploadFailedError, which carries no error code or status; the ClientError it was
    raised while handling (its __context__) does."""
    from boto3.exceptions import S3UploadFailedError

    if isinstance(exc, S3UploadFailedError) and exc.__context__ is not None:
        return exc.__context__
    return exc


def is_transient(exc: BaseException) -> bool:
    from botocore.exceptions import (ClientError, ConnectionError as BotoConnectionError,
                                     HTTPClientError, IncompleteReadError)
    from kafka.errors import KafkaError

    if isinstance(exc, ArchiveError):
        return isinstance(exc, TransientError)
    if isinstance(exc, ClientError):
        if is_missing(exc) or is_conflict(exc):
            return False
        status = s3_status(exc) or 0
        return status >= 500 or status == 429 or s3_error_code(exc) in TRANSIENT_S3_CODES
    if isinstance(exc, (BotoConnectionError, HTTPClientError, IncompleteReadError)):
        return True  # refused, reset or closed connections, connect and read timeouts
    if isinstance(exc, KafkaError):
        return exc.retriable  # unreachable brokers and timeouts are; auth failures are not
    if isinstance(exc, OSError):
        return exc.errno not in DISK_FULL_ERRNOS and not isinstance(
            exc, (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError))
    return False


def classify(exc: BaseException, what: str) -> ArchiveError:
    """exc as an error of its family, its message saying what failed. ArchiveErrors are
    already classified and come back unchanged."""
    if isinstance(exc, ArchiveError):
        return exc
    kind = TransientError if is_transient(exc) else TerminalError
    status = s3_status(exc)
    detail = f"{exc!r}" if status is None else f"{exc} (HTTP {status})"
    if advice := S3_REFUSALS.get(s3_error_code(exc)):
        detail += f"; this refusal repeats on every retry: {advice}"
    return kind(f"{what}: {detail}")


def librdkafka_error(error, what: str) -> ArchiveError:
    """A librdkafka KafkaError (a consumer's message error, a producer's delivery report)
    as an error of its family: transient where librdkafka says a retry may succeed (a
    leader moving, a timeout), terminal for a refusal (authentication, authorization, an
    invalid record) and for a fatal error."""
    kind = TransientError if error.retriable() and not error.fatal() else TerminalError
    return kind(f"{what}: {error.str()} ({error.name()})")


def disk_full(exc: OSError, path: str, what: str) -> DiskFullError:
    """The error for a local write that failed for lack of space: the path, the space
    free on its filesystem and what was being written."""
    try:
        usage = shutil.disk_usage(path if os.path.exists(path) else os.path.dirname(path) or "/")
        space = f"{usage.free} bytes free of {usage.total}"
    except OSError:
        space = "free space unknown"
    return DiskFullError(f"{what}: {path}: no space left ({space}; {exc.strerror}); "
                         "free space there (or give Spark another spark.local.dir), then re-run")


def is_disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS


def call(fn: Callable[[], T], what: str, attempts: int = 3, backoff_s: float = 1.0,
         sleep: Callable[[float], None] = time.sleep) -> T:
    """fn(), retried while it fails transiently, at most `attempts` times in all, waiting
    backoff_s, then twice as long each time. Only for small idempotent calls. A terminal
    failure, or the last transient one, is raised classified."""
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except Exception as exc:
            error = classify(exc, what)
            if not isinstance(error, TransientError) or attempt == attempts:
                if error is exc:
                    raise
                raise error from exc
            wait = backoff_s * 2 ** (attempt - 1)
            log.warning("%s (attempt %d of %d); retrying in %.1f s", error, attempt, attempts, wait)
            sleep(wait)
    raise AssertionError("unreachable")

