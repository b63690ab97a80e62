"""One rebuild of a group's catalog at a time (and the liveness of a lease, which a table
group's compaction lease shares: plan.inflight.compacting): a lease, `_catalog/<group>/_rebuilding.json`,
created with `If-None-Match: *`. A second rebuilder fails fast (TransientError, retried
later) instead of doing the same minutes of work. A lease is taken over when it has
expired or when its holder, on this host, is gone (a killed rebuild). Only a guard
against waste: the rebuild's entry is claimed by compare-and-swap, so two rebuilds at
once would still leave one catalog.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from contextlib import contextmanager

from kafka_archive.catalog.store import folder
from kafka_archive.errors import TransientError, VersionConflict
from kafka_archive.storage import Storage, join

log = logging.getLogger(__name__)

LEASE_S = 1800  # a rebuild's claim on its group; one longer than this may meet a second


def lease_url(root: str, group: str) -> str:
    return join(folder(root, group), "_rebuilding.json")


@contextmanager
def one_at_a_time(storage: Storage, root: str, group: str):
    """Hold the group's rebuild lease while the block runs; released after it."""
    url = lease_url(root, group)
    mine = {**this_process(), "since": time.time(), "until": time.time() + LEASE_S}
    data = json.dumps(mine).encode()
    try:
        storage.put_if(url, data, None)
    except VersionConflict:
        found, version = storage.get_versioned(url)
        held = _lease_of(found)
        if held and alive(held):
            raise TransientError(
                f"catalog of group {group} is being rebuilt by process {held['pid']} on "
                f"{held['host']} since {_utc(held['since'])}"
                f"; try again when it ends (its claim, {url}, expires at "
                f"{_utc(held['until'])})") from None
        storage.put_if(url, data, version)  # expired or its holder gone: ours (or a conflict)
    try:
        yield
    finally:
        try:
            storage.delete(url)
        except Exception as exc:  # it expires
            log.warning("catalog of group %s: rebuild lease not released (%r)", group, exc)


def _utc(epoch_s: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch_s))


def _lease_of(data: bytes | None) -> dict | None:
    try:
        held = json.loads(data)
        return held if {"host", "pid", "since", "until"} <= set(held) else None
    except (TypeError, ValueError):
        return None


def this_process() -> dict:
    """Who holds a lease, as alive() checks it."""
    return {"host": socket.gethostname(), "pid": os.getpid()}


def alive(held: dict) -> bool:
    """Whether a lease ({host, pid, until}) may still be held: not expired, and its
    process not known to have ended."""
    return held["until"] > time.time() and not _gone(held)


def _gone(held: dict) -> bool:
    """Whether the lease's holder is known to have ended: only knowable on its own host."""
    if held["host"] != socket.gethostname():
        return False
    try:
        os.kill(held["pid"], 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return held["pid"] == os.getpid()  # our own, left by a rebuild that raised
