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

LEASE_S = 1800  # a claim on its group (a rebuild, a compaction); one longer than this may meet a second
CLAIM_ATTEMPTS = 5


def lease_url(root: str, group: str) -> str:
    return join(folder(root, group), "_rebuilding.json")


@contextmanager
def one_at_a_time(storage: Storage, root: str, group: str):
    """Hold the group's rebuild lease while the block runs; released after it."""
    url = lease_url(root, group)

    def busy(held: dict) -> TransientError:
        return TransientError(
            f"catalog of group {group} is being rebuilt by process {held['pid']} on "
            f"{held['host']} since {_utc(held['since'])}; try again when it ends (its claim, "
            f"{url}, expires at {_utc(held['until'])})")

    with claimed(storage, url, {}, busy):
        yield


@contextmanager
def claimed(storage: Storage, url: str, claim: dict, busy, take_over=None,
            release_on_error: bool = True):
    """Hold the lease at url (claim, this process, its expiry) while the block runs. A
    lease of another that is alive: busy(it) is raised. One expired or whose process is
    gone: take_over(it), if given, then it is ours. Released after the block; after an
    error too unless release_on_error is False (then it names a process that ends, and
    the next one takes it over)."""
    data = json.dumps({**claim, **this_process(), "since": time.time(),
                       "until": time.time() + LEASE_S}).encode()
    version = None  # create it; or replace the version found, expired or its holder gone
    for _ in range(CLAIM_ATTEMPTS):
        try:
            storage.put_if(url, data, version)
            break
        except VersionConflict:  # held, or released or taken over since we looked: look again
            found, version = storage.get_versioned(url)
            held = parsed(found)
            if held and alive(held):
                raise busy(held) from None
            if held and take_over is not None:
                take_over(held)
    else:
        raise TransientError(f"lease {url}: claimed and released by others {CLAIM_ATTEMPTS} "
                             "times while this process tried; try again")
    done = False
    try:
        yield
        done = True
    finally:
        if done or release_on_error:
            try:
                storage.delete(url)
            except Exception as exc:  # it expires
                log.warning("lease %s not released (%r)", url, exc)


def _utc(epoch_s: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch_s))


def parsed(data: bytes | None) -> dict | None:
    """A lease as stored, or None when there is none or it does not read as one."""
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
