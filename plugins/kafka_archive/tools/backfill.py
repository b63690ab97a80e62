"""Backfill: rebuild an event-time group's output of one topic from the backup archive.

The partitioned output can always be rebuilt because the backup group keeps every
message verbatim. After a parser fix, say, backfill re-writes the slices the group's
committed runs wrote, from the backup's files, through the same slice writer as the
archive job (kafka_archive.archive.slice_writer) with the same slice bounds and the same finalized
watermark those runs planned with: so it produces exactly the files the live path would
have produced with the current config. A range selects whole slices: those holding an
offset in [from_offset, to_offset) (every partition), or a message whose Kafka timestamp
is in [since_ms, until_ms).

Order: the new files are written first (same names are replaced), then the slice's old
files that are not among them (its quarantine and late files too) are moved to
`_superseded/<run id>/`, then the catalog replaces the rows (one entry, by
compare-and-swap), then `_runs/<group>/<run id>/backfill.json` records the new rows for
a rebuild of the catalog. A crash anywhere is repaired by running the
same backfill again. Tokens do not move. Files of a finalized partition may change here:
rebuilding is the operator's explicit repair.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict

from kafka_archive import catalog, formats, layout
from kafka_archive.archive import job, slice_writer
from kafka_archive.catalog.state import row_key
from kafka_archive.config import Config
from kafka_archive.errors import TerminalError
from kafka_archive.manifest import row_files
from kafka_archive.plan import inflight
from kafka_archive.plan.planning import Plan
from kafka_archive.progress_bars import Track, untracked
from kafka_archive.storage import Storage

log = logging.getLogger(__name__)

UNLIMITED = 1 << 62


class BackfillError(TerminalError):
    pass


def backfill(config: Config, storage: Storage, group: str, topic: str, run_id: str, now: str,
             from_offset: int | None = None, to_offset: int | None = None,
             since_ms: int | None = None, until_ms: int | None = None,
             source: str = "backup", track: Track = untracked) -> dict:
    """Rebuild the slices of `topic` in the range; a summary of what was replaced."""
    target_group, source_group = config.group(group), config.group(source)
    if target_group.layout.kind != "event_time":
        raise BackfillError(f"group {group} has layout {target_group.layout.kind}: backfill "
                            "rebuilds event_time groups from the backup")
    if target_group.table is not None:
        raise BackfillError(f"group {group} keeps Iceberg tables: rewind it (`kafka-archive "
                            "rewind`), which re-archives the range from Kafka in one snapshot")
    if (source_group.layout.kind != "partition"
            or source_group.format_for(topic).kind != "sequencefile"):
        raise BackfillError(f"group {source} cannot be a backfill source: it needs layout "
                            f"partition and format sequencefile (which keeps offsets)")
    if (from_offset is None and to_offset is None) == (since_ms is None and until_ms is None):
        raise BackfillError("give an offset range (from/to offset) or a time range "
                            "(since/until), not both or neither")
    if run := inflight.holding(storage, config.archive_root, group, topic):
        raise BackfillError(f"run {run} of group {group} is in flight with topic {topic}: "
                            "let it commit first")
    contents = catalog.contents(storage, config, group, topic, may_rebuild=True)
    rows, plans = contents.of_topic(topic), contents.plans
    chosen = [r for r in rows if r["records"] and _selected(r, from_offset, to_offset,
                                                             since_ms, until_ms)]
    backup = _backup_files(config, storage, source, topic)
    new_rows, moved, replaced = [], [], []
    for row in track(chosen, f"backfill {group} {topic}"):
        plan = plans[row["_run"]]
        target = job.target(config, _as_plan(config, plan, group, topic), topic)
        out = slice_writer.OpenSlice(target, row["partition"], row["start"], row["end"], UNLIMITED,
                                     tuple(map(tuple, row.get("placed_by", ()))))
        for r in _backup_records(storage, backup.get(row["partition"], []), row["start"], row["end"]):
            out.add(r)
        new = out.finish(storage)
        if new["records"] != row["records"]:
            raise BackfillError(
                f"{topic} partition {row['partition']} [{row['start']}, {row['end']}): the "
                f"backup group {source} holds {new['records']} of its {row['records']} "
                "messages; archive the backup that far first (nothing was moved aside)")
        keep = {f["url"] for f in new["files"]}
        for f in row_files(row):
            if f["url"] not in keep and storage.size(f["url"]) is not None:
                storage.move(f["url"], layout.superseded(config.archive_root, run_id, f["url"]))
                moved.append(f["url"])
        new_rows.append({**new, "replaces_run": row["_run"]})
        replaced.append(row)
    summary = {"run_id": run_id, "group": group, "topic": topic, "source": source, "at": now,
               "slices": new_rows, "moved_aside": moved,
               "range": {"from_offset": from_offset, "to_offset": to_offset,
                         "since_ms": since_ms, "until_ms": until_ms}}
    if new_rows:
        spec = target_group.layout
        entry = {"kind": "backfill", "run_id": run_id, "at": now,
                 "run": {"run_id": run_id, "planned_at": now, "committed_at": now,
                         "records": sum(r["records"] for r in new_rows),
                         "bytes": sum(r.get("bytes") or 0 for r in new_rows),
                         "files": sum(len(r["files"]) for r in new_rows)},
                 "remove": replaced,
                 "add": [catalog.catalog_row(new, old["_run"], plans[old["_run"]], spec,
                                             config.archive_root, group)
                         for new, old in zip(new_rows, replaced)]}
        def made(cat: catalog.Catalog) -> dict | None:
            """The entry, if the rows it replaces are still current in the catalog as it is
            now (a lost compare-and-swap reads again): a run that committed meanwhile (a
            rewind that moved them aside) must not see them back, nor lose its own."""
            if cat.state.has_run(run_id, "backfill"):
                return None
            current = {row_key(r): r for r in cat.rows(topic)}
            gone = [r for r in replaced if current.get(row_key(r), {}).get("_run") != r["_run"]]
            if gone:
                raise BackfillError(
                    f"{topic} partition {gone[0]['partition']} [{gone[0]['start']}, "
                    f"{gone[0]['end']}): a run changed it while the backfill ran (a rewind?); "
                    f"the backfill was not recorded: run it again ({len(gone)} slices)")
            return entry

        # its entry's seq orders it among the commits in a rebuild from the run folders
        summary["entry"] = catalog.append(storage, config, group, made).appended
        storage.put_bytes(layout.run_file(config.archive_root, group, run_id, "backfill.json"),
                          json.dumps(summary, indent=1, sort_keys=True).encode())
    log.info("backfill %s %s: %d slices rebuilt, %d files moved aside", group, topic,
             len(new_rows), len(moved))
    return summary


def _as_plan(config: Config, plan: dict, group: str, topic: str) -> Plan:
    """The run's plan as the live path would execute it now: its finalized watermark and
    slices, the current config's format and generation."""
    return Plan(group=group, run_id=plan["run_id"], created_at=plan["created_at"],
                bootstrap=plan["bootstrap"], generation=config.generation,
                format=config.group(group).format_for(topic).__dict__, slices=(), token_versions={},
                base_offsets={}, finalized=plan.get("finalized", {}))


