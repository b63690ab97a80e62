"""A config on local folders for unit tests: an archive root and token root under
tmp_path, a Kafka nobody reaches, and the groups given (YAML, as under `groups:`)."""

import textwrap
from pathlib import Path

from kafka_archive import config


def local_config(tmp_path: Path, groups: str) -> config.Config:
    path = tmp_path / "kafka-archive.yaml"
    path.write_text(textwrap.dedent(f"""\
        kafka: {{bootstrap_servers: "127.0.0.1:9"}}
        archive_root: file://{tmp_path}/archive
        token_root: {tmp_path}/tokens
        groups:
        """) + textwrap.indent(textwrap.dedent(groups), "  "))
    return config.load(path)
