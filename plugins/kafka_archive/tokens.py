"""Offset tokens: per (group, topic), the next Kafka offset to archive for each partition.

A token is a small text file at `<token_root>/<group>/<topic>.token`, one uSwitch-style
line per partition (`<bootstrap> <topic> <partition> <next_offset>`) under `#` headers.
People read and edit these files to rewind, so parsing is strict: a damaged token stops
the run with the file and line named, it is never mistaken for "no token" (which would
silently re-archive or skip data). Tokens only move by compare-and-swap against the
version the plan was computed from, so two runs can never both advance the same token.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse

from kafka_archive.errors import TerminalError, VersionConflict
from kafka_archive.storage import (Storage, fsync_dir, join, local_compare_and_swap, locked,
                                   sha256_hex, split_s3_url)

_NAME = re.compile(r"[A-Za-z0-9._-]+")  # Kafka's legal topic characters; groups follow suit
_NUMBER = re.compile(r"[0-9]+")         # int() would also take "+1", " 1", "1_0" and "١"
_BOOTSTRAP = re.compile(r"[^\s#]\S*")  # one field, not read back as a header
_HEADERS = ("group", "topic", "committed_at", "run_id")


class MalformedTokenError(TerminalError):
    """A token file exists but cannot be trusted; names the file and the 1-based line."""

    def __init__(self, path: str, line: int, problem: str):
        super().__init__(f"malformed token {path}, line {line}: {problem}")
        self.path = path
        self.line = line


class TokenConflictError(VersionConflict):
    """Another writer changed the token since it was read; nothing was written."""

    def __init__(self, group: str, topic: str, expected: str | None, found: str | None):
        super().__init__(
            f"{group}/{topic}.token", expected, found,
            f"token {group}/{topic} changed under this run: expected version "
            f"{expected or '<absent>'}, found {found or '<absent>'}; another run committed "
            "or someone edited the token, so this run's plan is stale and was not committed")
        self.group = group
        self.topic = topic


def _check_name(kind: str, name: str) -> str:
    """Group and topic names become path segments: refuse anything that could escape."""
    if not _NAME.fullmatch(name) or name in (".", ".."):
        raise TerminalError(f"invalid {kind} name {name!r}: use letters, digits, '.', '_', '-'")
    return name


@dataclass(frozen=True)
class Token:
    group: str
    topic: str
    bootstrap: str                 # "" only when no partition has a line
    offsets: Mapping[int, int]     # partition -> next offset to archive (exclusive end)
    committed_at: str | None = None  # ISO-8601 UTC
    run_id: str | None = None

    def __post_init__(self) -> None:
        # Validate here so render() can only produce text that parse() accepts.
        _check_name("group", self.group)
        _check_name("topic", self.topic)
        if self.offsets and not _BOOTSTRAP.fullmatch(self.bootstrap):
            raise TerminalError(f"token {self.group}/{self.topic}: invalid bootstrap "
                                f"{self.bootstrap!r}: one word not starting with #")
        for partition, offset in self.offsets.items():
            if not (isinstance(partition, int) and isinstance(offset, int)
                    and partition >= 0 and offset >= 0):
                raise TerminalError(f"token {self.group}/{self.topic}: partition {partition!r} "
                                    f"offset {offset!r} must be non-negative integers")
        for header in (self.committed_at, self.run_id):
            # parse() strips header values and splits lines: only such values round-trip.
            if header is not None and header.strip().splitlines() != [header]:
                raise TerminalError(f"token {self.group}/{self.topic}: header value "
                                    f"{header!r} must be one line without outer whitespace")
        object.__setattr__(self, "offsets", dict(sorted(self.offsets.items())))  # a snapshot


def render(token: Token) -> str:
    lines = [f"# group: {token.group}", f"# topic: {token.topic}"]
    if token.committed_at is not None:
        lines.append(f"# committed_at: {token.committed_at}")
    if token.run_id is not None:
        lines.append(f"# run_id: {token.run_id}")
    lines += [f"{token.bootstrap} {token.topic} {partition} {offset}"
              for partition, offset in sorted(token.offsets.items())]
    return "\n".join(lines) + "\n"


def parse(text: str, *, path: str, group: str, topic: str) -> Token:
    """The token in text, which was read from path for (group, topic); strict."""
    headers: dict[str, str] = {}
    bootstrap: str | None = None
    offsets: dict[int, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        try:
            if line.startswith("#"):
                _read_header(line, headers, group=group, topic=topic)
            elif line.strip():
                line_bootstrap, partition, offset = _read_entry(line, topic)
                if bootstrap not in (None, line_bootstrap):
                    raise ValueError(f"bootstrap {line_bootstrap!r} differs from "
                                     f"{bootstrap!r} on earlier lines")
                if partition in offsets:
                    raise ValueError(f"duplicate partition {partition}")
                bootstrap, offsets[partition] = line_bootstrap, offset
        except ValueError as exc:
            raise MalformedTokenError(path, number, str(exc)) from None
    return Token(group=group, topic=topic, bootstrap=bootstrap or "", offsets=offsets,
                 committed_at=headers.get("committed_at"), run_id=headers.get("run_id"))


def _read_header(line: str, headers: dict[str, str], *, group: str, topic: str) -> None:
    key, colon, value = line[1:].partition(":")
    key, value = key.strip(), value.strip()
    if not colon or key not in _HEADERS:
        return  # any other '#' line is a comment
    expected = {"group": group, "topic": topic}.get(key, value)
    if value != expected:
        raise ValueError(f"header says {key} {value!r} but the file is for {expected!r}")
    headers[key] = value


def _read_entry(line: str, topic: str) -> tuple[str, int, int]:
    fields = line.split(" ")
    if len(fields) != 4 or "" in fields:
        raise ValueError("expected '<bootstrap> <topic> <partition> <next_offset>' separated "
                         f"by single spaces, found {line!r}")
    bootstrap, line_topic, partition, offset = fields
    if line_topic != topic:
        raise ValueError(f"topic {line_topic!r} differs from the file's topic {topic!r}")
    for name, value in (("partition", partition), ("offset", offset)):
        if not _NUMBER.fullmatch(value):
            raise ValueError(f"{name} {value!r} is not a non-negative integer")
    return bootstrap, int(partition), int(offset)


def _decode(data: bytes, path: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedTokenError(path, data.count(b"\n", 0, exc.start) + 1,
                                  "not UTF-8 text") from exc


@dataclass(frozen=True)
class Versioned:
    token: Token | None
    version: str | None  # None: the file is absent (and so is the token)


class TokenStore(Protocol):
    def read(self, group: str, topic: str) -> Versioned: ...

    def write(self, token: Token, expected_version: str | None) -> str:
        """Replace the token if its version is still expected_version (None: create it
        only if absent); return the new version, or raise TokenConflictError."""

    def delete(self, group: str, topic: str) -> None: ...

    def topics(self, group: str) -> list[str]: ...


class LocalTokenStore:
    """Tokens in a directory; the version is the sha256 of the file's bytes."""

    def __init__(self, root: Path):
        self.root = root

    def _path(self, group: str, topic: str) -> Path:
        return self.root / _check_name("group", group) / f"{_check_name('topic', topic)}.token"

    def read(self, group: str, topic: str) -> Versioned:
        path = self._path(group, topic)
        try:
            data = path.read_bytes()  # no lock: os.replace shows readers old or new, whole
        except FileNotFoundError:
            return Versioned(None, None)
        token = parse(_decode(data, str(path)), path=str(path), group=group, topic=topic)
        return Versioned(token, sha256_hex(data))

    def write(self, token: Token, expected_version: str | None) -> str:
        path = self._path(token.group, token.topic)
        try:
            return local_compare_and_swap(path, render(token).encode(), expected_version)
        except VersionConflict as exc:
            raise TokenConflictError(token.group, token.topic, expected_version,
                                     exc.found) from None

    def delete(self, group: str, topic: str) -> None:
        path = self._path(group, topic)
        with locked(path):
            path.unlink(missing_ok=True)
            fsync_dir(path.parent)

    def topics(self, group: str) -> list[str]:
        folder = self.root / _check_name("group", group)
        # Lock files (.<name>.lock) and temp files (.<name>.<random>) do not end in .token.
        return sorted(p.name.removesuffix(".token") for p in folder.glob("*.token"))


