"""Where everything lives under the archive root. Pure functions of their arguments.

    <root>/<group>/<topic>/partition=<n>/<generation>_<partition>_<first offset:020>.<ext>
    <root>/<group>/<topic>/dt=YYYY-MM-DD/hr=HH/<same file name>     (event-time layout)
    <root>/<group>/<topic>/_quarantine/partition=<n>/<generation>_<partition>_<first>.seq
    <root>/<group>/<topic>/_late/dt=YYYY-MM-DD/hr=HH/<file name>   (after finalization)
    <root>/_runs/<group>/<run id>/plan.json, manifest.json, committed.json
    <root>/_runs/<group>/_inflight.json
    <root>/_runs/<group>/_last_plan.json
    <root>/_superseded/<run id>/<group>/<topic>/partition=<n>/<file>
    <root>/_replays/<replay id>/replay.json, progress/partition=<n>.json

A file's name is its idempotency key (Secor's LogFilePath): the same slice of the same
data under the same config always lands at the same path with the same bytes.
Paths starting with `_` hold metadata, which Hive and Spark readers skip.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Mapping

from kafka_archive import formats
from kafka_archive.formats.parsers import MAX_EVENT_MS, MIN_EVENT_MS  # what a datetime holds
from kafka_archive.storage import join

# the extension of each format kind with its default options (the registry has them all)
EXTENSIONS = {kind: formats.extension(kind) for kind in formats.FORMATS}
_FILE_NAME = re.compile(r"(?P<generation>\d+)_(?P<partition>\d+)_(?P<first>\d{20})\."
                        rf"(?P<ext>{'|'.join(map(re.escape, formats.EXTENSIONS))})")


@dataclass(frozen=True)
class ArchivedFile:
    generation: int
    partition: int
    first_offset: int
    ext: str


def file_name(generation: int, partition: int, first_offset: int, fmt: str | Mapping) -> str:
    """fmt: the group's format dict, or a format kind (with its default options)."""
    return f"{file_stem(generation, partition, first_offset)}.{formats.extension(fmt)}"


def file_stem(generation: int, partition: int, first_offset: int) -> str:
    """A data file's name without its extension: names sort by first offset."""
    return f"{generation}_{partition}_{first_offset:020d}"


def parse_file_name(name: str) -> ArchivedFile | None:
    m = _FILE_NAME.fullmatch(name)
    if not m:
        return None
    return ArchivedFile(int(m["generation"]), int(m["partition"]), int(m["first"]), m["ext"])


def partition_dir(root: str, group: str, topic: str, partition: int) -> str:
    return join(root, group, topic, f"partition={partition}")


def slice_listing(root: str, group: str, event_time: bool, topic: str, partition: int,
                  generation: int, first_offset: int) -> tuple[str, str | None]:
    """Where to list the files a slice of a Kafka partition from first_offset on may have
    written (a folder, and the name to list after): the partition's folder from the
    slice's first name on, or for an event-time group the topic's whole tree (its files
    are spread over the time partitions and `_late/` their messages' times chose)."""
    if event_time:
        return join(root, group, topic), None
    folder = partition_dir(root, group, topic, partition)
    return folder, f"{folder}/{file_stem(generation, partition, first_offset)}"


def of_slice(url: str, generation: int, partition: int, start: int, end: float = float("inf")
             ) -> bool:
    """Whether a listed file is a data file of the partition's generation whose first
    offset is in [start, end)."""
    name = parse_file_name(url.rsplit("/", 1)[-1])
    return (name is not None and (name.generation, name.partition) == (generation, partition)
            and start <= name.first_offset < end)


def data_file(root: str, group: str, topic: str, partition: int, generation: int,
              first_offset: int, fmt: str | Mapping) -> str:
    """fmt: the group's format dict (text's extension depends on its options), or a kind."""
    return join(partition_dir(root, group, topic, partition),
                file_name(generation, partition, first_offset, fmt))


def table_location(root: str, group: str, topic: str) -> str:
    """A table group's Iceberg table of a topic: its data/ and metadata/ folders."""
    return join(root, group, topic)


