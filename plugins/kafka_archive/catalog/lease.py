"""One rebuild of a group's catalog at a time (and the liveness of a lease, which a table
group's compaction lease shares: plan.inflight.compacting): a lease, `_catalog/<group>/_rebuilding.json`,
created with `If-None-Match: *`. A second rebuilder fails fast (TransientError, retried
later) instead of doing the same minutes of work. A lease is taken over when it has
expired or when its holder, on this host, is gone (a killed rebuild). Its holder
releases it by compare-and-swap to a released mark (storage has no conditional delete),
so a holder never releases its successor's. Only a guard against waste: the rebuild's entry is claimed by compare-and-swap, so two rebuilds at
once would still leave one catalog.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from contextlib import contextmanager

from kafka_archive.catalog.store import folder
from kafka_archive.errors import TransientError, VersionConflict
from kafka_archive.storage import Storage, join

log = logging.getLogger(__name__)

LEASE_S = 1800  # a claim on its group (a rebuild, a compaction), renewed while it is held
RENEW_S = LEASE_S / 3  # how often a holder renews: two renewals may fail before it expires
CLAIM_ATTEMPTS = 5
# the claims this process holds now, by their token: a lease of this process whose token
# is not here was left by a block that raised (release_on_error=False), so it is a dead
# one's; one that is here is alive, even for another claimer in this process
_HELD_HERE: set[str] = set()


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
    the next one takes it over). The claim is renewed every RENEW_S while the block runs,
    and released only while it is still ours: a holder whose lease expired and was taken
    over leaves its successor's alone."""
    token = uuid.uuid4().hex
    held = {**claim, **this_process(), "token": token, "since": time.time()}
    data = json.dumps({**held, "until": time.time() + LEASE_S}).encode()
    version = None  # create it; or replace the version found, expired or its holder gone
    for _ in range(CLAIM_ATTEMPTS):
        try:
            version = storage.put_if(url, data, version)
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
    _HELD_HERE.add(token)
    renewal = _Renewal(storage, url, held, version)
    done = False
    try:
        yield
        done = True
    finally:
        renewal.stop()
        _HELD_HERE.discard(token)
        if done or release_on_error:
            _release(storage, url, token, renewal.version)


class _Renewal(threading.Thread):
    """Moves the claim's expiry forward every RENEW_S by compare-and-swap on the version it
    wrote last; stops when the block ends, or when the lease is no longer ours."""

    def __init__(self, storage: Storage, url: str, held: dict, version) -> None:
        super().__init__(name=f"lease renewal {url}", daemon=True)
        self.storage, self.url, self.held, self.version = storage, url, held, version
        self.stopped = threading.Event()
        self.start()

    def run(self) -> None:
        while not self.stopped.wait(RENEW_S):
            data = json.dumps({**self.held, "until": time.time() + LEASE_S}).encode()
            try:
                self.version = self.storage.put_if(self.url, data, self.version)
            except VersionConflict:
                log.warning("lease %s was taken over while held (renewals failed for longer "
                            "than its %d s); its holder goes on, its successor too", self.url,
                            LEASE_S)
                return
            except Exception as exc:  # S3 unreachable for now: the next renewal tries again
                log.warning("lease %s not renewed (%r)", self.url, exc)

    def stop(self) -> None:
        self.stopped.set()
        if self.is_alive() and self is not threading.current_thread():
            self.join()


def _release(storage: Storage, url: str, token: str, version) -> None:
    """Replace the lease by a released mark, by compare-and-swap on the version this
    holder wrote last: only while it is still ours. (A read and a delete would not do: a
    holder paused between the two, its lease expired and taken over meanwhile, would
    delete its successor's.)"""
    try:
        storage.put_if(url, json.dumps({"released": token, "at": time.time()}).encode(),
                       version)
    except VersionConflict:
        log.warning("lease %s was taken over before its release: its successor's stays", url)
    except Exception as exc:  # it expires
        log.warning("lease %s not released (%r)", url, exc)


def released(data: bytes | None) -> bool:
    """Whether a lease file holds the mark its last holder left when it released it."""
    try:
        return "released" in json.loads(data)
    except (TypeError, ValueError):
        return False


def _utc(epoch_s: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch_s))


def parsed(data: bytes | None) -> dict | None:
    """A lease as stored, or None when there is none, it was released or it does not read
    as one."""
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
    # this process's: gone unless one of its claims holds it now (a block that raised left it)
    return held["pid"] == os.getpid() and held.get("token") not in _HELD_HERE
