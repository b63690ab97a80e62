"""A config on local folders for unit tests: an archive root and token root under
tmp_path, a Kafka nobody reaches, and the groups given (YAML, as under `groups:`)."""

import textwrap
from pathlib import Path

from kafka_archive import config


def local_config(tmp_path: Path, groups: str, iceberg_catalog: bool = False,
                 sections: str = "", archive_root: str | None = None,
                 token_root: str | None = None) -> config.Config:
    """iceberg_catalog: the `local` Iceberg catalog on SQLite under tmp_path too;
    sections: more top-level YAML (e.g. an `audit:` section); archive_root, token_root:
    elsewhere than under tmp_path (s3://...)."""
    path = tmp_path / "kafka-archive.yaml"
    catalog = (f"iceberg_catalogs: {{local: {{type: sql, uri: 'sqlite:///{tmp_path}/catalog.db'}}}}\n"
               if iceberg_catalog else "")
    path.write_text(textwrap.dedent(f"""\
        kafka: {{bootstrap_servers: "127.0.0.1:9"}}
        archive_root: {archive_root or f"file://{tmp_path}/archive"}
        token_root: {token_root or f"{tmp_path}/tokens"}
        """) + catalog + sections + "groups:\n" + textwrap.indent(textwrap.dedent(groups), "  "))
    return config.load(path)
