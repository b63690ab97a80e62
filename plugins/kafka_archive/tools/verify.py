"""Verifying a group's archive against its tokens, like Secor's LogFileVerifier.

Plain, from the catalog's per-partition summaries alone (what the current rows cover):
no offset missing between them or below the token, no token its commit never reached.
With `files`, every current file the catalog names is read whole (with `full`, also every
file found by walking the group's tree: a file the catalog does not name is reported, and counts
in the arithmetic); then, per topic, Kafka partition and generation, the files' offset
ranges are checked by arithmetic: no offset in two files, no offset missing
between files or between the last file and the token. Offsets Kafka itself lacks
(compaction, transaction markers) are recorded as gaps in the group's current rows (the
catalog), and ranges a plan skipped after retention deleted
them are recorded in its anomalies: both are reported, not counted as errors. Offsets below the first file are not archived on purpose
(retention, start_from) and only noted. Offsets no file holds that nothing recorded
explains are asked of Kafka, where a consumer is given (KafkaLook): where it holds no
message they are a gap, not a hole.

The arithmetic is tools.offset_checks (pure); this module does the reading.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Callable

from kafka.errors import KafkaError

from kafka_archive import brokers, catalog, formats, layout
from kafka_archive.catalog import Contents
from kafka_archive.commit import iceberg
from kafka_archive.manifest import row_files
from kafka_archive.progress_bars import Track, untracked
from kafka_archive.config import Config
from kafka_archive.errors import ArchiveError
from kafka_archive.storage import Storage, join
from kafka_archive.plan import inflight
from kafka_archive.tokens import MalformedTokenError, Token, TokenStore
from kafka_archive.archive.archived_files import DamagedFile, read_archived
from kafka_archive.tools.offset_checks import (ERROR, INFO, FileSummary, Finding, FirstMessage,
                                               check_partition, check_scattered, summarize)

log = logging.getLogger(__name__)

# --- reading the archive ------------------------------------------------------------------

@dataclass
class PartitionReport:
    topic: str
    partition: int
    generation: int
    token_offset: int | None
    files: list[FileSummary]
    findings: list[Finding] = field(default_factory=list)
    counted: tuple[int, int] | None = None  # (files, records) from the catalog, files unread

    def file_count(self) -> int:
        return self.counted[0] if self.counted else len(self.files)

    def title(self) -> str:
        usable = [f for f in self.files if not f.problem]
        span = (f", offsets {min(f.first_offset for f in usable)}.."
                f"{max(f.last_offset for f in usable)}" if usable else "")
        token = ("not checked against a token" if self.token_offset is None
                 else f"token {self.token_offset}")
        records = self.counted[1] if self.counted else sum(f.records for f in usable)
        return (f"{self.topic} partition={self.partition} generation {self.generation}: "
                f"{self.file_count()} files, {records} records{span}, {token}")


@dataclass
class Report:
    group: str
    partitions: list[PartitionReport]
    ignored: list[str]  # objects under the group that are not archive files
    accepted: tuple = ()  # plan.losses.AcceptedLoss records: known loss, who, when, why
    findings: list[Finding] = field(default_factory=list)  # of the group: its tables

    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.level == ERROR] + [
            f for p in self.partitions for f in p.findings if f.level == ERROR]

    def to_json(self) -> dict:
        """The report for programs: per partition its files and findings, and the totals."""
        return {"group": self.group, "ok": not self.errors(), "errors": len(self.errors()),
                "files": sum(p.file_count() for p in self.partitions),
                "partitions": [asdict(p) for p in self.partitions], "ignored": self.ignored,
                "findings": [asdict(f) for f in self.findings]}

    def render(self) -> str:
        lines = []
        for p in self.partitions:
            lines.append(p.title())
            lines += [f"  {f.level}: {f.message}" for f in p.findings]
        lines += [f"info: ignored {url}: not an archive file name" for url in self.ignored]
        lines += [f"known loss: {loss.describe()}" for loss in self.accepted]
        lines += [f"{f.level}: {f.message}" for f in self.findings]
        files = sum(p.file_count() for p in self.partitions)
        lines.append(f"group {self.group}: {len(self.partitions)} partitions, {files} files, "
                     f"{len(self.errors())} errors")
        return "\n".join(lines)


def read_summary(storage: Storage, url: str, name_offset: int,
                 slice_of: dict[str, tuple[int, int, list]] | None = None) -> FileSummary:
    """Text and Baldr files keep no offsets: theirs come from the manifest row that wrote
    the file (`slice_of`: url -> start, end, gaps), checked against the records read."""
    try:
        if formats.for_file(url)[0].keeps_offsets:
            return summarize(url, name_offset, (r.offset for r in read_archived(storage, url)))
        count = sum(1 for _ in read_archived(storage, url))
    except (DamagedFile, ValueError) as exc:  # ValueError: not an archive file's name
        return FileSummary(url, name_offset, problem=f"unreadable: {exc}")
    if url not in (slice_of or {}):
        return FileSummary(url, name_offset, problem="its format keeps no offsets and no "
                                                     "manifest row names it")
    start, end, gaps = slice_of[url]
    expected = end - start - sum(b - a for a, b in gaps)
    if count != expected:
        return FileSummary(url, name_offset, problem=f"holds {count} records, its manifest "
                                                     f"row {expected}")
    lacking = sorted(gaps)
    return summarize(url, name_offset, (o for o in range(start, end)
                                         if not any(a <= o < b for a, b in lacking)))


def read_offsets(storage: Storage, url: str, name_offset: int) -> tuple[FileSummary, list[int]]:
    offsets: list[int] = []
    try:
        offsets = [r.offset for r in read_archived(storage, url)]
        return summarize(url, name_offset, offsets), offsets
    except DamagedFile as exc:
        return FileSummary(url, name_offset, problem=f"unreadable: {exc}"), []


def verify_group(config: Config, group: str, storage: Storage, tokens: TokenStore,
                 track: Track = untracked, topic: str | None = None, full: bool = False,
                 files: bool = False, tables: iceberg.Tables | None = None,
                 kafka: Callable[[], object] | None = None) -> Report:
    """A group (or one topic) checked against its tokens: from the catalog's per-partition
    summaries alone (what each partition's current files cover), or, with files, by
    reading every current file the catalog names; with full, also every file the
    group's tree holds. A table group's tables are checked against the catalog too
    (tables: default, opened with the environment's S3 credentials). kafka: opens a
    kafka-python consumer, asked only about offsets no file holds that nothing recorded
    explains (KafkaLook)."""
    table = config.group(group).table  # an unknown group is a config error, not an empty archive
    cat = catalog.open_catalog(storage, config, group)
    tables = (tables or iceberg.Tables(config)) if table is not None else None
    look = KafkaLook(kafka)
    try:
        report = _verify_files(config, group, storage, tokens, cat, track, topic, full, files,
                               tables, look)
    finally:
        look.close()
    if tables is not None:
        report.findings += check_tables(tables, group, cat, topic, exact=files or full)
    return report


def _verify_files(config: Config, group: str, storage: Storage, tokens: TokenStore,
                  cat: catalog.Catalog, track: Track, topic: str | None, full: bool,
                  files: bool, tables: iceberg.Tables | None, look: KafkaLook) -> Report:
    """tables: a table group's (its tree's files outside the catalog are no duplicates)."""
    spec = config.group(group).layout
    event_time = spec.kind == "event_time"
    if not (files or full):
        return _from_summaries(config, group, storage, tokens, cat, track, topic, look)
    contents = Contents.of(cat, cat.rows(topic))
    found = _catalog_files(contents)
    ignored: list[str] = []
    unlisted: set[str] = set()
    outside: list[str] = []  # a table group's files no current snapshot reads
    if full:
        walked, ignored = _walked_files(storage, config.archive_root, group, spec)
        named = {url for files in found.values() for url, _ in files}
        for key, files in walked.items():
            if topic is None or key[0] == topic:
                extra = [(url, name) for url, name in files if url not in named]
                unlisted |= {url for url, _ in extra}
                if tables is None:  # a table's reader sees only its files: no duplicate
                    found[key] = sorted(found.get(key, []) + extra,
                                        key=lambda f: f[1].first_offset)
                else:
                    outside += [url for url, _ in extra]
    gaps, skipped = contents.gaps(), defaultdict(list, contents.lost)
    slice_of = _recorded_ranges(contents)
    topics = sorted({t for t, _, _ in found} | set(tokens.topics(group)))
    topics = [t for t in topics if topic is None or t == topic]
    partitions, unreadable = [], []
    for name in track(topics, f"verify {group}"):
        token = _read_token(tokens, group, name, unreadable)
        offsets = dict(token.offsets) if token else {}
        unfinished = _unfinished_commit(storage, config, cat, token)
        keys = {(p, g) for t, p, g in found if t == name}
        keys |= {(p, config.generation) for p in offsets}
        for partition, generation in sorted(keys):
            # a token is the configured generation's progress; older ones stopped somewhere
            configured = generation == config.generation
            token_offset = offsets.get(partition) if configured else None
            listed = found.get((name, partition, generation), [])
            if event_time:
                read = [read_offsets(storage, url, name.first_offset) for url, name in listed]
                files = [summary for summary, _ in read]
            else:
                files = [_summary(storage, url, name, partition, slice_of)
                         for url, name in listed]
            report = PartitionReport(name, partition, generation, token_offset, files)
            report.findings += [Finding(INFO, f"{url}: in the tree, not in the catalog (a run "
                                              "not committed yet, or a stray file)")
                                for url, _ in listed if url in unlisted]
            if not configured:
                report.findings.append(Finding(INFO, f"generation {generation} is not the "
                                                     f"configured {config.generation}: not "
                                                     "checked against the token"))
            if unfinished and token_offset is not None:
                report.findings.append(_as_found(unfinished, report.files, token_offset))
            recorded = (token_offset, gaps[(name, partition)], skipped[(name, partition)],
                        _elsewhere(cat, name, partition, generation),
                        look.first_message(name, partition))
            report.findings += (check_scattered(read, *recorded) if event_time
                                else check_partition(files, *recorded))
            partitions.append(report)
    return Report(group, partitions, ignored, contents.accepted, unreadable + [
        Finding(INFO, f"{url}: in the tree, not in the table (replaced by a rewind and kept "
                      "for time travel until its snapshots expire, or of a run not committed)")
        for url in outside])


def check_tables(tables: iceberg.Tables, group: str, cat: catalog.Catalog,
                 topic: str | None, exact: bool) -> list[Finding]:
    """Each topic's table against the catalog: the same records and files (from the
    current snapshot's summary, one metadata read), or, exact, the same file paths (the
    table's manifests read)."""
    findings = []
    # a topic never with a row has no tables: the names of its would-be tables may be
    # another topic's (`X_dlq`, the dead-letter table of an `X` deleted before archived)
    for name in sorted(t for t in cat.state.with_rows() if topic is None or t == topic):
        summaries = [s for s in cat.state.topics[name].summaries.values() if s.rows]
        records, count = sum(s.records for s in summaries), sum(s.files for s in summaries)
        found = {dead: tables.find(group, name, dead) for dead in tables.kinds(group)}
        if all(table is None for table in found.values()):
            if not count:  # its rows all empty ones: no message yet
                continue
            findings.append(Finding(ERROR, f"topic {name}: the catalog holds {records} records "
                                           "in files no table names: its table is missing"))
            continue
        held, in_tables, where = [0, 0], {}, []
        for table in (t for t in found.values() if t is not None):
            snapshot = table.current_snapshot()
            totals = snapshot.summary if snapshot is not None else {}
            held[0] += int(totals.get("total-records", 0))
            held[1] += int(totals.get("total-data-files", 0))
            where.append(f"table {iceberg.name(table)}")
            findings.append(Finding(INFO, f"table {iceberg.name(table)}: "
                                          f"{totals.get('total-records', 0)} records in "
                                          f"{totals.get('total-data-files', 0)} files, snapshot "
                                          f"{snapshot.snapshot_id if snapshot else None}"))
            if exact:
                in_tables |= iceberg.current_files(table, [])
        tables_named = " and ".join(where)
        verb, a_table = ("holds", "the table") if len(where) == 1 else ("hold", "a table")
        if tuple(held) != (records, count):
            findings.append(Finding(ERROR, f"{tables_named} {verb} {held[0]} records in "
                                           f"{held[1]} files, the catalog {records} in {count}"))
        if exact:
            in_catalog = {f["url"] for row in cat.rows(name) for f in row_files(row)}
            findings += [Finding(ERROR, f"{tables_named}: {url} is in {a_table}, not in the "
                                        "catalog") for url in sorted(set(in_tables) - in_catalog)]
            findings += [Finding(ERROR, f"{tables_named}: {url} is in the catalog, not in "
                                        f"{a_table}") for url in sorted(in_catalog - set(in_tables))]
    return findings


def _from_summaries(config: Config, group: str, storage: Storage, tokens: TokenStore,
                    cat: catalog.Catalog, track: Track, topic: str | None, look: KafkaLook
                    ) -> Report:
    """The offset arithmetic of verify on what each partition's current rows cover (the
    catalog's summaries): holes between them and below the token, accepted losses, a
    token whose commit never reached the catalog. No row or file is read, so its cost
    follows partitions, not history. Rows never overlap (the catalog refuses an entry
    that would): two files holding an offset is a stray file, which --full finds."""
    lost = catalog.lost_ranges(cat.state)
    names = sorted(set(cat.state.topics) | set(tokens.topics(group)))
    partitions, unreadable = [], []
    for name in track([t for t in names if topic is None or t == topic], f"verify {group}"):
        token = _read_token(tokens, group, name, unreadable)
        offsets = dict(token.offsets) if token else {}
        unfinished = _unfinished_commit(storage, config, cat, token)
        known = cat.state.topics.get(name)
        summaries = {(s.partition, s.generation): s
                     for s in (known.summaries.values() if known else ()) if s.rows}
        for partition, generation in sorted(set(summaries) | {(p, config.generation)
                                                              for p in offsets}):
            configured = generation == config.generation
            token_offset = offsets.get(partition) if configured else None
            s = summaries.get((partition, generation))
            covered = [FileSummary(f"offsets [{a}, {b})", a, a, b - 1, b - a)
                       for a, b in (s.covered if s else ())]
            report = PartitionReport(name, partition, generation, token_offset, covered,
                                     counted=(s.files, s.records) if s else (0, 0))
            if unfinished and token_offset is not None:
                report.findings.append(_as_found(unfinished, report.files, token_offset))
            if not configured:
                report.findings.append(Finding(INFO, f"generation {generation} is not the "
                                                     f"configured {config.generation}: not "
                                                     "checked against the token"))
            report.findings += check_partition(covered, token_offset, (),
                                               lost.get((name, partition), ()),
                                               _elsewhere(cat, name, partition, generation),
                                               look.first_message(name, partition))
            partitions.append(report)
    return Report(group, partitions, [], tuple(catalog.AcceptedLoss(**a)
                                               for a in cat.state.accepted), unreadable)


class KafkaLook:
    """Kafka's word on offsets no file holds and nothing recorded explains: a token a
    person put past a transaction's marker that no slice covered is no hole, as Kafka
    holds no message there. The consumer is opened at the first such question; without
    one (or with Kafka unreachable) such offsets stay holes."""

    def __init__(self, open_consumer: Callable[[], object] | None):
        self.open, self.consumer, self.failed = open_consumer, None, False

    def first_message(self, topic: str, partition: int) -> FirstMessage | None:
        return None if self.open is None else (
            lambda start, end: self._first_message(topic, partition, start, end))

    def _first_message(self, topic: str, partition: int, start: int, end: int) -> int:
        """The first offset of [start, end) at which Kafka holds a message, or cannot
        tell: retention deleted it, it is past Kafka's end, Kafka cannot be read."""
        from kafka import TopicPartition

        tp = TopicPartition(topic, partition)
        try:
            if self.failed:
                return start
            self.consumer = self.consumer or self.open()
            if start < self.consumer.beginning_offsets([tp])[tp]:
                return start
            end = min(end, self.consumer.end_offsets([tp])[tp])
            found = next(brokers.read_range(self.consumer, tp, start, end), None)
        except (ArchiveError, KafkaError) as unreachable:
            log.warning("could not ask Kafka whether it holds messages at offsets no file "
                        "holds (%s): they stay holes", unreachable)
            self.failed = True
            return start
        return end if found is None else max(start, found.offset)

    def close(self) -> None:
        if self.consumer is not None:
            self.consumer.close()


def _elsewhere(cat: catalog.Catalog, topic: str, partition: int, generation: int
               ) -> list[tuple[int, int]]:
    """The offsets of a partition that its other generations' current rows hold."""
    known = cat.state.topics.get(topic)
    return [r for s in (known.summaries.values() if known else ())
            if s.partition == partition and s.generation != generation for r in s.covered]


def _read_token(tokens: TokenStore, group: str, topic: str, unreadable: list[Finding]
                ) -> Token | None:
    """The topic's token; a malformed one is an error of its own (file and line), and the
    topic's files are checked as if it had none: verify goes on with the rest."""
    try:
        return tokens.read(group, topic).token
    except MalformedTokenError as exc:
        unreadable.append(Finding(ERROR, f"{exc}: the topic's runs hold it until the line is "
                                         "fixed or deleted; its files are checked without it"))
        return None


def _unfinished_commit(storage: Storage, config: Config, cat: catalog.Catalog,
                       token: Token | None) -> Finding | None:
    """A token advanced by a run whose commit never reached the catalog: the token says
    archived what no current file may hold (a commit cut short, then its files lost).
    `_as_found` makes it a note where the current files reach the token anyway."""
    run = token and token.run_id
    if not run or cat.state.has_run(run) or storage.get_or_none(
            layout.run_file(config.archive_root, token.group, run, "committed.json")) is not None:
        return None
    where = f"token {token.group}/{token.topic} was advanced by run {run}"
    if inflight.holding(storage, config.archive_root, token.group, token.topic) == run:
        return Finding(INFO, f"{where}, still in flight: its next run finishes the commit")
    return Finding(ERROR, f"{where}, whose commit never reached the catalog{UNFINISHED_RISK}")


UNFINISHED_RISK = ": offsets below the token may be in no file"


def _as_found(unfinished: Finding, files: list[FileSummary], token_offset: int) -> Finding:
    """The unfinished commit's finding for a partition: an error unless the current files
    reach its token (a copy of a given-up or cut-short run's token put back after other
    runs archived the offsets: holes between them are errors of their own, and the next
    plan counts the token's lines only as far as the catalog holds)."""
    if unfinished.level == ERROR and any(not f.problem and f.last_offset + 1 >= token_offset
                                         for f in files):
        return Finding(INFO, unfinished.message.replace(
            UNFINISHED_RISK, "; the current files reach the token"))
    return unfinished


def _catalog_files(contents: Contents
                   ) -> dict[tuple[str, int, int], list[tuple[str, layout.ArchivedFile]]]:
    """The current files per (topic, Kafka partition, generation), in offset order."""
    found: dict[tuple[str, int, int], list[tuple[str, layout.ArchivedFile]]] = defaultdict(list)
    for row in contents.rows:
        for f in row_files(row):
            name = layout.parse_file_name(f["url"].rsplit("/", 1)[-1])
            if name is not None:
                found[(row["topic"], row["partition"], name.generation)].append((f["url"], name))
    return {key: sorted(files, key=lambda f: (f[1].first_offset, f[0]))
            for key, files in found.items()}


def _summary(storage: Storage, url: str, name: layout.ArchivedFile, partition: int,
             slice_of: dict[str, tuple[int, int, list]]) -> FileSummary:
    if name.partition != partition:
        return FileSummary(url, name.first_offset, problem=f"file name says Kafka partition "
                                                           f"{name.partition}, but it is under "
                                                           f"partition={partition}")
    return read_summary(storage, url, name.first_offset, slice_of)


def _walked_files(storage: Storage, root: str, group: str, spec: layout.LayoutSpec
                  ) -> tuple[dict[tuple[str, int, int], list[tuple[str, layout.ArchivedFile]]],
                             list[str]]:
    """The archive files found by walking the group's tree, per (topic, Kafka partition
    from the file name, generation), as layout.parse_url reads their paths back (data,
    `_late/` and `_quarantine/` files); the objects that are none of those, except
    metadata (markers such as `_SUCCESS`, `_finalized.json`)."""
    found: dict[tuple[str, int, int], list[tuple[str, layout.ArchivedFile]]] = defaultdict(list)
    ignored = []
    for url, _ in storage.list(join(root, group)):
        where = layout.parse_url(root, url, spec)
        if where is not None:
            found[(where.topic, where.name.partition, where.name.generation)].append(
                (url, where.name))
        elif not url.rsplit("/", 1)[-1].startswith("_"):
            ignored.append(url)
    return found, ignored


def _recorded_ranges(contents: Contents) -> dict[str, tuple[int, int, list]]:
    """Per file that is alone in its current slice, the slice's bounds and gaps (for
    formats that keep no offsets)."""
    slice_of: dict[str, tuple[int, int, list]] = {}
    for row in contents.rows:
        if len(files := row_files(row)) == 1:
            slice_of[files[0]["url"]] = (row["start"], row["end"], row["gaps"])
    return slice_of
