"""The `kafka-archive` command line."""

from __future__ import annotations

import argparse
import json
import sys

from kafka_archive import config as config_module
from kafka_archive import preflight
from kafka_archive.errors import ArchiveError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kafka-archive", description=__doc__)
    parser.add_argument("--config", help="config file (default: $KAFKA_ARCHIVE_CONFIG or "
                                         "config/kafka-archive.yaml)")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("preflight", help="check Kafka and the archive root are reachable")
    args = parser.parse_args(argv)
    try:
        config = config_module.load(args.config)
        if args.command == "preflight":
            print(json.dumps(preflight.run(config), indent=2))
    except ArchiveError as exc:
        print(f"kafka-archive: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