def _selected(row: dict, from_offset, to_offset, since_ms, until_ms) -> bool:
    if from_offset is not None or to_offset is not None:
        return (row["end"] > (from_offset or 0)
                and (to_offset is None or row["start"] < to_offset))
    return ((since_ms is None or row["max_timestamp_ms"] >= since_ms)
            and (until_ms is None or row["min_timestamp_ms"] < until_ms))


def _backup_files(config: Config, storage: Storage, source: str, topic: str
                  ) -> dict[int, list[tuple[int, str]]]:
    """Kafka partition -> the backup's current (first offset, url) files of the
    configured generation, in offset order, from its catalog."""
    found: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for row in catalog.open_catalog(storage, config, source).rows(topic,
                                                                  generation=config.generation):
        for f in row_files(row):
            if name := layout.parse_file_name(f["url"].rsplit("/", 1)[-1]):
                found[row["partition"]].append((name.first_offset, f["url"]))
    return {p: sorted(files) for p, files in found.items()}


def _backup_records(storage: Storage, files: list[tuple[int, str]], start: int, end: int):
    """The backup's messages with offsets in [start, end), in offset order, once each."""
    next_offset = start
    for i, (first, url) in enumerate(files):
        following = files[i + 1][0] if i + 1 < len(files) else None
        if first >= end or (following is not None and following <= start):
            continue
        with storage.open(url) as stream:
            for r in formats.read(stream, url):
                if r.offset >= end:
                    break
                if r.offset >= next_offset:
                    yield r
                    next_offset = r.offset + 1
