"""The kafka-archive config file: one YAML document, validated on load.

Values may refer to the environment as ${NAME} or ${NAME:-default}, so one file serves
local runs, tests and production. Secrets never live here: S3 credentials come from the
Airflow connection named by `s3_conn_id`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kafka_archive.errors import ConfigError

DEFAULT_PATH = Path(__file__).resolve().parents[2] / "config" / "kafka-archive.yaml"
_ENV_REF = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}")


@dataclass(frozen=True)
class Config:
    path: Path
    bootstrap_servers: str
    archive_root: str  # file:///abs/path or s3://bucket/prefix
    token_root: str
    s3_conn_id: str


def load(path: str | Path | None = None) -> Config:
    path = Path(path or os.environ.get("KAFKA_ARCHIVE_CONFIG") or DEFAULT_PATH)
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found (set KAFKA_ARCHIVE_CONFIG)") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    doc = _Doc(path, _expand(raw, path))
    return Config(
        path=path,
        bootstrap_servers=doc.str("kafka.bootstrap_servers"),
        archive_root=doc.str("archive_root", pattern=r"(file:///|s3://[^/]+).*"),
        token_root=doc.str("token_root", default="offsets/"),
        s3_conn_id=doc.str("s3_conn_id", default="kafka_archive_s3"),
    )


class _Doc:
    """Typed access to the parsed YAML, with errors that name file and key."""

    def __init__(self, path: Path, data: Any):
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: the top level must be a mapping")
        self.path, self.data = path, data

    def get(self, key: str, default: Any = ...) -> Any:
        node: Any = self.data
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                if default is ...:
                    raise ConfigError(f"{self.path}: missing required key '{key}'")
                return default
            node = node[part]
        return node

    def str(self, key: str, default: Any = ..., pattern: str | None = None) -> str:
        value = self.get(key, default)
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{self.path}: '{key}' must be a non-empty string, got {value!r}")
        if pattern and not re.fullmatch(pattern, value):
            raise ConfigError(f"{self.path}: '{key}' = {value!r} does not match {pattern}")
        return value


def _expand(node: Any, path: Path) -> Any:
    if isinstance(node, dict):
        return {k: _expand(v, path) for k, v in node.items()}
    if isinstance(node, list):
        return [_expand(v, path) for v in node]
    if isinstance(node, str):
        def substitute(m: re.Match) -> str:
            value = os.environ.get(m["name"], m["default"])
            if value is None:
                raise ConfigError(f"{path}: ${{{m['name']}}} is not set and has no default")
            return value
        return _ENV_REF.sub(substitute, node)
    return node
