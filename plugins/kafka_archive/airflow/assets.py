"""Airflow 3 Assets: what a run committed, for downstream DAGs to be scheduled on.

Each archived topic of a group is an Asset whose URI is the topic's folder under the
archive root (for a table group, the Iceberg table's location), named
`kafka_archive/<group>/<topic>`. Topics appear as Kafka has them, so an archive DAG
declares the group's AssetAlias `kafka_archive_<group>` as its commit's outlet and adds
one event per topic whose token the run advanced, with what arrived in the extra. A run
that commits nothing, or fails before its commit, adds none.
"""

from __future__ import annotations

from airflow.sdk import Asset, AssetAlias

from kafka_archive.config import Config


def alias(group: str) -> AssetAlias:
    return AssetAlias(f"kafka_archive_{group}")


def topic_asset(config: Config, group: str, topic: str) -> Asset:
    return Asset(uri=f"{config.archive_root}/{group}/{topic}", name=f"kafka_archive/{group}/{topic}")


def commit_events(config: Config, group: str, summary: dict) -> list[tuple[Asset, dict]]:
    """(asset, extra) per topic the commit advanced: the run, the new token offsets per
    partition, records and files added, files a rewind replaced, and for a table group the
    table and its snapshot."""
    spec = config.group(group).table
    events = []
    for topic, offsets in summary["tokens"].items():
        counts = summary["by_topic"][topic]
        if not counts["records"] and not counts["replaced"]:
            continue  # nothing arrived for this topic in this run
        extra = {"group": group, "topic": topic, "run_id": summary["run_id"],
                 "offsets": offsets, **counts}
        if spec is not None:
            extra |= {"table": f"{spec.namespace}.{topic}", "catalog": spec.catalog,
                      "snapshot_id": summary["table_snapshots"].get(topic)}
        events.append((topic_asset(config, group, topic), extra))
    return events
