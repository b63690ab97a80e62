"""The `kafka-archive` command line."""

from __future__ import annotations

import argparse
import getpass
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

from kafka.errors import KafkaError

from kafka_archive import (brokers, catalog, config as config_module, kafka_connection, layout,
                           registry_connection, spark)
from kafka_archive.airflow import params  # the trigger params' time syntax; no Airflow import
from kafka_archive.audit import incremental, reporting
from kafka_archive.commit import iceberg
from kafka_archive.config import Config
from kafka_archive.errors import ArchiveError, TerminalError
from kafka_archive.monitor import preflight, status
from kafka_archive.plan import losses, rewinds
from kafka_archive.storage import Storage
from kafka_archive.progress_bars import terminal_bar
from kafka_archive.tokens import TokenStore, open_store
from kafka_archive.tools import backfill, listing, replay as replaying, tables as table_views, verify
from kafka_archive.tools.cat import FORMATS, cat_file


def main(argv: list[str] | None = None) -> int:
    """The command; output piped into a reader that stops early (`| head`) ends it quietly."""
    try:
        code = run(argv)
        sys.stdout.flush()  # here, not at exit, where a closed pipe would print a traceback
        return code
    except BrokenPipeError:
        # the reader is gone: point stdout at /dev/null so the interpreter's final flush
        # has nowhere to fail, and exit as a program killed by SIGPIPE would
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE


