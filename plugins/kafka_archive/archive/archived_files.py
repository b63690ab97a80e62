"""Reading an archived file back, by URL: the replay job's tasks, `cat` and `verify` read
through here, so a damaged file is told apart from a failure to reach it in one place."""

from __future__ import annotations

import gzip
from typing import Iterator

from botocore.exceptions import BotoCoreError, ClientError

from kafka_archive import formats, retries
from kafka_archive.errors import MissingObject, TerminalError
from kafka_archive.formats.records import Record
from kafka_archive.storage import Storage


class DamagedFile(TerminalError):
    """An archived file that is not there or cannot be decoded: the file's fault, which
    no retry mends (verify reports it as such)."""


# What decoding a damaged file raises: the SequenceFile reader and msgpack ValueError, a
# key map without an offset KeyError or TypeError, a cut or corrupt gzip EOFError or
# BadGzipFile. Anything else (throttling, a reset connection, a full disk) is not the
# file's fault and is raised classified as what it is.
DAMAGE = (ValueError, KeyError, TypeError, EOFError, gzip.BadGzipFile)


def read_archived(storage: Storage, url: str) -> Iterator[Record]:
    """The file's records. DamagedFile when it is missing or cannot be decoded; any other
    failure to read it classified (retries.classify), naming the file. Failures of the
    caller's own (printing to a closed pipe) pass through untouched."""
    try:
        with storage.open(url) as stream:
            yield from formats.read(stream, url)
    except MissingObject as exc:
        raise DamagedFile(f"cannot read archived file {url}: it is not there") from exc
    except DAMAGE as exc:
        raise DamagedFile(f"cannot read archived file {url}: {exc}") from None
    except (OSError, BotoCoreError, ClientError) as exc:  # the stream's own connection or disk
        raise retries.classify(exc, f"cannot read archived file {url}") from exc