class S3TokenStore:
    """Tokens under s3://bucket/prefix, through Storage (which classifies every failure);
    the version is the object's ETag."""

    def __init__(self, client: Any, url: str):
        split_s3_url(url)  # fail early on a non-s3 URL
        self.storage = Storage(lambda: client)
        self.url = url.rstrip("/")

    def _url(self, group: str, topic: str) -> str:
        return join(self.url, _check_name("group", group), f"{_check_name('topic', topic)}.token")

    def read(self, group: str, topic: str) -> Versioned:
        url = self._url(group, topic)
        data, version = self.storage.get_versioned(url)
        if data is None:
            return Versioned(None, None)
        return Versioned(parse(_decode(data, url), path=url, group=group, topic=topic), version)

    def write(self, token: Token, expected_version: str | None) -> str:
        url = self._url(token.group, token.topic)
        try:
            return self.storage.put_if(url, render(token).encode(), expected_version,
                                       content_type="text/plain")
        except VersionConflict as exc:
            raise TokenConflictError(token.group, token.topic, expected_version,
                                     exc.found) from exc

    def delete(self, group: str, topic: str) -> None:
        self.storage.delete(self._url(group, topic))  # absent is fine: no token

    def topics(self, group: str) -> list[str]:
        folder = join(self.url, _check_name("group", group)) + "/"
        return sorted(url[len(folder):].removesuffix(".token")
                      for url, _ in self.storage.list(folder)
                      if url.endswith(".token") and "/" not in url[len(folder):])


def open_store(token_root: str, s3_client_factory: Callable[[], Any]) -> TokenStore:
    """The store for a config's token_root: s3://bucket/prefix, or a local directory
    (file:///path or a path; relative paths are taken from the current directory)."""
    if token_root.startswith("s3://"):
        return S3TokenStore(s3_client_factory(), token_root)
    if token_root.startswith("file://"):
        token_root = urlparse(token_root).path
    return LocalTokenStore(Path(token_root).absolute())