def command_line() -> argparse.ArgumentParser:
    """Every command and flag (the docs' CLI reference is generated from it)."""
    parser = argparse.ArgumentParser(prog="kafka-archive", description=__doc__)
    parser.add_argument("--config", help="config file (default: $KAFKA_ARCHIVE_CONFIG or "
                                         "config/kafka-archive.yaml)")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="also print the library's and Airflow's INFO logs (on stderr)")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("preflight", help="check Kafka and the archive root are reachable"
                        ).set_defaults(run=check_deployment)
    cat = commands.add_parser("cat", help="print the records of one archived file")
    cat.add_argument("file", help="s3:// or file:// URL, or a local path")
    cat.add_argument("--limit", type=_count, help="print at most this many records")
    cat.add_argument("--format", choices=FORMATS, default="text",
                     help="text: for people; json: one object per line, bytes base64; "
                          "raw: the values only, one per line")
    check = commands.add_parser("verify", help="check a group's archive against its tokens: "
                                               "every file readable, no offset twice, no hole")
    check.add_argument("--group", required=True)
    check.add_argument("--topic", help="only this topic")
    check.add_argument("--files", action="store_true",
                       help="read every current file (plain verify checks the catalog's "
                            "offsets against the tokens)")
    check.add_argument("--full", action="store_true",
                       help="read every file, also those the catalog does not name (walks "
                            "the group's tree)")
    book = commands.add_parser("catalog", help="a group's catalog: entry, topics, partitions, "
                                               "files; --rebuild makes it anew from the runs")
    book.add_argument("--group", required=True)
    book.add_argument("--rebuild", action="store_true",
                      help="rebuild it from the run folders (reads every run)")
    check.add_argument("--json", action="store_true", help="print JSON instead of a report")
    files = commands.add_parser("ls", help="the current files of a group (or one topic): "
                                           "Kafka offsets, records, bytes, URL")
    files.add_argument("--group", required=True)
    files.add_argument("--topic", help="only this topic")
    files.add_argument("--partition", type=_count, help="only this partition (with --topic)")
    files.add_argument("--from-offset", type=_count,
                       help="only slices holding this offset or later (with --topic)")
    files.add_argument("--json", action="store_true", help="print JSON instead of a table")
    tabled = commands.add_parser("tables", help="a table group's Iceberg tables: snapshot, "
                                                "records, files, history")
    tabled.add_argument("--group", required=True)
    tabled.add_argument("--topic", help="only this topic's table")
    tabled.add_argument("--per-hour", action="store_true",
                        help="also count the messages of each hour of Kafka time (reads "
                             "the tables' rows)")
    tabled.set_defaults(run=lambda c, a: show_tables(c, a.group, a.topic, a.per_hour))
    show = commands.add_parser("status", help="per partition: token, Kafka's end offset, lag "
                                              "in messages and in time, last commit")
    show.add_argument("--group", help="only this group (default: every configured group)")
    show.add_argument("--json", action="store_true", help="print JSON instead of a table")
    back = commands.add_parser(
        "rewind", help="move a token back so the next run archives again from there; the "
                       "files it replaces are moved to _superseded/")
    back.add_argument("--group", required=True)
    back.add_argument("--topic", required=True)
    back.add_argument("--partition", type=_count,
                      help="only this partition (default: every partition the token has)")
    to = back.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-offset", type=_count, help="the first offset to archive again")
    to.add_argument("--to-time", type=epoch_ms,
                    help="archive again from the first message at or after this time: "
                         "ISO-8601 (UTC unless it names a zone, e.g. 2026-03-01T12:00:00Z) "
                         "or milliseconds since the epoch")
    accept = commands.add_parser(
        "accept-loss", help="accept that retention deleted messages before they were archived: "
                            "record the lost range (who, when, why) in the archive and move the "
                            "token past it, so the topic is archived again; verify then lists "
                            "the range as known loss")
    accept.add_argument("--group", required=True)
    accept.add_argument("--topic", required=True)
    accept.add_argument("--partition", type=_count,
                        help="only this partition (default: every partition with a gap)")
    accept.add_argument("--reason", required=True, help="why the loss is acceptable")
    accept.add_argument("--by", default=_user(), help="who accepts it (default: $USER)")
    audit = commands.add_parser(
        "audit", help="reconcile producers' monitoring counts with what a group archived; "
                      "exits 1 when a window is MISSING or EXCESS")
    audit.add_argument("--group", help="the group to audit (required)")
    audit.add_argument("--since", type=epoch_ms, help="only windows starting at or after this time")
    audit.add_argument("--until", type=epoch_ms, help="only windows starting before this time")
    audit.add_argument("--rescan", action="store_true",
                       help="count everything again, the archived files themselves instead "
                            "of the manifests, and judge every window again")
    about = audit.add_subparsers(dest="audit_command")
    listing = about.add_parser("list", help="the group's mismatches not resolved: new, open "
                                            "(mailed) and acknowledged")
    listing.add_argument("--group", required=True)
    listing.add_argument("--json", action="store_true", help="print JSON instead of lines")
    ack = about.add_parser("ack", help="acknowledge a mismatch: it stays listed, no longer "
                                       "open, not mailed again")
    ack.add_argument("--group", required=True)
    ack.add_argument("--topic", required=True)
    ack.add_argument("--source", required=True)
    ack.add_argument("--window", required=True, type=epoch_ms,
                     help="a time inside the window (its start, as the report shows it)")
    ack.add_argument("--reason", required=True, help="why this is not (or no longer) a problem")
    ack.add_argument("--by", default=_user(), help="who acknowledges (default: $USER)")
    fill = commands.add_parser(
        "backfill", help="rebuild an event-time group's files of a topic from the backup "
                         "archive (whole slices holding the range); replaced files go to "
                         "_superseded/")
    fill.add_argument("--group", required=True)
    fill.add_argument("--topic", required=True)
    fill.add_argument("--source", default="backup", help="the backup group (default: backup)")
    fill.add_argument("--from-offset", type=_count, help="first offset (every partition)")
    fill.add_argument("--to-offset", type=_count, help="end offset, exclusive")
    fill.add_argument("--since", type=epoch_ms, help="slices with a message at or after this "
                                                     "Kafka timestamp")
    fill.add_argument("--until", type=epoch_ms, help="... and before this one")
    again = commands.add_parser(
        "replay", help="produce archived messages of a range back into a Kafka topic, with "
                       "their keys, values, timestamps and headers, in order, into the same "
                       "partition numbers; run it again to resume a replay that stopped")
    again.add_argument("--group", default="backup", help="the group to read (default: backup)")
    again.add_argument("--topic", required=True, help="the archived topic")
    again.add_argument("--partition", type=_count, help="only this partition (default: all)")
    again.add_argument("--from-offset", type=_count, help="first offset (every partition; "
                                                          "default: the first archived)")
    again.add_argument("--to-offset", type=_count, help="end offset, exclusive (default: the "
                                                        "last archived, plus one)")
    again.add_argument("--since", type=epoch_ms, help="or: only messages with a Kafka "
                                                      "timestamp at or after this time")
    again.add_argument("--until", type=epoch_ms, help="... and before this time")
    again.add_argument("--to-topic", required=True, help="the target topic; it must exist")
    again.add_argument("--bootstrap", help="the target cluster's bootstrap servers (default: "
                                           "the config's; the config's Kafka properties apply)")
    again.add_argument("--hash-by-key", action="store_true",
                       help="let the producer choose the partition by key (needed when the "
                            "target has fewer partitions; resuming after a kill may then send "
                            "again up to 1,000 messages per source partition)")
    again.add_argument("--allow-archived-target", action="store_true",
                       help="allow a target topic that a configured group archives")
    again.add_argument("--max-rate", type=_count,
                       help="at most this many messages per second per source partition")
    again.add_argument("--master", help="Spark master (default: the config's, else local[2])")
    again.add_argument("--dry-run", action="store_true",
                       help="check the range and the target, print the plan, produce nothing")
    # each subcommand's function: (config, args) -> exit code (None: 0)
    cat.set_defaults(run=lambda c, a: cat_file(_storage(c), a.file, a.limit, a.format))
    check.set_defaults(run=lambda c, a: verify_group(c, a.group, a.json, a.topic, a.full,
                                                     a.files))
    book.set_defaults(run=lambda c, a: show_catalog(c, a.group, a.rebuild))
    files.set_defaults(run=lambda c, a: list_files(c, a.group, a.topic, a.json, a.partition,
                                                   a.from_offset))
    show.set_defaults(run=lambda c, a: show_status(c, a.group, a.json))
    back.set_defaults(run=rewind)
    accept.set_defaults(run=accept_loss)
    audit.set_defaults(run=audit_command)
    fill.set_defaults(run=backfill_topic)
    again.set_defaults(run=replay)
    return parser


