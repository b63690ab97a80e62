"""Airflow 3 Assets: what a run committed, for downstream DAGs to be scheduled on.

Each archived topic of a group is an Asset whose URI is the topic's folder under the
archive root (for a table group, the Iceberg table's location), named
`kafka_archive/<group>/<topic>`. Topics appear as Kafka has them, so an archive DAG
declares the group's AssetAlias `kafka_archive_<group>` as its commit's outlet and adds
one event per topic whose token the run advanced, with what arrived in the extra. A run
that commits nothing, or fails before its commit, adds none.

An event-time group's topic has a second asset, its finalized time partitions
(`kafka_archive/<group>/<topic>/finalized`, URI the topic's folder plus `/_SUCCESS`): the
finalize task adds one event per time partition it wrote `_SUCCESS` into, with the
partition's folder and time range, for DAGs that wait for an hour to be complete.
"""

from __future__ import annotations

from datetime import datetime, timezone

from airflow.sdk import Asset, AssetAlias

from kafka_archive import layout
from kafka_archive.config import Config


def alias(group: str) -> AssetAlias:
    return AssetAlias(f"kafka_archive_{group}")


def add(outlet_events, group: str, events: list[tuple[Asset, dict]]) -> None:
    """Asset events through the group's alias (a task's `outlet_events`), added when the
    running task succeeds."""
    for asset, extra in events:
        outlet_events[alias(group)].add(asset, extra=extra)


def topic_asset(config: Config, group: str, topic: str) -> Asset:
    return Asset(uri=f"{config.archive_root}/{group}/{topic}", name=f"kafka_archive/{group}/{topic}")


def commit_events(config: Config, group: str, summary: dict, replaces: bool = False
                  ) -> list[tuple[Asset, dict]]:
    """(asset, extra) per topic the commit advanced: the run, the new token offsets per
    partition, records and files added, files a rewind replaced, and for a table group the
    table and its snapshot; `replaces` when the commit announces again what an earlier
    attempt may have announced (airflow.tasks.commit), so a consumer replaces rather than
    adds."""
    spec = config.group(group).table
    events = []
    for topic, offsets in summary["tokens"].items():
        counts = summary["by_topic"][topic]
        if not counts["records"] and not counts["replaced"]:
            continue  # nothing arrived for this topic in this run
        extra = {"group": group, "topic": topic, "run_id": summary["run_id"],
                 "offsets": offsets, **counts, "replaces": replaces}
        if spec is not None:
            extra |= {"table": f"{spec.namespace}.{topic}", "catalog": spec.catalog,
                      "snapshot_id": summary["table_snapshots"].get(topic)}
        events.append((topic_asset(config, group, topic), extra))
    return events


def finalized_asset(config: Config, group: str, topic: str) -> Asset:
    return Asset(uri=f"{config.archive_root}/{group}/{topic}/_SUCCESS",
                 name=f"kafka_archive/{group}/{topic}/finalized")


def finalize_events(config: Config, group: str, run_id: str, finalized: dict[str, list[str]],
                    again: dict[str, list[str]] | None = None) -> list[tuple[Asset, dict]]:
    """(asset, extra) per time partition finalized: its path below the topic, its folder,
    its time range [start, end) in ms and ISO form (UTC), and `replaces`: whether it was
    final before (`again`: a rewind archived its offsets again), so a loader replaces
    what it loaded of it rather than adding it as new."""
    again = again or {}
    spec = config.group(group).layout
    events = []
    for topic, paths in sorted(finalized.items()):
        for path in paths:
            start_ms, end_ms = layout.time_partition_range(path, spec)
            events.append((finalized_asset(config, group, topic), {
                "group": group, "topic": topic, "run_id": run_id, "partition": path,
                "url": layout.time_partition_dir(config.archive_root, group, topic, path),
                "start_ms": start_ms, "end_ms": end_ms,
                "start": _iso(start_ms), "end": _iso(end_ms),
                "replaces": path in again.get(topic, ())}))
    return events


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat().replace("+00:00", "Z")