def table_data_file(root: str, group: str, topic: str, run_id: str, partition: int,
                    generation: int, first_offset: int, fmt: str | Mapping,
                    time_path: str | None = None) -> str:
    """A table group's file: under the table's data/, in the folder of the run that wrote
    it, then its Kafka partition's folder, or its time partition's for an event-time
    group. Iceberg files are immutable, and a rewind's re-archive of a slice must not
    overwrite a file an older snapshot still reads (time travel), so no two runs share
    a path."""
    return join(table_location(root, group, topic), TABLE_DATA, run_folder_name(run_id),
                time_path or f"partition={partition}",
                file_name(generation, partition, first_offset, fmt))


def dead_letter_location(root: str, group: str, topic: str) -> str:
    """An event-time table group's dead-letter table of a topic (`<topic>_dlq` in the
    catalog): beside the topic's table, never inside it (a table's orphan-file clean-up
    lists everything under its location)."""
    return join(root, group, DEAD_LETTERS, topic)


def dead_letter_file(root: str, group: str, topic: str, run_id: str, partition: int,
                     generation: int, first_offset: int) -> str:
    """The messages of one slice that an event-time table group's parsed table cannot
    hold, named by the first of them, as key_value Parquet with the reason."""
    return join(dead_letter_location(root, group, topic), TABLE_DATA, run_folder_name(run_id),
                f"partition={partition}", file_name(generation, partition, first_offset,
                                                    "parquet"))


# --- the event-time layout (the partitioned group) ----------------------------------------
# Time partitions are UTC and proleptic Gregorian, for any event time in years 1..9999:
# before 1970 (negative ms) too, laid out like any other; outside that range an event time
# has no time partition (ValueError; parsers.event_time_ms quarantines such messages).

GRANULARITY_MS = {"day": 86_400_000, "hour": 3_600_000, "minute": 60_000}
_LEVELS = tuple(GRANULARITY_MS)                           # day, hour, minute
_LEVEL_DIRECTIVES = {"day": "Ymd", "hour": "H", "minute": "M"}
_DIRECTIVE_DIGITS = {"Y": 4, "m": 2, "d": 2, "H": 2, "M": 2}
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MS = timedelta(milliseconds=1)
QUARANTINE = "_quarantine"
LATE = "_late"
TABLE_DATA = "data"  # a table group's files, as Iceberg writers lay a table out
DEAD_LETTERS = "_dlq"  # an event-time table group's dead-letter tables
DEAD_LETTER_SUFFIX = "_dlq"  # ... each named <namespace>.<topic>_dlq in the catalog
# a compaction's folder under _runs/ (commit.compaction): when it began (before any file),
# its record (before any table changes), its done record (which a catalog rebuild replays)
COMPACTION_STARTED = "started.json"
COMPACTION_RECORD, COMPACTION_DONE = "compaction.json", "compacted.json"


@dataclass(frozen=True)
class LayoutSpec:
    """Where a group's files go under their topic: `partition` (partition=<n>, the backup
    group) or `event_time` (time partitions of the parser's event time, UTC). Formats are
    strftime-like, with only %Y %m %d (day), %H (hour), %M (minute) and %%, each of a
    level's directives exactly once; a level's part of the path is prefix + format."""

    kind: str = "partition"
    granularity: str = "hour"                                 # day | hour | minute
    prefixes: tuple[str, str, str] = ("dt=", "hr=", "min=")   # day, hour, minute
    formats: tuple[str, str, str] = ("%Y-%m-%d", "%H", "%M")

    def __post_init__(self):
        if self.kind not in ("partition", "event_time"):
            raise ValueError(f"kind must be partition or event_time, got {self.kind!r}")
        if self.granularity not in GRANULARITY_MS:
            raise ValueError(f"granularity must be one of {', '.join(GRANULARITY_MS)}, "
                             f"got {self.granularity!r}")
        for level, fmt in zip(_LEVELS, self.formats):
            used = sorted(d for d in re.findall(r"%(.)", fmt) if d != "%")
            if used != sorted(_LEVEL_DIRECTIVES[level]) or "%" in re.sub(r"%.", "", fmt):
                wanted = " ".join("%" + d for d in _LEVEL_DIRECTIVES[level])
                raise ValueError(f"formats.{level} {fmt!r} must hold {wanted} once each and "
                                 "no other directive (%% for a literal %)")
        for part in _render(self, _EPOCH, self.depth).split("/"):
            if not part or part[0] in "_.":
                raise ValueError(f"time partition paths would have a part {part!r}: parts "
                                 "must not be empty or start with _ or . (readers skip those)")

    @property
    def depth(self) -> int:
        """How many levels a time partition path has: 1 day, 2 hour, 3 minute."""
        return _LEVELS.index(self.granularity) + 1


