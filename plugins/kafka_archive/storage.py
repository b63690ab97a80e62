"""Objects under an archive or token root: s3://bucket/key or file:///path, one API.

Airflow tasks get their S3 client from the Airflow connection
(kafka_archive.airflow.connections); Spark executors, which have no Airflow, from boto3's
own environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL_S3) that the
archive task passes to the job.
Local writes are atomic (temp file, fsync, rename) so a reader never sees half a file.

Every failure leaves Storage classified (kafka_archive.retries): MissingObject where
nothing is stored, VersionConflict for a lost compare-and-swap, DiskFullError, else a
TransientError or TerminalError naming the action and the URL; never a raw botocore or
OS error.

Compare-and-swap (`get_versioned`, `put_if`): the one conditional write that tokens, the
audit's checkpoint and anything else that must not lose a concurrent update use. Local:
the version is the sha256 of the bytes, compared and replaced under an flock; S3: the
ETag, with a conditional PUT (`If-Match`, or `If-None-Match: *` to create).
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import os
import secrets
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator
from urllib.parse import urlparse

# imported here, not per call: crc32c runs on every write of an archive file (botocore
# imports awscrt anyway wherever boto3 is used)
from awscrt import checksums

from kafka_archive import retries
from kafka_archive.errors import ArchiveError, MissingObject, TerminalError, VersionConflict


def split_s3_url(url: str) -> tuple[str, str]:
    parsed = urlparse(url)
    if parsed.scheme != "s3" or not parsed.netloc:
        raise TerminalError(f"not an s3://bucket/key URL: {url!r}")
    return parsed.netloc, parsed.path.lstrip("/")


def local_path(url: str) -> Path:
    return Path(urlparse(url).path) if url.startswith("file://") else Path(url)


def join(root: str, *parts: str) -> str:
    return "/".join([root.rstrip("/"), *(p.strip("/") for p in parts)])


@contextmanager
def _classified(action: str, url: str) -> Iterator[None]:
    """Any failure of `action` on `url` as an error of its family (retries.classify)."""
    try:
        yield
    except ArchiveError:
        raise
    except FileNotFoundError as exc:
        raise MissingObject(f"cannot {action} {url}: nothing there") from exc
    except OSError as exc:
        if retries.is_disk_full(exc):
            where = url if url.startswith("s3://") else str(local_path(url))
            raise retries.disk_full(exc, where, f"cannot {action}") from exc
        raise retries.classify(exc, f"cannot {action} {url}") from exc
    except Exception as raised:  # botocore's errors (its NoSuchKey class is made per client)
        exc = retries.underlying_s3_error(raised)
        if retries.is_missing(exc):
            raise MissingObject(f"cannot {action} {url}: no such object") from raised
        if not retries.is_s3_error(exc):
            raise
        raise retries.classify(exc, f"cannot {action} {url}") from raised


class Storage:
    def __init__(self, make_s3_client: Callable[[], object] | None = None):
        self._make_s3_client = make_s3_client
        self._client = None

    @classmethod
    def from_environment(cls) -> Storage:
        import boto3

        return cls(lambda: boto3.client("s3", config=retries.s3_config()))

    @property
    def s3(self):
        if self._client is None:
            if self._make_s3_client is None:
                raise TerminalError("an s3:// URL was used but no S3 client is configured")
            self._client = self._make_s3_client()
        return self._client

    def put_bytes(self, url: str, data: bytes) -> None:
        with _classified("write", url):
            if url.startswith("s3://"):
                bucket, key = split_s3_url(url)
                self.s3.put_object(Bucket=bucket, Key=key, Body=data)
                return
            with _atomic_local(local_path(url)) as tmp:
                tmp.write(data)

    def upload_file(self, source: Path, url: str, crc32c: int | None = None) -> None:
        """Copy a finished local file to url; large files go up in parts. `crc32c`: the
        file's, computed as it was written (crc32c below), sent along for S3 to check
        against what it received (a mismatch refuses the upload) and keep with the object:
        over HTTPS no other hash of the bytes is made."""
        with _classified("upload", url):
            if url.startswith("s3://"):
                bucket, key = split_s3_url(url)
                checksum = {} if crc32c is None else {"ChecksumCRC32C": s3_checksum(crc32c)}
                self.s3.upload_file(str(source), bucket, key, ExtraArgs=checksum)
                return
            with _atomic_local(local_path(url)) as tmp, open(source, "rb") as src:
                shutil.copyfileobj(src, tmp, 1 << 20)

    def get_bytes(self, url: str) -> bytes:
        with _classified("read", url):
            if url.startswith("s3://"):
                bucket, key = split_s3_url(url)
                return self.s3.get_object(Bucket=bucket, Key=key)["Body"].read()
            return local_path(url).read_bytes()

    def open(self, url: str) -> BinaryIO:
        """A stream of the object at url, for files too large to hold in memory. (Reading
        it may still fail unclassified: callers read through formats, which say where.)"""
        with _classified("open", url):
            if url.startswith("s3://"):
                bucket, key = split_s3_url(url)
                return self.s3.get_object(Bucket=bucket, Key=key)["Body"]
            return open(local_path(url), "rb")

    def get_or_none(self, url: str) -> bytes | None:
        try:
            return self.get_bytes(url)
        except MissingObject:
            return None

    def size(self, url: str) -> int | None:
        """Size in bytes, or None if there is no object at url."""
        try:
            with _classified("look up", url):
                if url.startswith("s3://"):
                    bucket, key = split_s3_url(url)
                    return self.s3.head_object(Bucket=bucket, Key=key)["ContentLength"]
                path = local_path(url)
                return path.stat().st_size if path.is_file() else None
        except MissingObject:
            return None

    def sizes(self, urls: list[str], at_once: int = 16) -> dict[str, int | None]:
        """size() of each URL, `at_once` looked up at a time: a commit checks every file
        it adds (10,000 at 10,000 partitions), and S3 answers a HEAD in 10-50 ms. (On the
        loopback MinIO, where both ends share 2 CPUs, it gained 20 s -> 18 s.)"""
        from concurrent.futures import ThreadPoolExecutor

        unique = list(dict.fromkeys(urls))
        if not any(url.startswith("s3://") for url in unique):  # a stat each: no waiting
            return {url: self.size(url) for url in unique}
        with ThreadPoolExecutor(min(at_once, max(1, len(unique)))) as pool:
            return dict(zip(unique, pool.map(self.size, unique)))

    def list(self, prefix_url: str, start_after: str | None = None) -> Iterator[tuple[str, int]]:
        """(url, size) of every object under prefix_url/, recursively, in key order;
        with start_after (a URL under prefix_url), only those whose URL sorts after it,
        which S3 skips server-side (ListObjectsV2 StartAfter)."""
        prefix_url = prefix_url.rstrip("/") + "/"
        if start_after is not None and not start_after.startswith(prefix_url):
            raise ValueError(f"start_after {start_after!r} is not under {prefix_url!r}")
        with _classified("list", prefix_url):
            if prefix_url.startswith("s3://"):
                bucket, prefix = split_s3_url(prefix_url)
                after = {"StartAfter": split_s3_url(start_after)[1]} if start_after else {}
                pages = self.s3.get_paginator("list_objects_v2").paginate(
                    Bucket=bucket, Prefix=prefix, **after)
                for page in pages:
                    for obj in page.get("Contents", []):
                        yield f"s3://{bucket}/{obj['Key']}", obj["Size"]
                return
            root = local_path(prefix_url)
            if root.is_dir():
                for path in sorted(p for p in root.rglob("*") if not p.name.startswith(".")):
                    url = f"file://{path}"
                    if (start_after is None or url > start_after) and path.is_file():
                        yield url, path.stat().st_size

    def folders(self, prefix_url: str) -> list[str]:
        """The URLs of the folders right under prefix_url/ (S3: common prefixes), sorted."""
        prefix_url = prefix_url.rstrip("/") + "/"
        with _classified("list", prefix_url):
            if prefix_url.startswith("s3://"):
                bucket, prefix = split_s3_url(prefix_url)
                pages = self.s3.get_paginator("list_objects_v2").paginate(
                    Bucket=bucket, Prefix=prefix, Delimiter="/")
                return sorted(f"s3://{bucket}/{common['Prefix'].rstrip('/')}"
                              for page in pages for common in page.get("CommonPrefixes", []))
            root = local_path(prefix_url)
            return sorted(f"file://{p}" for p in root.iterdir() if p.is_dir()) if root.is_dir() else []

    def browser_link(self, url: str, expires_s: int) -> str:
        """A link a browser opens: for S3 a presigned GET URL valid expires_s seconds (at
        most 7 days, SigV4's limit), for a local root the file:// URL itself."""
        if url.startswith("s3://"):
            bucket, key = split_s3_url(url)
            with _classified("link to", url):
                return self.s3.generate_presigned_url(
                    "get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=expires_s)
        return f"file://{local_path(url)}"

    def get_versioned(self, url: str) -> tuple[bytes | None, str | None]:
        """The object's bytes and version, or (None, None) when there is none."""
        try:
            with _classified("read", url):
                if url.startswith("s3://"):
                    bucket, key = split_s3_url(url)
                    response = self.s3.get_object(Bucket=bucket, Key=key)
                    return response["Body"].read(), response["ETag"]
                data = local_path(url).read_bytes()
                return data, sha256_hex(data)
        except MissingObject:
            return None, None

    def put_if(self, url: str, data: bytes, expected_version: str | None,
               content_type: str = "application/octet-stream") -> str:
        """Write data if the object's version is still expected_version (None: only if
        there is no object); the new version, or VersionConflict and nothing written."""
        with _classified("write", url):
            if url.startswith("s3://"):
                return s3_compare_and_swap(self.s3, url, data, expected_version, content_type)
            return local_compare_and_swap(local_path(url), data, expected_version)

    def check_conditional_writes(self, folder_url: str) -> str:
        """Refuse a server that does not honour `If-None-Match: *` and `If-Match`: there two
        writers could both win a token or a catalog entry, and one would be lost. Probes
        an object under folder_url (created, then overwritten against no version and
        against a wrong one, both of which must fail; then deleted); what was checked."""
        # a name of its own: plans of several groups probe the same root at once
        url = join(folder_url, f"_conditional_write_probe-{secrets.token_hex(8)}")
        where = (f"the S3 server at {self.s3.meta.endpoint_url}" if url.startswith("s3://")
                 else "the local file system")
        self.put_if(url, b"first", None)
        for version, condition in ((None, "If-None-Match: * (create only if absent)"),
                                   ('"00000000000000000000000000000000"',
                                    "If-Match with a version the object does not have")):
            try:
                self.put_if(url, b"second", version)
            except VersionConflict:
                continue
            self.delete(url)
            raise TerminalError(
                f"{where} does not honour conditional writes: a PUT of {url} with {condition} "
                "succeeded over an existing object. Tokens and the catalog move by "
                "compare-and-swap; on this server two writers could both win and one "
                "commit would be lost, so kafka-archive refuses to run on it. Use a server "
                "that honours If-Match / If-None-Match (AWS S3, MinIO).")
        self.delete(url)
        return f"{where} honours If-None-Match: * and If-Match"

    def delete(self, url: str) -> None:
        with _classified("delete", url):
            if url.startswith("s3://"):
                bucket, key = split_s3_url(url)
                self.s3.delete_object(Bucket=bucket, Key=key)
            else:
                local_path(url).unlink(missing_ok=True)

    def move(self, source: str, target: str) -> None:
        """Copy then delete: a crash in between leaves a copy too many, never none."""
        if source.startswith("s3://"):
            src_bucket, src_key = split_s3_url(source)
            bucket, key = split_s3_url(target)
            with _classified("copy", f"{source} to {target}"):
                self.s3.copy_object(Bucket=bucket, Key=key,
                                    CopySource={"Bucket": src_bucket, "Key": src_key})
        else:
            self.upload_file(local_path(source), target)
        self.delete(source)


class _atomic_local:
    """Write to a temp file beside path; on success fsync and rename over path."""

    def __init__(self, path: Path):
        self.path = path

    def __enter__(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = tempfile.NamedTemporaryFile(dir=self.path.parent, prefix=f".{self.path.name}.",
                                               delete=False)
        return self.tmp

    def __exit__(self, exc_type, exc, tb):
        try:
            if exc_type is None:
                self.tmp.flush()
                os.fsync(self.tmp.fileno())
        finally:
            self.tmp.close()
        if exc_type is not None:
            os.unlink(self.tmp.name)
            return False
        os.replace(self.tmp.name, self.path)
        fsync_dir(self.path.parent)  # makes the rename itself durable
        return False


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --- compare-and-swap --------------------------------------------------------------------

def crc32c(data: bytes, running: int = 0) -> int:
    """S3's CRC32C of data, continuing the `running` one (awscrt's: the one botocore uses)."""
    return checksums.crc32c(data, running)


def s3_checksum(crc: int) -> str:
    """A CRC32C as S3 shows it (x-amz-checksum-crc32c, HeadObject's ChecksumCRC32C): its
    four big-endian bytes in base64."""
    return base64.b64encode(crc.to_bytes(4, "big")).decode()


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock for path. The lock file (.<name>.lock) stays: removing it
    would let a waiter lock the unlinked file while a newcomer locks a fresh one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f".{path.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield  # closing the file releases the lock


def local_compare_and_swap(path: Path, data: bytes, expected_version: str | None) -> str:
    with locked(path):
        try:
            found = sha256_hex(path.read_bytes())
        except FileNotFoundError:
            found = None
        if found != expected_version:
            raise VersionConflict(str(path), expected_version, found)
        with _atomic_local(path) as tmp:
            tmp.write(data)
    return sha256_hex(data)


def s3_compare_and_swap(client: Any, url: str, data: bytes, expected_version: str | None,
                        content_type: str = "application/octet-stream") -> str:
    """A conditional PUT; VersionConflict when the condition failed, any other error as
    the client raised it."""
    bucket, key = split_s3_url(url)
    condition = ({"IfNoneMatch": "*"} if expected_version is None
                 else {"IfMatch": expected_version})
    try:
        response = client.put_object(Bucket=bucket, Key=key, Body=data,
                                     ContentType=content_type, **condition)
    except Exception as exc:
        # If-Match on an object deleted meanwhile fails as missing: also a lost race
        if retries.is_conflict(exc) or (expected_version is not None and retries.is_missing(exc)):
            try:  # the version that won, for the message; best effort
                found = client.head_object(Bucket=bucket, Key=key)["ETag"]
            except Exception:
                found = None
            raise VersionConflict(url, expected_version, found) from exc
        raise
    return response["ETag"]