def run(argv: list[str] | None = None) -> int:
    parser = command_line()
    args = parser.parse_args(argv)
    global _LOG_LEVEL
    _LOG_LEVEL = "INFO" if args.verbose else "WARNING"
    logging.basicConfig(level=_LOG_LEVEL, stream=sys.stderr)
    if args.command == "audit" and not args.audit_command and not args.group:
        parser.error("audit: the following arguments are required: --group")
    try:
        config = registry_connection.connected(
            kafka_connection.connected(config_module.load(args.config), _kafka_extra),
            lambda conn_id: _connections().schema_registry_settings(conn_id))
        return args.run(config, args) or 0
    except ArchiveError as exc:
        print(f"kafka-archive: {exc}", file=sys.stderr)
        return 1
    except KafkaError as exc:  # status and rewind: Kafka gone or refusing a look-up
        print(f"kafka-archive: Kafka at {config.bootstrap_servers}: {exc!r}", file=sys.stderr)
        return 1


def check_deployment(config: Config, args: argparse.Namespace) -> None:
    _airflow_logs_to_stderr()
    print(json.dumps(preflight.run(
        config, _storage(config), "manual", _tokens(config), lambda: _check_smtp(config),
        lambda conn_id: _connections().check_spark_connect(config, conn_id)), indent=2))


def backfill_topic(config: Config, args: argparse.Namespace) -> None:
    run_id = "backfill__" + datetime.now(timezone.utc).strftime("%Y-%m-%dT%H%M%S")
    summary = backfill.backfill(config, _storage(config), args.group, args.topic, run_id,
                                datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                args.from_offset, args.to_offset, args.since,
                                args.until, args.source, terminal_bar)
    print(json.dumps({k: summary[k] for k in ("run_id", "group", "topic", "moved_aside")}
                     | {"slices": len(summary["slices"])}, indent=2))


def audit_command(config: Config, args: argparse.Namespace) -> int | None:
    if args.audit_command == "list":
        return list_mismatches(config, args.group, args.json)
    if args.audit_command == "ack":
        return acknowledge(config, args)
    return audit_group(config, args)


def _user() -> str:
    try:
        return os.environ.get("USER") or getpass.getuser()
    except (OSError, KeyError):  # no user name in the environment nor in the passwd database
        return "unknown"


