"""The `kafka-archive` command line."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from typing import Iterator

from botocore.exceptions import BotoCoreError, ClientError

from kafka_archive import config as config_module
from kafka_archive import preflight, records, verify
from kafka_archive.config import Config
from kafka_archive.errors import ArchiveError
from kafka_archive.storage import Storage, s3_client
from kafka_archive.tokens import open_store

PREVIEW_BYTES = 60


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kafka-archive", description=__doc__)
    parser.add_argument("--config", help="config file (default: $KAFKA_ARCHIVE_CONFIG or "
                                         "config/kafka-archive.yaml)")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("preflight", help="check Kafka and the archive root are reachable")
    cat = commands.add_parser("cat", help="print the records of one archived file")
    cat.add_argument("file", help="s3:// or file:// URL, or a local path")
    cat.add_argument("--limit", type=_count, help="print at most this many records")
    check = commands.add_parser("verify", help="check a group's archive against its tokens: "
                                               "every file readable, no offset twice, no hole")
    check.add_argument("--group", required=True)
    args = parser.parse_args(argv)
    try:
        config = config_module.load(args.config)
        if args.command == "preflight":
            _airflow_logs_to_stderr()
            print(json.dumps(preflight.run(config), indent=2))
        elif args.command == "cat":
            cat_file(_storage(config), args.file, args.limit)
        elif args.command == "verify":
            return verify_group(config, args.group)
    except ArchiveError as exc:
        print(f"kafka-archive: {exc}", file=sys.stderr)
        return 1
    except (ClientError, BotoCoreError) as exc:  # listing S3: no bucket, no access
        print(f"kafka-archive: S3: {exc}", file=sys.stderr)
        return 1
    return 0


def _count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return int(text)


def cat_file(storage: Storage, url: str, limit: int | None) -> None:
    for n, record in enumerate(read_archived(storage, url)):
        if limit is not None and n >= limit:
            break
        print(format_record(record))


def read_archived(storage: Storage, url: str) -> Iterator[records.Record]:
    """The file's records; any failure to read it is an error naming the file (failures
    to print, such as a closed pipe, are not)."""
    try:
        with storage.open(url) as stream:
            yield from records.read(stream)
    except verify.READ_ERRORS as exc:
        raise ArchiveError(f"cannot read archived file {url}: {exc}") from None


def format_record(r: records.Record) -> str:
    when = ("-" if r.timestamp_ms is None else
            datetime.fromtimestamp(r.timestamp_ms / 1000, timezone.utc)
            .isoformat(timespec="milliseconds").replace("+00:00", "Z"))
    headers = ",".join(name for name, _ in r.headers) or "-"
    return f"{r.offset}  {when}  key={preview(r.key)}  value={preview(r.value)}  headers={headers}"


def preview(data: bytes | None) -> str:
    if data is None:
        return "<null>"
    if not data:
        return "<empty>"
    more = len(data) - PREVIEW_BYTES
    return repr(data[:PREVIEW_BYTES]) + (f"...(+{more} bytes)" if more > 0 else "")


def verify_group(config: Config, group: str) -> int:
    """Print the report; 1 when it found an error."""
    tokens = open_store(config.token_root, lambda: _s3_client(config.s3_conn_id))
    report = verify.verify_group(config, group, _storage(config), tokens)
    print(report.render())
    return 1 if report.errors() else 0


def _storage(config: Config) -> Storage:
    return Storage(lambda: _s3_client(config.s3_conn_id))


def _s3_client(conn_id: str):
    """The client of the Airflow connection; Airflow is imported only when S3 is used."""
    _airflow_logs_to_stderr()
    return s3_client(conn_id)


def _airflow_logs_to_stderr() -> None:
    """Airflow logs to stdout, where its lines would mix with the records and reports this
    command prints: once Airflow is imported (which configures logging for stdout),
    configure it again for stderr."""
    import airflow  # noqa: F401
    from airflow.sdk.log import configure_logging

    configure_logging(output=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