def time_partition(event_ms: int, spec: LayoutSpec) -> str:
    """The relative path of the time partition holding an event time (ms since the epoch,
    UTC), e.g. "dt=2026-11-21/hr=07" at hour granularity. Cheap per message: a path is
    computed once per time partition."""
    return _bucket_path(event_ms // GRANULARITY_MS[spec.granularity], spec)


@functools.lru_cache(maxsize=4096)
def _bucket_path(bucket: int, spec: LayoutSpec) -> str:
    start_ms = bucket * GRANULARITY_MS[spec.granularity]
    if not MIN_EVENT_MS <= start_ms < MAX_EVENT_MS:
        raise ValueError(f"event time {start_ms} ms is outside years 1..9999: no time partition")
    return _render(spec, _EPOCH + start_ms * _MS, spec.depth)


def _render(spec: LayoutSpec, t: datetime, depth: int) -> str:
    values = {"Y": f"{t.year:04d}", "m": f"{t.month:02d}", "d": f"{t.day:02d}",
              "H": f"{t.hour:02d}", "M": f"{t.minute:02d}", "%": "%"}
    return "/".join(prefix + re.sub(r"%(.)", lambda m: values[m[1]], fmt)
                    for prefix, fmt in zip(spec.prefixes[:depth], spec.formats[:depth]))


def time_partition_range(path: str, spec: LayoutSpec) -> tuple[int, int]:
    """[start, end) in ms of the time partition at a relative path as time_partition
    gives it; a coarser path (only the day, say) gives the coarser range. ValueError when
    the path is not one of this layout's."""
    path = path.strip("/")
    for depth in range(spec.depth, 0, -1):
        if m := _path_pattern(spec, depth).fullmatch(path):
            break
    else:
        raise ValueError(f"{path!r} is not a time partition path of the layout {spec}")
    f = {name: int(value) for name, value in m.groupdict().items()}
    try:
        start = datetime(f["Y"], f["m"], f["d"], f.get("H", 0), f.get("M", 0), tzinfo=timezone.utc)
    except ValueError as exc:
        raise ValueError(f"{path!r} is not a time partition: {exc}") from None
    start_ms = (start - _EPOCH) // _MS
    return start_ms, start_ms + GRANULARITY_MS[_LEVELS[depth - 1]]


@functools.lru_cache(maxsize=64)
def _path_pattern(spec: LayoutSpec, depth: int) -> re.Pattern:
    def piece(i: int, p: str) -> str:  # odd pieces are directives
        if i % 2 == 0 or p == "%%":
            return re.escape(p)
        return rf"(?P<{p[1]}>\d{{{_DIRECTIVE_DIGITS[p[1]]}}})"

    levels = zip(spec.prefixes[:depth], spec.formats[:depth])
    return re.compile("/".join(
        re.escape(prefix) + "".join(piece(i, p) for i, p in enumerate(re.split(r"(%.)", fmt)))
        for prefix, fmt in levels))


@dataclass(frozen=True)
class ArchivePath:
    """Where an archive file sits, read back from its URL (parse_url)."""
    group: str
    topic: str
    place: str                 # partition | time | late | quarantine | table (a parsed table's)
    time_path: str | None      # the time partition (time and late places)
    name: ArchivedFile


def parse_url(root: str, url: str, spec: LayoutSpec) -> ArchivePath | None:
    """The inverse of data_file, table_data_file, event_data_file, late_file and quarantine_file for a
    group laid out by spec: None for anything else (metadata, markers, stray objects)."""
    prefix = root.rstrip("/") + "/"
    if not url.startswith(prefix):
        return None
    parts = url[len(prefix):].split("/")
    if len(parts) < 4:
        return None
    group, topic, *folder, last = parts
    name = parse_file_name(last)
    if name is None or not folder or group.startswith("_"):
        return None
    if topic == DEAD_LETTERS and len(folder) == 4 and folder[1] == TABLE_DATA:
        # an event-time table group's dead letters: _dlq/<topic>/data/<run>/partition=<n>
        two = _PARTITION_FOLDER.fullmatch(folder[3])
        return (ArchivePath(group, folder[0], "quarantine", None, name)
                if spec.kind == "event_time" and two and int(two[1]) == name.partition
                else None)
    one = _PARTITION_FOLDER.fullmatch(folder[0]) if len(folder) == 1 else None
    if len(folder) == 3 and folder[0] == TABLE_DATA:  # a table group's: data/<run>/partition=<n>
        one = _PARTITION_FOLDER.fullmatch(folder[2])
    if spec.kind == "partition":
        return (ArchivePath(group, topic, "partition", None, name)
                if one and int(one[1]) == name.partition else None)
    if folder[0] == QUARANTINE:
        two = len(folder) == 2 and _PARTITION_FOLDER.fullmatch(folder[1])
        return ArchivePath(group, topic, "quarantine", None, name) if two else None
    if folder[0] == TABLE_DATA and len(folder) > 2:  # a table's data/<run>/<time partition>
        place, time_folder = "table", folder[2:]
    else:
        place, time_folder = ("late", folder[1:]) if folder[0] == LATE else ("time", folder)
    time_path = "/".join(time_folder)
    if len(time_folder) != spec.depth or not _path_pattern(spec, spec.depth).fullmatch(time_path):
        return None
    return ArchivePath(group, topic, place, time_path, name)


_PARTITION_FOLDER = re.compile(r"partition=(\d+)")


def time_partition_dir(root: str, group: str, topic: str, time_path: str) -> str:
    return join(root, group, topic, time_path)


def event_data_file(root: str, group: str, topic: str, time_path: str, partition: int,
                    generation: int, first_offset: int, fmt: str | Mapping) -> str:
    """The file holding the messages of one slice that fall in one time partition, named
    by the first offset among them."""
    return join(time_partition_dir(root, group, topic, time_path),
                file_name(generation, partition, first_offset, fmt))


def quarantine_file(root: str, group: str, topic: str, partition: int, generation: int,
                    first_offset: int) -> str:
    """The messages of one slice that its parser could not read, named by the first of
    them: always a SequenceFile keeping each message whole with the reason
    (formats.QUARANTINE_FORMAT, key field 6). Under `_quarantine`, table readers skip it."""
    return join(root, group, topic, QUARANTINE, f"partition={partition}",
                file_name(generation, partition, first_offset, "sequencefile"))


def late_file(root: str, group: str, topic: str, time_path: str, partition: int,
              generation: int, first_offset: int, fmt: str | Mapping) -> str:
    """Messages of one slice for a time partition that was already final (`_SUCCESS`)
    when the run was planned: kept beside, never added to the final partition."""
    return join(root, group, topic, LATE, time_path,
                file_name(generation, partition, first_offset, fmt))


def finalized_state(root: str, group: str, topic: str) -> str:
    """The finalizer's watermark of a topic: time partitions ending at or before it are final."""
    return join(root, group, topic, "_finalized.json")


def success_marker(root: str, group: str, topic: str, time_path: str) -> str:
    """Written when a time partition can receive no more data (the finalizer)."""
    return join(time_partition_dir(root, group, topic, time_path), "_SUCCESS")


def runs_dir(root: str, group: str) -> str:
    return join(root, "_runs", group)


def run_file(root: str, group: str, run_id: str, name: str) -> str:
    return join(runs_dir(root, group), _safe(run_id), name)


def inflight_marker(root: str, group: str) -> str:
    return join(runs_dir(root, group), "_inflight.json")


def connect_secret(root: str) -> str:
    """The deployment's secret of its Spark Connect session id (spark_connect)."""
    return join(root, "_connect", "session_secret")


def compaction_lease(root: str, group: str) -> str:
    """The compaction of a group under way (commit.compaction)."""
    return join(runs_dir(root, group), "_compacting.json")


def last_plan_marker(root: str, group: str) -> str:
    """The run last marked in flight, kept when a person deletes the mark itself."""
    return join(runs_dir(root, group), "_last_plan.json")


def accepted_loss(root: str, group: str, topic: str, partition: int, lost_from: int) -> str:
    """The record of one range lost to retention and accepted (who, when, why)."""
    return join(runs_dir(root, group), "_accepted_loss", topic, f"{partition}_{lost_from:020d}.json")


def replay_file(root: str, replay_id: str, name: str) -> str:
    """A replay's plan (replay.json) and progress (progress/partition=<n>.json)."""
    return join(root, "_replays", _safe(replay_id), name)


def replay_failure(root: str, replay_id: str) -> str:
    """Why the replay's last run failed, for the command that started it."""
    return replay_file(root, replay_id, "failure.json")


def replay_progress(root: str, replay_id: str, partition: int) -> str:
    return replay_file(root, replay_id, f"progress/partition={partition}.json")


def history_dir(root: str, group: str) -> str:
    """The group's run history for the page's trends (monitor.trends): a file a UTC day."""
    return join(root, "_history", group)


def history_file(root: str, group: str, day: str) -> str:
    return join(history_dir(root, group), f"{day}.jsonl")


def anomalies_mailed(root: str, group: str) -> str:
    """Which open anomalies of a group were mailed already: each is mailed once."""
    return join(runs_dir(root, group), "_anomalies_mailed.json")


def failures_seen(root: str, group: str) -> str:
    """The last runs whose failed task's own callback ran (mailed or not): a run that
    failed without one is mailed by the DAG's callback (airflow.alerting.on_run_failure)."""
    return join(runs_dir(root, group), "_failures_seen.json")


def failures_mailed(root: str, group: str) -> str:
    """Which task failures of a group's runs were mailed, and when: the same failure run
    after run is mailed once, then at most daily, until a run commits."""
    return join(runs_dir(root, group), "_failures_mailed.json")


def superseded(root: str, run_id: str, url: str) -> str:
    """Where a file moved aside by a rewind goes: same relative path, under _superseded."""
    relative = url[len(root.rstrip("/")) + 1:]
    return join(root, "_superseded", _safe(run_id), relative)


def run_folder_name(run_id: str) -> str:
    """The name of a run's folder under `_runs/<group>/`."""
    return _safe(run_id)


def _safe(run_id: str) -> str:
    # Airflow run ids hold ':' and '+', which some S3 tools and shells mangle
    return re.sub(r"[^A-Za-z0-9._=-]", "_", run_id)


def audit_report(root: str, group: str, run_id: str | None, name: str) -> str:
    """<root>/_audit/<group>/<run id>/report.{json,csv,html}; the latest page without run id."""
    folder = join(root, "_audit", group)
    return join(folder, _safe(run_id), name) if run_id else join(folder, name)


def audit_checkpoint(root: str, group: str) -> str:
    """What the audit of a group already counted and judged (kafka_archive.audit.checkpoint)."""
    return join(root, "_audit", group, "checkpoint.json")


def audit_events_dir(root: str, monitoring_topic: str) -> str:
    return join(root, "_audit", "_events", monitoring_topic)


def audit_events_file(root: str, monitoring_topic: str, partition: int, first_offset: int) -> str:
    """Monitoring messages copied from the topic, one file per (partition, first offset)."""
    return join(audit_events_dir(root, monitoring_topic), f"partition={partition}",
                f"{first_offset:020d}.json")