def _count(text: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return int(text)


def epoch_ms(text: str) -> int:
    """A time given as milliseconds since the epoch or as ISO-8601 (UTC if no zone)."""
    try:
        return params.epoch_ms(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an ISO-8601 time (2026-03-01T12:00:00Z) or milliseconds since the "
            f"epoch, got {text!r}") from None


def verify_group(config: Config, group: str, as_json: bool = False, topic: str | None = None,
                 full: bool = False, files: bool = False) -> int:
    """Print the report; 1 when it found an error."""
    tokens = _tokens(config)
    report = verify.verify_group(config, group, _storage(config), tokens, terminal_bar,
                                 topic, full, files, _tables(config),
                                 lambda: brokers.consumer(config))
    print(json.dumps(report.to_json(), indent=1) if as_json else report.render())
    return 1 if report.errors() else 0


def show_catalog(config: Config, group: str, rebuild: bool) -> None:
    storage = _storage(config)
    started = time.monotonic()
    cat = (catalog.rebuild if rebuild else catalog.open_catalog)(storage, config, group)
    summaries = [s for t in cat.state.topics.values() for s in t.summaries.values()]
    print(f"catalog of group {group}: entry {cat.state.seq} (snapshot {cat.snapshot_seq}), "
          f"{len(cat.state.topics)} topics, {len(summaries)} partitions, "
          f"{sum(s.files for s in summaries)} files, {sum(s.records for s in summaries)} "
          f"records; {'rebuilt' if rebuild else 'read'} in {time.monotonic() - started:.2f} s")


def list_files(config: Config, group: str, topic: str | None, as_json: bool,
               partition: int | None = None, from_offset: int | None = None) -> None:
    config.group(group)  # an unknown group is an error, not an empty listing
    if (partition is not None or from_offset is not None) and topic is None:
        raise TerminalError("--partition and --from-offset need --topic")
    cat = catalog.open_catalog(_storage(config), config, group)
    files = listing.list_files(catalog.Contents.of(cat, cat.rows(topic, partition,
                                                                 end_after=from_offset)))
    print(json.dumps(listing.as_json(files), indent=1) if as_json else listing.render(files))


def show_tables(config: Config, group: str, topic: str | None, per_hour: bool) -> None:
    tables = _tables(config)
    tables.spec(group)  # a group without tables is refused, naming it
    topics = [topic] if topic else _tokens(config).topics(group)
    print(table_views.render([view for t in topics for dead in sorted(tables.kinds(group))
                              if (view := table_views.describe(tables, group, t, per_hour,
                                                               dead))]))


def show_status(config: Config, group: str | None, as_json: bool) -> int:
    """The table (or JSON); 1 when a topic could not be shown whole (flagged, named)."""
    tokens = _tokens(config)
    consumer = brokers.consumer(config)
    try:
        now_ms = int(datetime.now(timezone.utc).timestamp() * 1000)
        rows = status.status(config, tokens, consumer, now_ms, group, _storage(config))
    finally:
        consumer.close()
    print(json.dumps(status.as_json(rows), indent=1) if as_json else status.render(rows))
    return 1 if any(s.problem for s in rows) else 0  # the rest was printed all the same


def rewind(config: Config, args: argparse.Namespace) -> None:
    tokens = _tokens(config)
    consumer = brokers.consumer(config)
    try:
        changes = rewinds.rewind(config, tokens, consumer, args.group, args.topic,
                                 args.partition, args.to_offset, args.to_time,
                                 storage=_storage(config))
    finally:
        consumer.close()
    print("\n".join(changes))


def accept_loss(config: Config, args: argparse.Namespace) -> None:
    consumer = brokers.consumer(config)
    try:
        accepted = losses.accept(config, _tokens(config), consumer, _storage(config), args.group,
                                 args.topic, args.reason, args.by,
                                 datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                 args.partition)
    finally:
        consumer.close()
    print("\n".join(f"accepted: {loss.describe()}; the token moved to {loss.lost_to}"
                    for loss in accepted))


def replay(config: Config, args: argparse.Namespace) -> int:
    """Check and plan the replay, then run its Spark job here (spark-submit's output is
    this command's); 1 when the job failed."""
    _airflow_logs_to_stderr()  # the connections come through Airflow: keep stdout for JSON
    from kafka_archive.airflow import tasks
    from kafka_archive.airflow.operators import submit_environment

    request = replaying.Request(
        group=args.group, topic=args.topic, to_topic=args.to_topic, partition=args.partition,
        from_offset=args.from_offset, to_offset=args.to_offset, since_ms=args.since,
        until_ms=args.until, bootstrap=args.bootstrap, hash_by_key=args.hash_by_key,
        allow_archived_target=args.allow_archived_target)
    url = tasks.replay_prepare(request, args.dry_run, config)
    if url is None:
        return 0
    command = spark.replay_command(config, url, args.master, args.max_rate)
    storage = _storage(config)
    failure_url = layout.replay_failure(config.archive_root, request.replay_id())
    storage.delete(failure_url)  # a failure of an earlier run is not this one's
    sys.stdout.flush()
    # Spark's own output (Java stack traces of a failed task) only with -v; else in a file
    with tempfile.NamedTemporaryFile("w+", prefix="kafka-archive-replay-", suffix=".log",
                                     delete=False) as log:
        environment = {**submit_environment(config, args.master),
                       **({"KAFKA_ARCHIVE_VERBOSE": "1"} if args.verbose else {})}
        code = subprocess.run(command, env=environment, stdin=subprocess.DEVNULL,
                              stderr=None if args.verbose else log).returncode
    if not code:
        Path(log.name).unlink()
        return 0
    failed = storage.get_or_none(failure_url)
    failure = json.loads(failed) if failed else {"error": f"spark-submit exited {code}",
                                                 "repeats": False}
    advice = ("change what it says, then run the same command again: it resumes where the "
              "target's messages end" if failure["repeats"]
              else "run the same command again to resume it")
    print(f"kafka-archive: replay {request.replay_id()} failed: {failure['error']}\n{advice}"
          + ("" if args.verbose else f" (Spark's output: {log.name}; -v shows it)"),
          file=sys.stderr)
    return 1


def _storage(config: Config) -> Storage:
    return Storage(lambda: _s3_client(config.s3_conn_id))


def _tokens(config: Config) -> TokenStore:
    return open_store(config.token_root, lambda: _s3_client(config.s3_conn_id))


def _connections():
    """kafka_archive.airflow.connections: Airflow is imported only when a credential is
    looked up (S3, Kafka's or a catalog's connection), its logs sent to stderr. The
    lookups search as Airflow's own CLI does (`airflow connections get`): the environment,
    the configured secrets backends, then Airflow's metadata database. Outside a task,
    Airflow 3's SDK leaves the database out unless the process says it runs on Airflow's
    side (a connection made in the UI was not found)."""
    _airflow_logs_to_stderr()
    os.environ.setdefault("_AIRFLOW_PROCESS_CONTEXT", "server")
    from kafka_archive.airflow import connections

    return connections


def _s3_client(conn_id: str):
    return _connections().s3_client(conn_id)


def _kafka_extra(conn_id: str) -> dict:
    """The Kafka connection `kafka.conn_id` names, looked up as Airflow does."""
    return _connections().kafka_extra(conn_id)


def _tables(config: Config) -> iceberg.Tables:
    """Table groups' Iceberg tables, their files read with the S3 connection's keys and
    their catalogs reached with theirs (looked up only when a table is opened)."""
    return iceberg.Tables(config, lambda: _connections().iceberg_file_io(config),
                          lambda conn_id: _connections().iceberg_catalog_properties(conn_id))


def _check_smtp(config: Config) -> str:
    from kafka_archive.airflow import connections  # the SMTP connection is Airflow's

    return connections.check_smtp(config.alerts.smtp_conn_id)


_LOG_LEVEL = "WARNING"  # INFO with --verbose


def _airflow_logs_to_stderr() -> None:
    """Airflow logs to stdout, where its lines would mix with the records and reports this
    command prints: once Airflow is imported (which configures logging for stdout),
    configure it again for stderr, and at WARNING unless --verbose."""
    import airflow  # noqa: F401
    from airflow.sdk.log import configure_logging

    configure_logging(output=sys.stderr, log_level=_LOG_LEVEL)


def audit_group(config: Config, args) -> int:
    """The audit DAG's two steps, run here (no mail: the scheduled audit mails what is new);
    the report's place and totals are printed, and the mismatches not resolved. Exit 1
    while a mismatch is neither OK again nor acknowledged."""
    _airflow_logs_to_stderr()  # the connections come through Airflow: keep stdout for JSON
    from kafka_archive.airflow import tasks

    run_id = "cli__" + datetime.now(timezone.utc).strftime("%Y-%m-%dT%H%M%S")
    tasks.audit_ingest(run_id, config)
    outcome = tasks.audit_reconcile(args.group, run_id, args.since, args.until, args.rescan,
                                    terminal_bar, config)
    print(json.dumps({k: outcome[k] for k in ("group", "totals", "report", "open",
                                              "acknowledged")}, indent=2))
    alarms = [a for a in incremental.alarms(_storage(config), config, args.group)
              if (args.since is None or a.window_start_ms >= args.since)
              and (args.until is None or a.window_start_ms < args.until)]
    for alarm in alarms:
        print(reporting.describe(alarm), file=sys.stderr)
    return 1 if any(a.state != "acknowledged" for a in alarms) else 0


def list_mismatches(config: Config, group: str, as_json: bool) -> None:
    alarms = incremental.alarms(_storage(config), config, group)
    if as_json:
        print(json.dumps([{**asdict(a), "state": a.state} for a in alarms], indent=1))
    else:
        print("\n".join(reporting.describe(a) for a in alarms) or
              f"audit of group {group}: no mismatch unresolved")


def acknowledge(config: Config, args) -> None:
    alarm = incremental.acknowledge(_storage(config), config, args.group, args.topic,
                                    args.source, args.window, args.reason, args.by,
                                    datetime.now(timezone.utc).isoformat(timespec="seconds"))
    print(reporting.describe(alarm))


if __name__ == "__main__":
    sys.exit(main())

