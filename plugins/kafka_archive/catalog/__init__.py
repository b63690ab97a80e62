"""The catalog of a group: what is where, the one answer every reader asks.

It records every current file with its Kafka partition, offset range, records, bytes,
time partition and the run that wrote it, whatever the layout, plus the ranges lost to
retention and the open time partitions. Commit, backfill, accept-loss and finalize add
entries by compare-and-swap (catalog.store); readers get the state (per-partition
summaries, small) and ask for rows only where they need them. The run folders stay the
truth: a missing or damaged catalog is rebuilt by a writer, one at a time, from its own
log when that is whole, else from them (catalog.rebuild); a reader never waits on that.

    state.py    the state and how an entry changes it (pure)
    store.py    log, snapshots and row chunks on storage; read and append
    rebuild.py  the state from the run folders; accepted-loss records
    lease.py    one rebuild of a group at a time
    contents.py the rows of a group as the tools take them (Contents)
"""

from __future__ import annotations

import logging

from kafka_archive.catalog import rebuild as _rebuild
from kafka_archive.catalog import store
from kafka_archive.catalog.contents import Contents
from kafka_archive.catalog.rebuild import (AcceptedLoss, catalog_row, plan_marks, run_folder,
                                          run_summary)
from kafka_archive.catalog.state import OverlapError, State, Summary, lost_ranges
from kafka_archive.catalog.store import Catalog, CatalogUnreadable
from kafka_archive.config import Config

log = logging.getLogger(__name__)


def open_catalog(storage, config: Config, group: str, *, may_rebuild: bool = False) -> Catalog:
    """The group's catalog. A damaged newest snapshot or chunk is read past from an older
    snapshot and the log (catalog.store). Past that, or for a group with runs but no
    catalog: a writer (may_rebuild: plan, commit, finalize, the operators' commands)
    rebuilds it, one rebuild at a time; a reader (status, the page, verify, the audit,
    ls, replay) never waits on a rebuild, it fails at once naming the damage."""
    spec = config.group(group).layout

    def repair(damage: str) -> Catalog:
        if not may_rebuild:
            raise CatalogUnreadable(f"catalog of group {group}: {damage}; the group's next "
                                    "run rebuilds it, or `kafka-archive catalog --group "
                                    f"{group} --rebuild` now")
        log.warning("catalog of group %s is unreadable (%s): rebuilding it", group, damage)
        return _rebuild.rebuild(storage, config.archive_root, group, spec)

    try:
        found = store.read(storage, config.archive_root, group)
    except CatalogUnreadable as exc:
        return repair(str(exc))
    if found is None:
        if may_rebuild:
            return _rebuild.rebuild(storage, config.archive_root, group, spec)
        if not _rebuild.committed_runs(storage, config.archive_root, group):
            return Catalog(storage, config.archive_root, group, State())  # nothing yet
        return repair("it has none, though runs were committed (archived before catalogs "
                      "existed, or its folder was deleted)")
    found.repair = repair
    return found


def append(storage, config: Config, group: str, make_entry) -> Catalog:
    """Add the entry make_entry(catalog) makes (None: nothing) by compare-and-swap."""
    return store.append(lambda: open_catalog(storage, config, group, may_rebuild=True),
                        make_entry)


def rebuild(storage, config: Config, group: str) -> Catalog:
    """By hand (`kafka-archive catalog --rebuild`): from the run folders, the truth."""
    return _rebuild.rebuild(storage, config.archive_root, group, config.group(group).layout,
                            from_runs=True)


def contents(storage, config: Config, group: str, topic: str | None = None, *,
             may_rebuild: bool = False) -> Contents:
    """The current rows of a group (or one topic) with their plans and losses."""
    catalog = open_catalog(storage, config, group, may_rebuild=may_rebuild)
    return Contents.of(catalog, catalog.rows(topic))


__all__ = ["AcceptedLoss", "Catalog", "CatalogUnreadable", "Contents", "OverlapError",
           "Summary", "append", "catalog_row", "contents", "lost_ranges", "open_catalog",
           "rebuild", "run_folder", "run_summary"]
