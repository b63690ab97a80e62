"""One simulated deployment: the real task bodies of plan and commit (airflow.tasks,
Airflow's connections patched), the job (its slice bodies, in process), catalog and
operators' tools on a local (or S3) archive root, against the simulated Kafka
(sim.kafka), with Airflow's runs and tasks, kills, interleavings of two live tasks and a
clock modelled.

A step is data (a tuple), so a sequence replays exactly; a step that names what does
not exist (yet) is a no-op, so a shrunk sequence stays runnable. `World.step` runs one,
`World.check` the invariants, `World.drain` the liveness check.
"""

from __future__ import annotations

import json
import shutil
import socket
import time
from concurrent.futures import Executor, Future
from contextlib import contextmanager
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace
from unittest.mock import patch

from kafka_archive import brokers, catalog, layout, manifest as manifests, spark
from kafka_archive.airflow import alerting, connections, tasks
from kafka_archive.catalog import lease
from kafka_archive.archive import job
from kafka_archive.archive.archived_files import DamagedFile, read_archived
from kafka_archive.commit import compaction, finalizing, iceberg, mirror, table_maintenance
from kafka_archive.errors import ArchiveError, TerminalError, TransientError, VersionConflict
from kafka_archive.formats import parquet
from kafka_archive.manifest import row_files
from kafka_archive.monitor import preflight
from kafka_archive.monitor.alerts import Message
from kafka_archive.monitor.mailing import Mailings
from kafka_archive.plan import inflight, losses, rewinds, runs
from kafka_archive.plan.planning import HeldTopicsError, Plan
from kafka_archive import storage as storage_module
from kafka_archive.storage import Storage, join as storage_join
from kafka_archive.tools import verify
from kafka_archive.tokens import (LocalTokenStore, MalformedTokenError, S3TokenStore, Token,
                                  TokenConflictError, open_store, parse, render)

from tests.support.local_config import local_config
from tests.support.sim import audit
from tests.support.sim import registry as sim_registry
from tests.support.sim.kafka import Kafka, Partition

TOPICS = {"t": 2, "u": 1}
START = datetime(2026, 1, 1, tzinfo=timezone.utc)


class Crash(BaseException):
    """The step's process is killed here (SIGKILL): nothing after runs, no handler sees it."""


class Violation(AssertionError):
    """An invariant broke: `kind` names which, the message says where."""

    def __init__(self, kind: str, message: str):
        super().__init__(f"{kind}: {message}")
        self.kind = kind


class LaunchFailed(Exception):
    """spark-submit failed before the job started (a bad class path, no memory for the
    JVM): what the Spark provider raises, with no record of the job's own."""


DEAD_PID = 4_194_304 + 1  # above Linux's pid_max: no process has it
LEASES = ("/_compacting.json", "/_rebuilding.json")  # catalog.lease's files
NEIGHBOUR = "neighbour"  # another deployment's group on the world's archive root
LAUNCH_FAILS = -1  # a job task's "crash" that makes its launch fail before the job starts


class _InTurn(Executor):
    """pyiceberg's thread pool, one task after another in the caller's thread: its commit
    writes three manifests at once, and with threads the order of their writes (so which
    one a kill at write #N stops, and whether one still runs once the task is "dead",
    counting against the next task's writes) is the machine's load's, not the seed's."""

    def submit(self, fn, /, *args, **kwargs) -> Future:
        done = Future()
        try:
            done.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # (a Crash too: raised where the pool's caller waits)
            done.set_exception(exc)
        return done


_IN_TURN = _InTurn()


class Faults:
    """Counts the writes of the step in progress and kills it at the armed one; or, at
    the armed switch point, runs another task's body whole before that write goes on (an
    interleaving of two live tasks, at a storage call of the first)."""

    def __init__(self):
        self.crash_at, self.calls, self.switch_at, self.other = 0, 0, 0, None
        self.torn_at, self.torn_calls = 0, 0  # a kill in the middle of the Nth local write
        self.io_at, self.io_kind, self.io_calls = 0, "", 0  # a storage call's failure

    def arm(self, crash_at: int, switch_at: int = 0, other=None, torn_at: int = 0,
            io_at: int = 0, io_kind: str = "") -> None:
        self.crash_at, self.calls, self.switch_at, self.other = crash_at, 0, switch_at, other
        self.torn_at, self.torn_calls = torn_at, 0
        self.io_at, self.io_kind, self.io_calls = io_at, io_kind, 0

    def failing(self, what: str, write: bool) -> bool:
        """The Nth storage call (`error`: any, read or list too; `lands`: of the writes)
        fails as S3 fails: `error` raises before it (a 503 past botocore's retries);
        `lands` returns True: the write must land and then fail (its answer lost, and
        the retry of a conditional write answered 412, as it already holds)."""
        if not self.io_at or (self.io_kind == "lands" and not write):
            return False
        self.io_calls += 1
        if self.io_calls != self.io_at:
            return False
        self.io_at = 0
        if self.io_kind == "error":
            raise TransientError(f"cannot {what}: SlowDown (503) after every retry (simulated)")
        return True

    def midway(self, what: str) -> None:
        """Half of a local write's bytes are written: the armed kill may come here."""
        if self.torn_at:
            self.torn_calls += 1
            if self.torn_calls == self.torn_at:
                raise Crash(f"the middle of writing {what}")

    def tick(self, what: str) -> None:
        if not (self.crash_at or self.switch_at):
            return
        self.calls += 1
        if self.calls == self.switch_at:
            other, kept = self.other, (self.crash_at, self.calls)
            self.switch_at, self.other = 0, None
            other(what)  # its own arm()s end with it: the first task's count goes on
            self.crash_at, self.calls = kept
        if self.crash_at and self.calls == self.crash_at:
            raise Crash(what)


class SimStorage(Storage):
    """Storage (local, or S3 on moto) whose every write (put, upload, conditional put,
    delete; a move is an upload and a delete) may be the one a kill stops before."""

    def __init__(self, faults: Faults, make_s3_client=None):
        super().__init__(make_s3_client)
        self.faults = faults
        self.writes: list[str] = []  # what the task in progress wrote, in order
        self.every_write: list[str] = []  # and every write (or delete) of the world so far
        # (folder, start_after) -> len(writes) when last listed; and those listed again
        # with nothing written in the folder between (the same answer, asked twice)
        self.listed: dict[tuple[str, str | None], int] = {}
        self.relisted: Counter = Counter()
        # leases (a compaction's, a rebuild's): the task that holds each now, and the
        # task whose storage calls these are (a racing body's
        # nested inside); a lease removed by a task that does not hold it breaks its
        # protocol, whatever follows
        self.actors: list[str] = []
        self.lease_holders: dict[str, str] = {}  # url -> the actor whose claim it holds
        self.lease_violations: list[str] = []

    def get_bytes(self, url):
        self.faults.failing(f"read {url}", write=False)
        return super().get_bytes(url)

    def get_versioned(self, url):
        self.faults.failing(f"read {url}", write=False)
        return super().get_versioned(url)

    def size(self, url):
        self.faults.failing(f"look up {url}", write=False)
        return super().size(url)

    def list(self, prefix_url, start_after=None):
        self.faults.failing(f"list {prefix_url}", write=False)
        where = (prefix_url, start_after)
        if where in self.listed and not any(
                url.startswith(prefix_url.rstrip("/") + "/")
                for url in self.writes[self.listed[where]:]):
            self.relisted[where] += 1
        self.listed[where] = len(self.writes)
        return super().list(prefix_url, start_after)

    def task_begins(self) -> None:
        self.writes.clear()
        self.listed.clear()
        self.relisted.clear()

    def put_bytes(self, url, data):
        self.faults.tick(f"write {url}")
        lands = self.faults.failing(f"write {url}", write=True)
        self._wrote(url)
        super().put_bytes(url, data)
        if lands:
            raise _answer_lost("write", url)

    def upload_file(self, source, url, crc32c=None):
        self.faults.tick(f"upload {url}")
        lands = self.faults.failing(f"upload {url}", write=True)
        self._wrote(url)
        super().upload_file(source, url, crc32c)
        if lands:
            raise _answer_lost("upload", url)

    def put_if(self, url, data, expected_version, content_type="application/octet-stream"):
        self.faults.tick(f"conditional write {url}")
        lands = self.faults.failing(f"conditional write {url}", write=True)
        self._wrote(url)
        version = super().put_if(url, data, expected_version, content_type)
        if lands:  # (the lease bookkeeping below is of a write that did not happen for it)
            raise VersionConflict(url, expected_version, version)
        if url.endswith(LEASES):
            claim = json.loads(data)
            if "released" in claim:
                self._lease_removed(url, "released")
            else:
                self.lease_holders[url] = self.actor()
        return version

    def delete(self, url):
        self.faults.tick(f"delete {url}")
        lands = self.faults.failing(f"delete {url}", write=True)
        self._wrote(url)
        super().delete(url)
        if url.endswith(LEASES):
            self._lease_removed(url, "deleted")
        if lands:
            raise _answer_lost("delete", url)

    def _wrote(self, url: str) -> None:
        self.writes.append(url)
        self.every_write.append(url)

    def actor(self) -> str:
        return self.actors[-1] if self.actors else "?"

    def _lease_removed(self, url: str, how: str) -> None:
        holder = self.lease_holders.pop(url, None)
        if holder is not None and holder != self.actor():
            self.lease_violations.append(f"lease {url.rsplit('/', 1)[-1]} held by {holder} "
                                         f"was {how} by {self.actor()}")


class SimTokens:
    """The config's token store (local or S3) whose writes and deletes may be killed."""

    def __init__(self, store: LocalTokenStore | S3TokenStore, faults: Faults):
        self.store, self.faults = store, faults

    def url(self, group: str, topic: str) -> str:
        """Where a person finds the topic's token file."""
        if isinstance(self.store, S3TokenStore):
            return self.store._url(group, topic)
        return f"file://{self.store._path(group, topic)}"

    def read(self, group, topic):
        self.faults.failing(f"read token {group}/{topic}", write=False)
        return self.store.read(group, topic)

    def topics(self, group):
        return self.store.topics(group)

    def write(self, token, expected_version):
        self.faults.tick(f"token write {token.group}/{token.topic}")
        lands = self.faults.failing(f"token write {token.group}/{token.topic}", write=True)
        version = self.store.write(token, expected_version)
        if lands:
            raise TokenConflictError(token.group, token.topic, expected_version, version)
        return version

    def delete(self, group, topic):
        self.faults.tick(f"token delete {group}/{topic}")
        lands = self.faults.failing(f"token delete {group}/{topic}", write=True)
        self.store.delete(group, topic)
        if lands:
            raise _answer_lost("delete", self.url(group, topic))


def _answer_lost(action: str, url: str) -> TransientError:
    return TransientError(f"cannot {action} {url}: the connection broke before the answer "
                          "(the request had landed; simulated)")


class _S3Fake:
    """An S3 in this process (moto's, which honours ETags, If-Match, If-None-Match and
    ListObjectsV2's pages as S3 does) holding the bucket of S3_FAKE: the s3:// paths of
    Storage and of the token store, driven as the other worlds drive the local ones. In
    process rather than moto's server: no HTTP per call (still ~5 ms a call, botocore's and
    moto's own work). Stopped by close(): the mock answers every boto3 client of the
    process."""

    def __init__(self):
        import boto3
        from moto import mock_aws

        self.mock = mock_aws()
        self.mock.start()
        self._client = boto3.client("s3", region_name="us-east-1")
        self._client.create_bucket(Bucket=S3_FAKE.removeprefix("s3://"))
        # pages of LIST_PAGE keys (S3's are 1,000): every listing of more turns a page
        self._client.meta.events.register("before-parameter-build.s3.ListObjectsV2",
                                          _small_pages)

    def client(self):
        return self._client

    def close(self) -> None:
        self.mock.stop()


LIST_PAGE = 3


def _small_pages(params, **kwargs) -> None:
    params.setdefault("MaxKeys", LIST_PAGE)


@dataclass
class PersonsChange:
    version: str | None  # the token's version the change left (None: deleted)
    wrote: set[str]  # the run folders whose commits had written the token before
    plans: dict[str, bytes]  # run folder -> its plan.json, of every plan made before


@dataclass
class Run:
    """An Airflow DAG run: its plan task's result (XCom) feeds its job and commit."""
    run_id: str
    plan_url: str | None = None
    planned: bool = False  # its plan task succeeded (plan_url None: nothing to do)
    failed: str | None = None  # the task whose last attempt failed or was killed


@dataclass
class Outcome:
    """What a step did, for the printed sequence."""
    lines: list[str] = field(default_factory=list)

    def add(self, line: str) -> None:
        self.lines.append(line)


# the group each world archives, by shape: SequenceFiles by Kafka partition, a table group
# (key_value Parquet files, each topic an Iceberg table in a SQLite catalog, maintenance a
# step), SequenceFiles laid out by the events' time (hours finalized, Asset events)
class CheckedMailings(Mailings):
    """The library's mail rules, as the real task bodies call them, each mailing checked
    against the world's model of what each incident deserves; a mail is a write a kill
    may stop before (the task dies before its announcement)."""

    def __init__(self, world: "World", *args):
        super().__init__(*args)
        self.world = world

    def planned(self, made, run_id, now):
        w = self.world
        w.faults.tick(f"the mail of {run_id}'s plan")
        made_now = made.run_id == run_id and made.created_at == now.isoformat(
            timespec="seconds")  # not re-executed unchanged: a new observation of Kafka
        if made_now:
            w._losses_real(made.anomalies, f"plan of {run_id}")
        w._mailed(lambda: super(CheckedMailings, self).planned(made, run_id, now),
                  w._anomalies_due(made.anomalies, forget_unseen=True) if made_now else set())

    def committed(self, plan, summary, late):
        w = self.world
        w.faults.tick(f"the mail of {plan.run_id}'s commit")
        w._losses_real(late, f"commit of {plan.run_id}")
        w._mailed(lambda: super(CheckedMailings, self).committed(plan, summary, late),
                  w._anomalies_due(late, forget_unseen=False),
                  tokens_left=bool(summary["tokens_left_as_found"]))
        w.failures_mailed.clear()


SHAPES = {
    "files": ("backup", "format: {kind: sequencefile, compression: none}"),
    "tables": ("tables", "format: {kind: parquet}, table: {namespace: sim, keep_snapshots: 0}"),
    "events": ("events", "layout: {kind: event_time, granularity: hour}, lateness: 5m, "
                         "parser: {kind: json, field: ts, unit: ms}, "
                         "format: {kind: sequencefile, compression: none}"),
    # an event-time table group: each message typed columns of its topic's table, or (not
    # JSON) a row of the topic's dead-letter table `<topic>_dlq`
    "parsed": ("parsed", "layout: {kind: event_time, granularity: hour}, lateness: 5m, "
                         "parser: {kind: json, field: ts, unit: ms}, format: {kind: parquet}, "
                         "table: {namespace: sim, keep_snapshots: 0}"),
    # the same with Avro values read through a Schema Registry (sim.registry): typed
    # columns, a table evolved by a new schema version, dead letters for a conflicting
    # version, an unknown schema id and a value that is no Avro
    "registry": ("parsed", sim_registry.GROUP_SPEC),
    # SequenceFiles by Kafka partition of audited producers' messages, and the audit DAG
    # (sim.audit)
    "audit": (audit.GROUP, "format: {kind: sequencefile, compression: none}"),
    # the files group with its archive and tokens on S3 (moto, in process: S3_FAKE)
    "s3": ("backup", "format: {kind: sequencefile, compression: none}"),
}
S3_FAKE = "s3://sim-archive"
PARSED_SHAPES = ("parsed", "registry")  # an event-time table group: rows and dead letters
TABLE_SHAPES = ("tables", *PARSED_SHAPES)


class World:
    def __init__(self, root: Path, shape: str = "files"):
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        self.shape = shape
        self.group, layout_of = SHAPES[shape]
        self.s3 = _S3Fake() if shape == "s3" else None
        # another deployment's group on the same archive root, token root and Iceberg
        # catalog (a namespace of its own, as the config requires), over the same topics
        neighbours = layout_of.replace("namespace: sim,", f"namespace: sim_{NEIGHBOUR},")
        self.config = local_config(root, f"{self.group}: {{{layout_of}, "
                                         "policy: {max_records: 6, max_delay: 1m}}\n"
                                         f"{NEIGHBOUR}: {{{neighbours}, "
                                         "policy: {max_records: 6, max_delay: 1m}}\n",
                                   iceberg_catalog=shape in TABLE_SHAPES,
                                   sections=audit.SECTION if shape == "audit" else "",
                                   **({"archive_root": f"{S3_FAKE}/archive",
                                       "token_root": f"{S3_FAKE}/tokens"} if self.s3 else {}))
        self.root = root
        self.faults = Faults()
        self.tables = iceberg.Tables(self.config) if shape in TABLE_SHAPES else None
        client = self.s3.client if self.s3 else None
        self.storage = SimStorage(self.faults, client)
        # what the checks and a person's edits read and write: no kill stops them
        self.plain = Storage(client)
        self.tokens = SimTokens(open_store(self.config.token_root, client), self.faults)
        self.kafka = Kafka(event_time=shape in ("events", *PARSED_SHAPES),
                           registry=shape == "registry")
        for topic, partitions in TOPICS.items():
            self.kafka.create(topic, partitions)
        self.audit = audit.AuditModel(self) if shape == "audit" else None
        if self.audit:
            self.kafka.internal[self.config.audit.topic] = [Partition()]
        self.now = START
        self.compactions = 0
        self.actions = 0  # processes so far (each an actor of the storage's calls)
        self.compaction_killed = False  # and no compaction has finished since
        self.neighbour_ran = False  # the other group on the root has archived (_neighbour)
        self.unmerged_runs = 0  # runs committed since a compaction last merged rows
        self.runs: dict[str, Run] = {}
        self.abandoned = False  # an in-flight mark was deleted by hand
        # topic -> a person's last change of its token by a command (delete, rewind,
        # accept-loss: compare-and-swap writes), which no plan made before it may undo
        self.changed_under: dict[str, PersonsChange] = {}
        self.token_copies: dict[str, list[bytes]] = {t: [] for t in TOPICS}  # (new ones too)
        # the truth the invariants are checked against
        # (topic, partition, generation) -> offsets a current row has held
        self.ever_archived: dict[tuple[str, int, int], set[int]] = {}
        # (topic, partition) -> (offset, value) of every message a current row has held:
        # an offset held still may hold another message now (an election's, archived over it)
        self.ever_messages: dict[tuple[str, int], set[tuple[int, bytes]]] = {}
        self.unarchivable: dict[tuple[str, int], set[int]] = {}  # deleted with no token line
        # offsets of archived files a person deleted (the audit world): once Kafka no
        # longer holds them either, nothing can archive them again (the audit says MISSING)
        self.destroyed: dict[tuple[str, int], set[int]] = {}
        # the mails, as the library decides them (its records on a storage no kill stops:
        # a callback's bookkeeping is not what the simulation explores), and the model of
        # what each incident deserves that they are checked against
        self.mailbox: list[Message] = []
        self.mailings = CheckedMailings(self, self.plain, self.config.archive_root, self.group,
                                        self.mailbox.append, lambda run_id: f"run {run_id}")
        # the other group's mails: its own, by the same rules, not checked against this
        # group's model
        self.neighbours_mailings = Mailings(self.plain, self.config.archive_root, NEIGHBOUR,
                                            lambda message: None, lambda run_id: f"run {run_id}")
        # runs whose commit was announced (mail and Asset events), how many times, and
        # how many of those said they replace an earlier announcement
        self.committed_runs: set[str] = set()  # runs whose commit task succeeded (own plan)
        self.announced: dict[str, int] = {}
        self.announced_again: dict[str, int] = {}
        self.open_anomalies: set[str] = set()   # anomaly keys mailed and still seen
        self.failures_mailed: dict[str, datetime] = {}  # incident -> mailed at, until a commit
        self.broken: dict[str, bytes] = {}  # topic -> its token file before a person broke it
        # a downstream loader of finalized hours, fed by the finalize tasks' Asset events:
        # (topic, hour) -> the hour's files it loaded; and the runs whose finalize has not
        # succeeded since it last failed or was killed (Airflow retries it, a person Clears)
        self.loaded: dict[tuple[str, str], frozenset[tuple[str, int]]] = {}
        self.finalize_owed: set[str] = set()

    # --- the steps ----------------------------------------------------------------------

    def close(self) -> None:
        if self.s3:
            self.s3.close()

    def step(self, step: tuple) -> Outcome:
        """Run one step; a kill (Crash) or a task's failure (ArchiveError) ends it as in
        Airflow. Any other exception is a bug the sequence found."""
        out = Outcome()
        kind, *args = step
        self.now += timedelta(minutes=1)
        wrote = len(self.storage.every_write)
        try:
            with self._table_writes_may_be_killed(), self._writes_may_be_torn(), \
                    self._acting(kind):
                getattr(self, "_" + kind)(out, *args)
        finally:
            self.faults.arm(0)
            self._keep_token_copies()
        self._groups_apart(kind, self.storage.every_write[wrote:])
        return out

    def _groups_apart(self, kind: str, wrote: list[str]) -> None:
        """Two groups on one root: a step of one writes or deletes nothing of the other's
        (every path below the root names its group: layout)."""
        other = self.group if kind == "neighbour" else NEIGHBOUR
        if stray := [url for url in wrote if f"/{other}/" in url]:
            raise Violation("groups mixed", f"a step of group "
                            f"{NEIGHBOUR if kind == 'neighbour' else self.group} ({kind}) "
                            f"wrote or deleted {stray[0]} (and {len(stray) - 1} more), a path "
                            f"of group {other} on the same root")

    def _neighbour(self, out: Outcome, task: str):
        """Another deployment's group on the same root runs a task whole (the real
        bodies, no kill): a DAG run of it (plan, archive, commit, finalize), or a table
        group's compaction or maintenance of it. Its files must stay its own (check)."""
        run_id = self.now.strftime(f"{NEIGHBOUR}__%Y-%m-%dT%H:%M:00+00:00")
        self.storage.task_begins()
        try:
            with self._in_airflow():
                if task == "compact" and self.tables is not None:
                    out.add(f"{NEIGHBOUR} compaction: {tasks.compact(NEIGHBOUR, run_id)}")
                elif task == "maintain" and self.tables is not None:
                    out.add(f"{NEIGHBOUR} maintenance: {tasks.expire_snapshots(NEIGHBOUR)}")
                elif task == "run" and (plan_url := tasks.plan(NEIGHBOUR, run_id)):
                    self._archive_plan(plan_url)
                    summary = tasks.commit(plan_url)
                    out.add(f"{NEIGHBOUR} run {run_id}: tokens {summary['tokens']}")
                    if self.config.group(NEIGHBOUR).layout.kind == "event_time":
                        tasks.finalize(NEIGHBOUR, run_id)
            self.neighbour_ran = True
        except ArchiveError as failed:  # (Kafka down, a partition without a leader)
            out.add(f"{NEIGHBOUR} {task}: failed: {type(failed).__name__}: {failed}")

    @contextmanager
    def _writes_may_be_torn(self):
        """A local write (storage._atomic_local: a temporary file, then a rename) may be
        killed in the middle of its bytes; a kill, unlike an exception, leaves what it
        wrote where it wrote it (the temporary file: no reader sees it)."""
        real_enter, real_exit = storage_module._atomic_local.__enter__, \
            storage_module._atomic_local.__exit__
        faults = self.faults

        def enter(writing):
            file = real_enter(writing)
            write = file.write

            def in_halves(data):
                half = len(data) // 2
                write(data[:half])
                faults.midway(str(writing.path))
                return write(data[half:])
            file.write = in_halves
            return file

        def leave(writing, exc_type, exc, tb):
            if exc_type is not None and issubclass(exc_type, Crash):
                writing.tmp.close()  # killed: nothing cleans up
                return False
            return real_exit(writing, exc_type, exc, tb)

        with patch.object(storage_module._atomic_local, "__enter__", enter), \
                patch.object(storage_module._atomic_local, "__exit__", leave):
            yield

    @contextmanager
    def _table_writes_may_be_killed(self):
        """pyiceberg writes through its own FileIO (manifests, metadata, deletes of
        expired files): each such write may be the one a kill stops before too."""
        if self.tables is None:
            yield
            return
        from pyiceberg.io.pyarrow import PyArrowFileIO
        from pyiceberg.utils.concurrent import ExecutorFactory

        new_output, delete = PyArrowFileIO.new_output, PyArrowFileIO.delete
        faults = self.faults

        every_write = self.storage.every_write

        def ticking_output(io, location):
            faults.tick(f"table write {location}")
            every_write.append(location)
            return new_output(io, location)

        def ticking_delete(io, location):
            faults.tick(f"table delete {location}")
            every_write.append(location)
            return delete(io, location)

        with patch.object(PyArrowFileIO, "new_output", ticking_output), \
                patch.object(PyArrowFileIO, "delete", ticking_delete), \
                patch.object(ExecutorFactory, "get_or_create", lambda: _IN_TURN):
            yield

    def _produce(self, out: Outcome, topic: str, partition: int, count: int, marker: bool,
                 late_minutes: int = 0):
        """late_minutes: the events happened that long before (an event-time group files
        them by that time, or as late once their hour is final)."""
        if p := self._partition(topic, partition):
            p.append(count, self._now_ms(), marker, late_minutes * 60_000)

    def _partition(self, topic: str, partition: int) -> Partition | None:
        """A Kafka partition a step acts on; None if its topic was deleted or never
        created (a shrunk sequence may lack the step that created it), or it has fewer."""
        parts = [] if topic in self.kafka.deleted else self.kafka.topics.get(topic, [])
        return parts[partition] if partition < len(parts) else None

    def _transaction(self, out: Outcome, topic: str, partition: int, count: int):
        """A producer's transaction of count messages, left open: the partition's last
        stable offset stays below them (and all after them) until it ends."""
        if (p := self._partition(topic, partition)) and not p.open_txn:
            p.append(count, self._now_ms(), False, transaction=True)

    def _end_transaction(self, out: Outcome, topic: str, partition: int, commit: bool):
        if p := self._partition(topic, partition):
            p.end_transaction(commit)

    def _abort(self, out: Outcome, topic: str, partition: int, count: int):
        if p := self._partition(topic, partition):
            p.abort(count)

    def _send(self, out: Outcome, source: str, topic: str, partition: int, count: int,
              dies: bool, late_minutes: int = 0):
        if self.audit:
            self.audit.send(out, source, topic, partition, count, dies, late_minutes)

    def _audit(self, out: Outcome, run_id: str, crash: int, rescan: bool):
        """The audit DAG's run, killed at its Nth write (or at its mail) or not."""
        if not self.audit:
            return
        self.faults.arm(max(crash, 0))
        try:
            self.audit.audit(out, run_id, rescan)
        except Crash as kill:
            out.add(f"audit {run_id}: killed before {kill}")
            return
        except ArchiveError as failed:  # the task failed (its mail: Airflow's callback)
            out.add(f"audit {run_id}: failed: {type(failed).__name__}: {failed}")
            return
        finally:
            self.faults.arm(0)
        self.audit.check(run_id, rescan)  # (what an audit that finished says)

    def _delete_file(self, out: Outcome, topic: str):
        if self.audit:
            self.audit.delete_file(out, topic)

    def _retention(self, out: Outcome, topic: str, partition: int, count: int):
        if not (p := self._partition(topic, partition)):
            return
        gone = p.retain_from(p.earliest + count)
        token = self._token(topic)
        if token is None or partition not in token.offsets:
            self.unarchivable.setdefault((topic, partition), set()).update(gone)

    def _compact_log(self, out: Outcome, topic: str, partition: int, count: int):
        """Log compaction mid-log: messages no reader will see again. Those not archived
        yet never will be (no one can tell them from a transaction's marker: not a loss
        to report); those archived stay in the archive, whatever a rewind reads again."""
        if not (p := self._partition(topic, partition)):
            return
        gone = p.compact(count)
        archived = self._ever_archived(topic, partition)
        self.unarchivable.setdefault((topic, partition), set()).update(
            o for o in gone if o not in archived)
        out.add(f"compacted away: {topic}/{partition} offsets {_ranges(set(gone))}")

    def _truncate(self, out: Outcome, topic: str, partition: int, count: int,
                  written: int = 0):
        """An unclean leader election cuts the partition's tail; the next messages take
        its offsets again (`written` of them at once, as producers go on writing to the
        new leader). What was archived of the tail stays in the archive (a token or an
        archive beyond Kafka's latest offset holds the topic until a person sets a new
        generation); what was not is lost with the old leader, not a loss to report."""
        if not (p := self._partition(topic, partition)):
            return
        gone = self.kafka.truncate(topic, partition, count)
        # The archive's offsets passed the new end (its token, its rows, a plan in
        # flight): the next messages there are other ones at offsets it has passed. Held
        # while it is ahead of Kafka's latest; once Kafka is written past it, nothing in
        # the offsets tells them apart (only Kafka's leader epochs would): a limitation of
        # archiving by offsets, not checked.
        token = self._token(topic)
        plan = self.plan_in_flight()
        rows = rewinds.rows_through(catalog.open_catalog(self.plain, self.config, self.group,
                                                         may_rebuild=True), topic)
        passed = max([token.offsets.get(partition, 0) if token else 0,
                      rows.get(partition, 0)] + [
            s.end for s in (plan.slices if plan else ()) if (s.topic, s.partition) == (
                topic, partition)])
        self.unarchivable.setdefault((topic, partition), set()).update(range(p.end, passed))
        out.add(f"unclean election: {topic}/{partition} cut to "
                f"{self.kafka.topics[topic][partition].end} (messages {_ranges(set(gone))})")
        if written:
            self._produce(out, topic, partition, written, False)

    def _destroyed(self, where: tuple[str, int]) -> set[int]:
        """What a person's deletion of archived files took and Kafka no longer holds."""
        p = self._partition(*where)
        return {o for o in self.destroyed.get(where, ()) if p is None or o not in p.messages}

    def _ever_archived(self, topic: str, partition: int) -> set[int]:
        return {o for (t, p, _), offsets in self.ever_archived.items() if (t, p) == (topic, partition)
                for o in offsets}

    def _pending_in(self, topic: str, partition: int) -> int:
        """How many messages partition holds now (0: none, or no such partition)."""
        parts = self.kafka.topics.get(topic, [])
        return parts[partition].end - parts[partition].earliest if partition < len(parts) else 0

    def _delete_topic(self, out: Outcome, topic: str):
        """The topic is deleted from Kafka (for good: the simulation does not create it
        again, which would start its offsets over)."""
        self.kafka.deleted.add(topic)

    def _create_topic(self, out: Outcome, topic: str, partitions: int):
        """A new topic the group selects (found by the next plan); `<topic>_dlq` is named
        like another topic's dead-letter table."""
        if topic not in self.kafka.topics:
            self.kafka.create(topic, partitions)
            self.token_copies[topic] = []

    def _add_partition(self, out: Outcome, topic: str):
        if topic in self.kafka.topics and topic not in self.kafka.deleted:
            self.kafka.topics[topic].append(Partition())

    def _time(self, out: Outcome, minutes: int):
        self.now += timedelta(minutes=minutes)

    def _break_token(self, out: Outcome, topic: str):
        """A person's edit leaves a line of the token file malformed (an offset that is no
        number): the topic is held, mailed, until the file is fixed."""
        url = self.tokens.url(self.group, topic)
        if topic in self.broken or (found := self.plain.get_or_none(url)) is None:
            return
        self.broken[topic] = found
        self.plain.put_bytes(url, found + f"{self.config.bootstrap_servers} {topic} 0 "
                             "twelve\n".encode())

    def _fix_token(self, out: Outcome, topic: str):
        """The person puts the file back as it was before their edit (what the mail says)."""
        if (original := self.broken.pop(topic, None)) is not None:
            self.plain.put_bytes(self.tokens.url(self.group, topic), original)

    def _token(self, topic: str) -> Token | None:
        """The topic's token as the invariants read it: a file broken by hand claims what
        it claimed before the edit (nothing once a commit or a person replaced it)."""
        try:
            token = self.tokens.read(self.group, topic).token
        except MalformedTokenError:
            original = self.broken.get(topic)
            return None if original is None else self._parsed_copy(original, topic)
        self.broken.pop(topic, None)  # replaced since: no longer broken
        return token

    def _parsed_copy(self, data: bytes, topic: str) -> Token | None:
        try:
            return parse(data.decode(), path="copy", group=self.group, topic=topic)
        except MalformedTokenError:
            return None

    def _offline(self, out: Outcome, topic: str, partition: int, offline: bool):
        """A partition loses its leader (its only in-sync replica's broker down), or gets
        one again: every look-up or read of it fails, transient, until then; the group's
        other topics go on."""
        (self.kafka.offline.add if offline else self.kafka.offline.discard)((topic, partition))

    def _kafka_down(self, out: Outcome, down: bool):
        """The brokers become unreachable (or come back): every task and command that asks
        Kafka fails, transient, run after run."""
        self.kafka.down = down

    def _run(self, out: Outcome, run_id: str, crash_plan: int, crash_job: int,
             crash_commit: int):
        """A new DAG run: plan, archive, commit, each task killed at its Nth write or not;
        a task that fails or is killed ends the run there (its retries are later steps)."""
        if run_id in self.runs:
            return
        self.runs[run_id] = Run(run_id)
        for task, crash in (("plan", crash_plan), ("job", crash_job), ("commit", crash_commit)):
            if not self._task(out, run_id, task, crash):
                break
        else:
            self._finalize(out, run_id, 0)  # (its kills: a finalize step of its own)
            self.unmerged_runs += 1
        if self.tables is not None:  # a table group's compact task runs after all others
            self._compaction_task(out, run_id, 0)

    @contextmanager
    def _acting(self, name: str):
        """The storage calls of the block are one process's (a task, a person's command,
        a racing body), for the lease invariant."""
        self.actions += 1
        self.storage.actors.append(f"{name} (#{self.actions})")
        try:
            yield
        finally:
            self.storage.actors.pop()

    def _task(self, out: Outcome, run_id: str, task: str, crash: int,
              switch_at: int = 0, other=None, torn_at: int = 0, io_at: int = 0,
              io_kind: str = "") -> bool:
        """One task of a run executed (again: a retry, a Clear); whether it succeeded.
        other(what): a body that runs whole at the task's write #switch_at."""
        run = self.runs.get(run_id)
        if run is None or (task != "plan" and run.plan_url is None):
            return False
        self.launch_fails = task == "job" and crash == LAUNCH_FAILS
        self.faults.arm(max(crash, 0), switch_at, other, torn_at, io_at, io_kind)
        try:
            with self._acting(f"{task} of {run_id}"):
                result = getattr(self, "task_" + task)(run)
        except Crash as kill:
            out.add(f"{run_id} {task}: killed before {kill}")
            run.failed = task
            return False
        except (ArchiveError, LaunchFailed) as failed:
            self.faults.arm(0)
            run.failed = task
            out.add(f"{run_id} {task}: failed: {type(failed).__name__}: {failed}")
            if run_id in self.committed_runs and task in ("plan", "commit") \
                    and isinstance(failed, TerminalError):
                raise Violation("committed run failed again", f"run {run_id} committed, and its "
                                f"{task} task executed again failed: {failed}") from None
            self._failure_mailed(run, task, failed)
            return False
        finally:
            self.faults.arm(0)
        out.add(f"{run_id} {task}: {result}")
        if run.failed == task:
            run.failed = None
        return True

    def _race(self, out: Outcome, run_id: str, task: str, switch_at: int, other: str,
              topic: str = "t", rewound: bool = False, killed_at: int = 0):
        """Two live tasks: a task of a run (plan: of a new run when there is none by that
        id) and, at its write #switch_at, another deployment's compaction (an hour later:
        rows to merge), maintenance or a person's rewind to 0 or accept-loss on topic, run
        whole before that write goes on (a switch point of the two processes), killed at
        its own write #killed_at if given; or Kafka's retention deleting a partition's
        messages. The task may be a compaction too (then the
        other sees its lease as a dead holder's: one that stalled past its expiry). rewound:
        a person rewound the partition of topic with the most archived rows to Kafka's
        earliest offset just before the task began."""
        self.runs.setdefault(run_id, Run(run_id))
        token = rewound and topic in self.kafka.topics and self._token(topic)
        if token and token.offsets:  # the line of the most rows, as far back as Kafka holds
            try:
                held = Counter(r["partition"] for r in catalog.open_catalog(
                    self.plain, self.config, self.group).rows(topic))
            except catalog.CatalogUnreadable:
                held = Counter()
            partition = max(sorted(token.offsets), key=lambda p: held[p])
            self._rewind(out, topic, partition, self.kafka.topics[topic][partition].earliest)
        bodies = {"compact": lambda meanwhile: self._compact(meanwhile, 1, killed_at),
                  "maintain": lambda meanwhile: self._maintain(meanwhile, killed_at),
                  "rewind": lambda meanwhile: self._rewind(meanwhile, topic, 0, 0),
                  "accept_loss": lambda meanwhile: self._accept_loss(meanwhile, topic),
                  # Kafka's retention runs beside everything: here it deletes partition
                  # 0's every message so far (what a plan saw pending is gone by the job)
                  "retention": lambda meanwhile: self._retention(
                      meanwhile, topic, 0, self._pending_in(topic, 0))}

        def meanwhile(what: str) -> None:
            aside = Outcome()
            with self._acting(f"racing {other}"):
                bodies[other](aside)
            out.lines += [f"meanwhile, before {what}: {line}" for line in aside.lines] or [
                f"meanwhile, before {what}: {other} (nothing to say)"]

        if task == "compact":
            if self.tables is not None:
                self._compaction_task(out, run_id, 0, switch_at, meanwhile)
        else:
            self._task(out, run_id, task, 0, switch_at, meanwhile)

    def _torn(self, out: Outcome, run_id: str, task: str, torn_at: int):
        """A task of a run (plan: of a new run when there is none by that id) killed in
        the middle of its Nth local write (half of its bytes written)."""
        self.runs.setdefault(run_id, Run(run_id))
        self._task(out, run_id, task, 0, torn_at=torn_at)

    def _storage_fault(self, out: Outcome, run_id: str, task: str, io_at: int, kind: str):
        """A task of a run (plan: of a new run when there is none by that id) whose Nth
        storage call fails (Faults.failing): a read, list or write refused, or a write
        that lands and is reported failed."""
        self.runs.setdefault(run_id, Run(run_id))
        self._task(out, run_id, task, 0, io_at=io_at, io_kind=kind)

    def _clear_run(self, out: Outcome, run_id: str, crash: int):
        """Airflow's Clear of a whole run: every task again, the plan's result replaced."""
        if run_id not in self.runs:
            return
        self.runs[run_id] = Run(run_id)
        for task in ("plan", "job", "commit"):
            if not self._task(out, run_id, task, crash if task == "commit" else 0):
                return

    def _delete_token(self, out: Outcome, topic: str):
        if self._token(topic) is None:
            return  # nothing to delete, nothing a commit could undo
        self._persons_change(topic, lambda: self.tokens.delete(self.group, topic))

    def _delete_line(self, out: Outcome, topic: str, partition: int):
        if topic in self.broken:
            return  # a person fixes a broken file first (fix_token)
        read = self.tokens.read(self.group, topic)
        if read.token is None or partition not in read.token.offsets:
            return
        offsets = {p: o for p, o in read.token.offsets.items() if p != partition}
        self._write_token_file(topic, render(Token(**{**read.token.__dict__, "offsets": offsets}))
                               .encode())

    def _edit_line(self, out: Outcome, topic: str, partition: int, to_offset: int):
        """A person edits a partition's line of the token file down to an offset (a rewind
        by hand, without the rewind command's checks)."""
        if topic in self.broken:
            return
        read = self.tokens.read(self.group, topic)
        if read.token is None or partition not in read.token.offsets:
            return
        offsets = {**read.token.offsets,
                   partition: min(to_offset, read.token.offsets[partition])}
        self._write_token_file(topic, render(Token(**{**read.token.__dict__, "offsets": offsets}))
                               .encode())

    def _restore_token(self, out: Outcome, topic: str, back: int):
        """A person puts back an older copy of the token file."""
        copies = self.token_copies[topic]
        if back < len(copies):
            self._write_token_file(topic, copies[-1 - back])
            # a copy a commit wrote that never reached the catalog (cut short, its mark
            # deleted) claims what no row holds: the next plan repairs that, as it does
            # after the mark's delete itself
            token = self._token(topic)
            run_id = token and token.run_id
            if run_id and not runs.is_final(runs.stored_outcome(
                    self.plain, self.config.archive_root, self.group, run_id)):
                self.abandoned = True

    def _persons_change(self, topic: str, change) -> None:
        """A person's command changes the topic's token: no plan made before it writes the
        token after it unless it planned from what the change left (a commit's
        compare-and-swap loses to the change), and no run that had written the token
        writes it again from the same plan. (A plan made from no token, which never wrote
        it, may commit after a delete: it archives the topic from start_from, as asked.)"""
        url = self.tokens.url(self.group, topic)
        before = self.plain.get_or_none(url)
        copies = self.token_copies[topic] + ([before] if before is not None else [])
        wrote = {layout.run_folder_name(t.run_id) for t in (self._parsed_copy(c, topic) for c in copies)
                 if t is not None and t.run_id}
        runs = layout.runs_dir(self.config.archive_root, self.group) + "/"
        plans = {found[len(runs):].split("/")[0]: found for found, _ in self.plain.list(runs)
                 if found.endswith("/plan.json") and found[len(runs):].count("/") == 1}
        change()
        after, version = self.plain.get_versioned(url)
        if after != before:
            self.changed_under[topic] = PersonsChange(
                version, wrote, {folder: plan for folder, plan_url in plans.items()
                                 if (plan := self.plain.get_or_none(plan_url)) is not None})

    def _rewind(self, out: Outcome, topic: str, partition: int, to_offset: int):
        try:
            self._persons_change(topic, lambda: out.lines.extend(rewinds.rewind(
                self.config, self.tokens, self.kafka.consumer(), self.group, topic, partition,
                to_offset, storage=self.storage)))
        except ArchiveError as refused:
            out.add(f"rewind refused: {refused}")

    def _rewind_time(self, out: Outcome, topic: str, partition: int | None, minutes: int):
        """kafka-archive rewind --to-time: to the first message at or after `minutes`
        before now (every partition of the token, or one)."""
        try:
            self._persons_change(topic, lambda: out.lines.extend(rewinds.rewind(
                self.config, self.tokens, self.kafka.consumer(), self.group, topic, partition,
                None, self._now_ms() - minutes * 60_000, storage=self.storage)))
        except ArchiveError as refused:
            out.add(f"rewind refused: {refused}")

    def _accept_loss(self, out: Outcome, topic: str):
        try:
            accepted = []
            self._persons_change(topic, lambda: accepted.extend(losses.accept(
                self.config, self.tokens, self.kafka.consumer(), self.storage, self.group,
                topic, "simulated", "sim", self.now.isoformat(timespec="seconds"))))
            for loss in accepted:
                out.add(f"accepted {loss.describe()}")
            self._losses_real(accepted, "accept-loss")
        except ArchiveError as refused:
            out.add(f"accept-loss refused: {refused}")

    def _rebuild(self, out: Outcome, crash: int):
        """kafka-archive catalog --rebuild: the catalog again from the run folders."""
        self.faults.arm(crash)
        try:
            catalog.rebuild(self.storage, self.config, self.group)
        except Crash as kill:
            out.add(f"rebuild: killed before {kill}")
        except ArchiveError as failed:
            out.add(f"rebuild: failed: {type(failed).__name__}: {failed}")

    def _damage_catalog(self, out: Outcome, which: int):
        """A snapshot or row chunk of the catalog damaged (a bad copy, a partial write)."""
        folder = catalog.store.folder(self.config.archive_root, self.group) + "/"
        damaged = [url for url, _ in self.plain.list(folder)
                   if {"snapshots", "rows"} & set(url[len(folder):].split("/"))]
        if damaged:
            victim = damaged[which % len(damaged)]
            self.plain.put_bytes(victim, b"not json")
            out.add(f"damaged {victim[len(folder):]}")

    def _maintain(self, out: Outcome, crash: int):
        """A table group's maintenance task (airflow.tasks.expire_snapshots), a day
        later: snapshots older than the group's keep_snapshots expire (their replaced
        files deleted), and files of runs that never committed are swept."""
        if self.tables is None:
            return
        self.now += timedelta(days=1)
        self.faults.arm(crash)
        try:
            with self._in_airflow():
                done = tasks.expire_snapshots(self.group)
            for table, figures in sorted(done.items()):
                out.add(f"maintenance of {table}: {figures}")
        except Crash as kill:
            out.add(f"maintenance: killed before {kill}")
        except ArchiveError as failed:
            out.add(f"maintenance: failed: {type(failed).__name__}: {failed}")

    def _compact(self, out: Outcome, hours: int, crash: int):
        """A table group's compaction task (airflow.tasks.compact), `hours` later: rows
        planned more than an hour before are merged. A kill ends its process: its lease
        names one that is gone (a pid no process has), as after a real kill."""
        if self.tables is None:
            return
        self.now += timedelta(hours=hours)
        self.compactions += 1
        self._compaction_task(out, f"sim{self.compactions}", crash)

    def _compaction_setting(self, out: Outcome, after):
        """A person sets the table group's `compact_after`: null (compaction off: the
        natural answer to a compact task killed for memory), 0 (each run's compact task
        merges every run before it) or the default 1h (True/False: 1h/null, as kept
        sequences say); the next tasks load the config as changed."""
        if self.tables is None:
            return
        if isinstance(after, bool):  # (0 == False: not a dict's key)
            after = 3600 if after else None
        group = self.config.group(self.group)
        self._reconfigured(replace(group, table=replace(group.table, compact_after_s=after)))
        out.add(f"compact_after: {'null' if after is None else after}")

    def _setting(self, out: Outcome, name: str, value):
        """A person changes a group setting between runs: `on_retention_gap` (fail or
        skip: a retention gap held for a person, or recorded as a loss and skipped), the
        policy's `min_records` (fewer pending wait until the oldest is max_delay old),
        `start_from` (latest: a partition the archive never held starts at Kafka's end),
        a table group's `keep_snapshots` or a SequenceFile group's `compression`."""
        if name == "generation":  # new file names from the next plan on (DESIGN)
            self.config = replace(self.config, generation=self.config.generation + 1)
            out.add(f"generation: {self.config.generation}")
            return
        group = self.config.group(self.group)
        if name == "min_records":
            group = replace(group, policy=replace(group.policy, min_records=value))
        elif name == "keep_snapshots":  # seconds a replaced snapshot stays readable
            group = replace(group, table=replace(group.table, keep_snapshots_s=value))
        elif name == "compression":  # the files a rewind writes again differ in bytes
            group = replace(group, format=replace(group.format, compression=value))
        else:
            group = replace(group, **{name: value})
        self._reconfigured(group)
        out.add(f"{name}: {value}")

    def _reconfigured(self, group) -> None:
        """The group's config as changed: the next tasks load it so."""
        self.config = replace(self.config, groups={**self.config.groups, self.group: group})
        if self.tables is not None:
            self.tables.config = self.config

    def _compaction_task(self, out: Outcome, run_id: str, crash: int, switch_at: int = 0,
                         other=None):
        """The compact task of a DAG run (run_id; it runs whatever its run's other tasks
        did), or of the step above; other(what): a body run whole at its write #switch_at."""
        self.faults.arm(crash, switch_at, other)
        try:
            self.storage.task_begins()
            with patch.object(lease, "this_process", lambda: {"host": socket.gethostname(),
                                                              "pid": DEAD_PID}), \
                    self._in_airflow(), self._acting(f"compaction of {run_id}"):
                done = tasks.compact(self.group, run_id)
            out.add(f"compaction: {done}")
            if "skipped" not in done:
                self.compaction_killed = False
            if done.get("rows"):
                self.unmerged_runs = 0
            folder = layout.run_file(self.config.archive_root, self.group, done["compaction"],
                                     "")
            if done.get("rows") == 0 and (wrote := [u for u in self.storage.writes
                                                    if u.startswith(folder)]):
                raise Violation("cost", f"a compaction that merged nothing wrote {wrote[0]} "
                                f"(and {len(wrote) - 1} more): a folder a year of such tasks "
                                "would leave tens of thousands of")
        except Crash as kill:
            out.add(f"compaction: killed before {kill}")
            self.compaction_killed = True  # a person may answer with compaction off
        except ArchiveError as failed:
            out.add(f"compaction: failed: {type(failed).__name__}: {failed}")

    def _remove_inflight(self, out: Outcome):
        """A person deletes `_inflight.json` by hand."""
        if self.in_flight():
            self.plain.delete(layout.inflight_marker(self.config.archive_root, self.group))
            self.abandoned = True

    def _finalize(self, out: Outcome, run_id: str, crash: int):
        """An event-time group's finalize task of a run (after its commit, or again: a
        retry, a Clear): `_SUCCESS` into the hours that can receive no more data, an Asset
        event per hour for the downstream loader, added only when the task succeeds."""
        if self.shape != "events" or run_id not in self.runs:
            return
        self.faults.arm(crash)
        try:
            finalized = self.task_finalize(run_id)
        except Crash as kill:
            out.add(f"{run_id} finalize: killed before {kill}")
            self.finalize_owed.add(run_id)
            return
        except ArchiveError as failed:
            out.add(f"{run_id} finalize: failed: {type(failed).__name__}: {failed}")
            self.finalize_owed.add(run_id)
            return
        finally:
            self.faults.arm(0)
        self.finalize_owed.discard(run_id)
        hours = [(topic, path, path in finalized["again"].get(topic, ()))
                 for topic, paths in sorted(finalized["paths"].items()) for path in paths]
        out.add(f"{run_id} finalize: " + (", ".join(
            f"{t} {p}" + (" (replaces)" if again else "") for t, p, again in hours) or "nothing"))
        for topic, path, replaces in hours:
            self._loader_reads(topic, path, replaces)

    def _loader_reads(self, topic: str, path: str, replaces: bool) -> None:
        """The downstream loader, on an hour's event: adds the hour, or replaces what it
        loaded of it when the event says so."""
        if (topic, path) in self.loaded and not replaces:
            raise Violation("event", f"hour {topic} {path} announced again as new: a loader "
                            "adds it a second time (the event does not say it replaces the "
                            "one before)")
        self.loaded[topic, path] = self._hour_files(topic, path)

    def _hour_files(self, topic: str, path: str) -> frozenset[tuple[str, int]]:
        """The current files of an hour and their sizes, as the catalog lists them (a
        loader that loads by name and ETag sees a file of the same name changed)."""
        folder = layout.time_partition_dir(self.config.archive_root, self.group, topic, path)
        cat = catalog.open_catalog(self.plain, self.config, self.group, may_rebuild=True)
        return frozenset((f["url"], f["bytes"]) for row in cat.rows() if row["topic"] == topic
                         for f in row_files(row) if f["url"].startswith(folder + "/"))

    # --- Airflow's task bodies (airflow.tasks, Airflow's connections patched) -----------

    @contextmanager
    def _kafka_without_faults(self):
        """Kafka reachable, every partition led: for the checks' own reads, as self.plain
        is the storage's."""
        down, offline = self.kafka.down, self.kafka.offline
        self.kafka.down, self.kafka.offline = False, set()
        try:
            yield
        finally:
            self.kafka.down, self.kafka.offline = down, offline

    @contextmanager
    def _in_airflow(self):
        """The real task bodies (airflow.tasks) see the simulation's storage, tokens,
        Kafka, tables, clock and mail rules where they would ask Airflow's connections.
        (The conditional-write probe and the lag mirror are the real services' business:
        their own tests.)"""
        with patch.multiple(connections, load_config=lambda path=None: self.config,
                            storage=lambda conn_id=None: self.storage,
                            token_store=lambda cfg: self.tokens,
                            iceberg_tables=lambda cfg: self.tables), \
                patch.object(brokers, "consumer", lambda cfg, bootstrap=None, isolation=None:
                             self.kafka.consumer(isolation)), \
                patch.object(runs, "now_utc", lambda: self.now), \
                patch.object(alerting, "mailings", lambda cfg, group, context=None:
                             self.mailings if group == self.group else self.neighbours_mailings), \
                patch.object(preflight, "conditional_writes", lambda *args: None), \
                patch.object(mirror, "mirror", lambda *args: None), \
                patch.object(parquet, "concatenate", _bounded_concatenate), \
                patch.object(spark, "local_dir", lambda: str(self.root)), \
                self._snapshots_on_the_clock():
            yield

    @contextmanager
    def _snapshots_on_the_clock(self):
        """A table snapshot's time is the simulated clock's: keep_snapshots is judged by it."""
        if self.tables is None:
            yield
            return
        from pyiceberg.table import snapshots

        with patch.object(snapshots, "time", SimpleNamespace(time=lambda: self.now.timestamp())):
            yield

    def task_plan(self, run: Run) -> str:
        self.storage.task_begins()
        self._latest_skips()
        try:
            with self._in_airflow():
                plan_url = tasks.plan(self.group, run.run_id)
        except TransientError as failed:
            served = set(self.kafka.topics) - self.kafka.deleted - {t for t, _ in self.kafka.offline}
            if "no leader" in str(failed) and not self.kafka.down and served:
                raise Violation("stalled", f"one partition without a leader failed the plan "
                                f"of the whole group: {failed}") from None
            raise
        self._listed_once("plan of " + run.run_id)
        run.planned = True
        self.abandoned = self.abandoned and not self.in_flight()
        run.plan_url = plan_url
        if plan_url is None:
            return f"plan {run.run_id}: nothing"
        made = Plan.from_json(self.plain.get_bytes(plan_url))
        return f"plan {made.run_id}: " + ", ".join(
            f"{s.topic}/{s.partition} [{s.start}, {s.end})" for s in made.slices)

    def _latest_skips(self) -> None:
        """`start_from: latest`: a partition the archive never held starts at Kafka's
        latest offset, so what is below it now is never asked of the archive. One it holds
        (a token or a line deleted by a person) goes on from its archive's end: a deleted
        line does not skip what the archive has not reached yet."""
        if self.config.group(self.group).start_from != "latest":
            return
        cat = catalog.open_catalog(self.plain, self.config, self.group, may_rebuild=True)
        for topic, parts in sorted(self.kafka.topics.items()):
            token = self._token(topic)
            held = rewinds.rows_through(cat, topic)
            for partition, p in enumerate(parts):
                if (token is None or partition not in token.offsets) and not (
                        held.get(partition) or self._ever_archived(topic, partition)):
                    self.unarchivable.setdefault((topic, partition), set()).update(
                        o for o in p.produced if o < p.stable)

    def task_job(self, run: Run) -> str:
        """ArchiveOperator: the job launched (spark-submit), its driver recording a
        classified failure before it exits non-zero, or the launch failing before the job
        starts (LAUNCH_FAILS)."""
        done = []

        def spark_submit():
            if self.launch_fails:
                raise LaunchFailed("spark-submit exited 1 before the job started")
            try:
                done.append(self._archive_plan(run.plan_url))
            except ArchiveError as failed:  # job.main: recorded for the operator
                job.record_failure(self.storage, run.plan_url, failed)
                raise LaunchFailed("spark-submit exited 1") from failed
        job.launched(self.storage, run.plan_url, spark_submit, LaunchFailed)
        return f"archived {sum(r['records'] for r in done[0]['slices'])} messages"

    def _archive_plan(self, plan_url: str) -> dict:
        """The job's driver and slice bodies, in process, over the simulation's Kafka."""
        plan = Plan.from_json(self.storage.get_bytes(plan_url))
        task = job.ArchiveTask(self.config, plan)

        def archived(plan, slices):
            writer = job.ArchiveTask(self.config, plan) if plan.columns else task
            return [writer.archive(s, writer.messages(self.kafka.range_consumer(), s,
                                                      self.storage), self.storage)
                    for s in slices]
        return job.archive_plan(self.config, plan_url, self.storage, self.kafka.consumer,
                                archived)

    def task_commit(self, run: Run) -> str:
        """The commit task as the DAG runs it: airflow.tasks.commit, then the Asset events
        its summary says to add (recorded here as announcements). Once the task succeeds,
        its run was announced: a commit whose task died after the protocol finished is
        announced by its retry (flagged as replacing), never not at all."""
        with self._in_airflow():
            summary = tasks.commit(run.plan_url)
        run_id = summary["run_id"]
        # (the simulation's own reads go past the task's storage faults: self.plain)
        if inflight.holding(self.plain, self.config.archive_root, self.group) == run_id:
            raise Violation("mark left", f"run {run_id}'s commit task succeeded, but the "
                            "in-flight mark still names it: no later run can plan")
        if run_id == run.run_id:
            self.committed_runs.add(run_id)
        if not summary.get("repeated"):
            self._check_every_slice_decided(run.plan_url, summary)
        if summary["announce"]:
            self.announced[run_id] = self.announced.get(run_id, 0) + 1
            if summary["announce"] == "again":
                self.announced_again[run_id] = self.announced_again.get(run_id, 0) + 1
        if not self.announced.get(run_id):
            raise Violation("unannounced", f"run {run_id}'s commit task succeeded, but no "
                            "attempt announced its commit (mail, Asset events)")
        if self.announced[run_id] - self.announced_again.get(run_id, 0) > 1:
            raise Violation("announced twice", f"run {run_id}'s commit was announced as new "
                            f"{self.announced[run_id]} times")
        return f"committed {run_id}: tokens {summary['tokens']}" + (
            f", left as found {sorted(summary['tokens_left_as_found'])}"
            if summary["tokens_left_as_found"] else "")

    def _check_every_slice_decided(self, plan_url: str, summary: dict) -> None:
        """A commit decides every partition its plan planned: the token it writes has the
        partition's line, at or past the slice's start, whatever the job met (a head lost
        to retention meanwhile included); else the next run starts the partition from
        start_from again (with `latest`, past messages never archived). Not a topic Kafka
        deleted meanwhile, nor a token a person changed since the plan (left as found)."""
        plan = Plan.from_json(self.plain.get_bytes(plan_url))
        made = manifests.read(self.plain, self.config.archive_root, self.group, plan.run_id)
        vanished = {(t, p) for t, p in made.get("vanished", ())}
        for s in plan.slices:
            if s.topic in summary["tokens_left_as_found"] or (s.topic, s.partition) in vanished:
                continue
            line = summary["tokens"].get(s.topic, {}).get(str(s.partition))
            if line is None or line < s.start:
                raise Violation("undecided", f"run {plan.run_id}'s commit wrote token "
                                f"{s.topic} without deciding partition {s.partition} (slice "
                                f"[{s.start}, {s.end}), line {line}): its next run starts "
                                "it from start_from again")

    def task_finalize(self, run_id: str) -> dict:
        with self._in_airflow():
            return tasks.finalize(self.group, run_id)

    # --- helpers ------------------------------------------------------------------------

    def _now_ms(self) -> int:
        return int(self.now.timestamp() * 1000)

    def _write_token_file(self, topic: str, data: bytes) -> None:
        self.changed_under.pop(topic, None)  # the person's newer change (by hand)
        self.broken.pop(topic, None)
        self.plain.put_bytes(self.tokens.url(self.group, topic), data)

    def _keep_token_copies(self) -> None:
        for topic, copies in self.token_copies.items():
            found = self.plain.get_or_none(self.tokens.url(self.group, topic))
            if (found is not None and (not copies or copies[-1] != found)
                    and self._parsed_copy(found, topic) is not None):
                copies.append(found)  # (a copy a person broke is not kept)

    def _plan_url(self, run_folder: str) -> str:
        return storage_join(layout.runs_dir(self.config.archive_root, self.group), run_folder,
                            "plan.json")

    def plan_in_flight(self) -> Plan | None:
        return inflight.plan(self.plain, self.config.archive_root, self.group)

    def compacting(self) -> bool:
        return inflight.compacting(self.storage, self.config.archive_root, self.group) is not None

    def in_flight(self) -> bool:
        return inflight.holding(self.storage, self.config.archive_root, self.group) is not None

    def stale_jobs(self) -> list[str]:
        """Runs whose job failed last, while another run's plan is in flight (theirs was
        given up): a retry of their job fails again, naming the plan in flight."""
        holder = inflight.holding(self.storage, self.config.archive_root, self.group)
        return [] if holder is None else sorted(
            run_id for run_id, run in self.runs.items() if run.failed == "job"
            and run.plan_url and run_id != holder)

    # --- the mails, against a model of what each incident deserves ----------------------

    def _anomalies_due(self, anomalies, forget_unseen: bool) -> set[str]:
        """The anomalies a mail is due for: those not open (mailed and seen since). A plan
        sees every open one, so what it no longer sees is over; a commit sees its own."""
        keys = {a.key() for a in anomalies}
        due = keys - self.open_anomalies
        self.open_anomalies = keys if forget_unseen else self.open_anomalies | keys
        return due

    def _mailed(self, send, anomalies_due: set[str], tokens_left: bool = False) -> None:
        """Run what sends the mails (faults disarmed: a callback's bookkeeping); the
        anomalies they are about must be exactly the ones due, each once."""
        armed, torn = self.faults.crash_at, self.faults.torn_at
        self.faults.crash_at = self.faults.torn_at = 0
        sent = len(self.mailbox)
        try:
            send()
        finally:
            self.faults.crash_at, self.faults.torn_at = armed, torn
        about = [k for m in self.mailbox[sent:] if "changed by hand" not in m.subject
                 for k in m.about]
        if sorted(about) != sorted(anomalies_due):
            raise Violation("mail", f"anomalies mailed {sorted(about)}, due {sorted(anomalies_due)}"
                            " (each once, and again when it comes back after a plan without it)")
        if tokens_left != any("changed by hand" in m.subject for m in self.mailbox[sent:]):
            raise Violation("mail", "tokens left as found " + ("not mailed" if tokens_left
                                                               else "mailed for none"))

    def _failure_mailed(self, run: Run, task: str, error: BaseException) -> None:
        """on_task_failure: a failed task's mail, once per incident (what failed and why,
        whichever runs meet it) until a run commits, at most daily after that."""
        if isinstance(error, HeldTopicsError):  # its anomalies were mailed when planned
            return
        text = f"{type(error).__name__}: {error}"
        incident = f"{task} {type(error).__name__} {text}"
        plan_run = None
        if run.plan_url and (stored := self.plain.get_or_none(run.plan_url)) is not None:
            plan_run = Plan.from_json(stored).run_id
        for name in sorted(self.runs, key=len, reverse=True):  # no run id in an incident
            incident = incident.replace(name, "<run>").replace(layout.run_folder_name(name),
                                                               "<run>")
        last = self.failures_mailed.get(incident)
        due = last is None or self.now - last >= timedelta(days=1)
        sent = len(self.mailbox)
        self.mailings.task_failed(task, (run.run_id, plan_run), type(error).__name__, text,
                                  self.now.timestamp(),
                                  lambda since: Message(f"{task} failed in run {run.run_id}",
                                                        text))
        if due != (len(self.mailbox) > sent):
            raise Violation("mail", f"{task} of {run.run_id} failed ({text}): "
                            + ("not mailed, though no mail of this failure since the last "
                               "commit" if due else "mailed again, though mailed at "
                               f"{last:%H:%M} and no run committed since"))
        if due:
            self.failures_mailed[incident] = self.now
        if self.launch_fails and task == "job" and not isinstance(error, LaunchFailed):
            raise Violation("wrong cause", f"{run.run_id}'s job launch failed before the job "
                            f"started, but the task failed with {text} (an earlier attempt's?)")

    # --- the invariants -----------------------------------------------------------------

    def _listed_once(self, task: str) -> None:
        """Cost: a task lists a data folder of the group again only after writing in it (a
        rewind of a topic's partitions listed an event-time topic's whole tree once per
        partition: the same answer, asked 8 times)."""
        tree = storage_join(self.config.archive_root, self.group) + "/"
        again = [(where, n) for where, n in self.storage.relisted.items()
                 if where[0].startswith(tree)]  # (not the catalog's log: others append)
        if again:
            (folder, after), n = again[0]
            raise Violation("cost", f"the {task} listed {folder}"
                            + (f" after {after}" if after else "")
                            + f" {n + 1} times with nothing written there between")

    def _losses_real(self, anomalies, by: str) -> None:
        """A loss reported (mailed, or accepted by `on_retention_gap: skip`) is real: its
        offsets are gone from Kafka and in no current row of the archive. Otherwise
        on-call is told to accept a loss that did not happen."""
        reported = [a for a in anomalies if getattr(a, "kind", "retention_gap") == "retention_gap"]
        if not reported:
            return
        rows = catalog.open_catalog(self.plain, self.config, self.group,
                                    may_rebuild=True).rows()
        for a in reported:
            p = self.kafka.topics.get(a.topic, [])
            kafka = p[a.partition] if a.partition < len(p) else None
            said = set(range(a.lost_from, a.lost_to))
            in_kafka = {o for o in said if kafka is not None and o in kafka.messages}
            archived = {o for row in rows if (row["topic"], row["partition"]) == (a.topic, a.partition)
                        and row["_generation"] == self.config.generation
                        for o in range(row["start"], row["end"])} & said
            if in_kafka or archived:
                raise Violation("false loss", f"{by} reports {a.topic}/{a.partition} "
                                f"[{a.lost_from}, {a.lost_to}) lost to retention, but offsets "
                                + (f"{_ranges(archived)} are in the archive" if archived else
                                   f"{_ranges(in_kafka)} are still in Kafka"))

    def _neighbours_files_kept(self) -> None:
        """Every file the other group's catalog names is there, whatever this group's
        tasks, compactions, maintenance and rewinds did on the same root."""
        if not self.neighbour_ran or inflight.holding(self.plain, self.config.archive_root,
                                                      NEIGHBOUR) is not None:
            return
        for row in catalog.open_catalog(self.plain, self.config, NEIGHBOUR).rows():
            if gone := [f["url"] for f in row_files(row) if self.plain.size(f["url"]) is None]:
                raise Violation("groups mixed", f"{gone[0]}, a current file of group "
                                f"{NEIGHBOUR} on the same root, is gone")

    def check(self, final: bool = False) -> None:
        """Invariants 1-3 of issue 41 on what the catalog, the files and the tokens say;
        a lease removed only by its holder (issue 56), at any time."""
        if self.storage.lease_violations:
            raise Violation("lease", self.storage.lease_violations[0] + ": a lease is "
                            "released only by its holder (one whose own expired and was "
                            "taken over leaves its successor's alone)")
        self._neighbours_files_kept()
        try:
            cat = catalog.open_catalog(self.plain, self.config, self.group)
            rows = cat.rows()
        except catalog.CatalogUnreadable:  # damaged, or a commit killed before the first
            # entry: as designed, a reader fails and the next writer rebuilds it; so does
            # the check, as that writer
            cat = catalog.open_catalog(self.plain, self.config, self.group, may_rebuild=True)
            rows = cat.rows()
        # while a plan is in flight (or was abandoned: its mark deleted by hand, until the
        # next plan), its files may be moved aside and its tokens ahead of the catalog
        # and while a compaction is under way (its lease held: a killed one's tables may
        # be ahead of the catalog until the next compaction or plan finishes it)
        quiet = final or not (self.in_flight() or self.abandoned or self.compacting())
        # (topic, partition, generation) -> offsets: generations are archives side by side
        held_now: dict[tuple[str, int, int], set[int]] = {}
        # (topic, partition) -> (offset, value) of the messages the current rows' files hold
        # (not a parsed table's: its rows keep fields), and the offsets of rows left unread
        messages_now: dict[tuple[str, int], set[tuple[int, bytes]]] = {}
        unread: dict[tuple[str, int], set[int]] = {}
        for row in rows:
            where = (row["topic"], row["partition"])
            claimed = set(range(row["start"], row["end"])) - {
                o for a, b in row.get("gaps", ()) for o in range(a, b)}
            mine = held_now.setdefault((*where, row["_generation"]), set())
            if twice := mine & claimed:
                raise Violation("duplicate", f"{where[0]}/{where[1]} offsets {_ranges(twice)} "
                                f"are in two current rows of generation {row['_generation']}")
            mine |= claimed
            if not quiet:
                continue
            found = set()
            if self.audit and any(self.audit.gone(f["url"]) for f in row_files(row)):
                unread.setdefault(where, set()).update(claimed)
                continue  # deleted by a person: the audit's rescan finds it
            for f in row_files(row):
                try:
                    for record in read_archived(self.plain, f["url"]):
                        # (a parsed table's rows keep typed fields, not the value's bytes)
                        if (record.value is not None or self.shape not in PARSED_SHAPES) and \
                                record.value not in self.kafka.values_ever(*where, record.offset):
                            raise Violation("wrong bytes", f"{f['url']} offset {record.offset}")
                        if self.shape == "registry" and record.error is not None and \
                                not sim_registry.justified(record.error, record.offset):
                            raise Violation("wrong dead letter", f"{f['url']} offset "
                                            f"{record.offset} ({sim_registry.version(record.offset)}"
                                            f"): {record.error}")
                        found.add(record.offset)
                        if record.value is not None:
                            messages_now.setdefault(where, set()).add((record.offset,
                                                                       record.value))
                    if self.shape == "registry":
                        self._typed_rows_hold_their_messages(f["url"], *where)
                except DamagedFile as exc:
                    raise Violation("file missing", f"a current row's file: {exc}") from None
            if found != claimed:
                raise Violation("file disagrees", f"{row_files(row)[0]['url']} holds "
                                f"{_ranges(found)}, its row says {_ranges(claimed)}")
        accepted = {}
        for a in cat.state.accepted:
            accepted.setdefault((a["topic"], a["partition"]), set()).update(
                range(a["lost_from"], a["lost_to"]))
        for topic, change in self.changed_under.items():
            token = self._token(topic)
            folder = token and token.run_id and layout.run_folder_name(token.run_id)
            if (topic in self.broken or folder not in change.plans or self.plain.get_versioned(
                    self.tokens.url(self.group, topic))[1] == change.version
                    or self.plain.get_or_none(self._plan_url(folder)) != change.plans[folder]):
                continue  # nothing written since, or by a plan made after the change
            planned_from = Plan.from_json(change.plans[folder]).token_versions.get(topic)
            if folder in change.wrote or planned_from != change.version:
                raise Violation("change undone", f"token {topic}, changed by a person's "
                                f"command, was written again by run {token.run_id}, planned "
                                "before the change")
        for topic in sorted(self.kafka.topics) if quiet else ():
            token = self._token(topic)
            for partition, next_offset in (token.offsets.items() if token else ()):
                where = (topic, partition)
                p = self.kafka.topics[topic][partition]
                held = {o for (t, q, _), offsets in held_now.items() if (t, q) == where
                        for o in offsets}
                needed = ({o for o in p.produced if o < next_offset}
                          - held - accepted.get(where, set())
                          - self.unarchivable.get(where, set()) - self._destroyed(where))
                if needed:
                    raise Violation("hole", f"{topic}/{partition}: token at {next_offset} but "
                                    f"offsets {_ranges(needed)} are in no current row and no "
                                    "accepted loss")
        if final and self.shape == "events":
            self._check_hours()
        if quiet and self.tables is not None:
            self._check_tables(rows)
        elif quiet:
            current = {f["url"] for row in rows for f in row_files(row)}
            tree = storage_join(self.config.archive_root, self.group)
            for url, _ in self.plain.list(tree):
                # (`_runs`, `_catalog`; an hour's `_SUCCESS`, a topic's `_finalized.json`)
                # (a killed write's temporary `.name.*` file: hidden from readers, as `_`)
                metadata = url[len(tree) + 1:].startswith("_") or url.rsplit("/", 1)[-1][:1] in "_."
                if not metadata and url not in current:
                    raise Violation("stray file", f"{url} is in the group's tree but in no "
                                    "current row: a reader of the folders reads it too")
        if quiet:
            for where, offsets in self.ever_archived.items():
                if gone := offsets - held_now.get(where, set()) - self._destroyed(where[:2]):
                    raise Violation("lost", f"{where[0]}/{where[1]} offsets {_ranges(gone)} "
                                    f"were archived (generation {where[2]}) and are in no "
                                    "current row now")
            for where, offsets in held_now.items():
                self.ever_archived.setdefault(where, set()).update(offsets)
            for where, messages in self.ever_messages.items():
                skip = self._destroyed(where) | unread.get(where, set())
                if gone := {o for o, v in messages - messages_now.get(where, set())
                            if o not in skip}:
                    raise Violation("lost", f"{where[0]}/{where[1]} offsets {_ranges(gone)}: "
                                    "an archived message is in no current row now (another "
                                    "message holds its offset)")
            for where, messages in messages_now.items():
                self.ever_messages.setdefault(where, set()).update(messages)
            # invariant 5: verify finds no error where the invariants hold (the full walk,
            # which reads every file, at the end only: it would double the run's time)
            for full in (False, True) if final else (False,):
                with self._kafka_without_faults():  # (its look at offsets no file holds)
                    report = verify.verify_group(self.config, self.group, self.plain,
                                                 self.tokens, full=full, tables=self.tables,
                                                 kafka=self.kafka.consumer)
                # (a token file a person broke is verify's error, rightly: the mail's too)
                errors = [e for e in report.errors() if "malformed token" not in e.message
                          and not (self.audit and any(
                              url.rsplit("/", 1)[0] + "/" in e.message
                              for url in self.audit.deleted_files if self.audit.gone(url)))]
                if errors:
                    raise Violation("verify disagrees", f"verify{' --full' if full else ''} "
                                    "reports errors the invariants do not see: "
                                    + "; ".join(e.message for e in errors[:3]))

    def _check_hours(self) -> None:
        """After the drain: every final hour (`_SUCCESS`) was announced, and what the
        downstream loader holds of each hour is what the archive holds (every change to a
        final hour was announced as replacing it)."""
        tree = storage_join(self.config.archive_root, self.group)
        final = {(url[len(tree) + 1:].split("/", 1)[0],
                  url[len(tree) + 1:].split("/", 1)[1].rsplit("/", 1)[0])
                 for url, _ in self.plain.list(tree) if url.endswith("/_SUCCESS")}
        for topic, path in sorted(final - set(self.loaded)):
            raise Violation("event", f"hour {topic} {path} is final (_SUCCESS) but no event "
                            "announced it: a loader never loads it")
        for (topic, path), files in sorted(self.loaded.items()):
            now = self._hour_files(topic, path)
            if now != files:
                raise Violation("event", f"hour {topic} {path} changed after its event and no "
                                f"event said so: the loader holds {sorted(_names(files))}, the "
                                f"archive {sorted(_names(now))}")

    def _typed_rows_hold_their_messages(self, url: str, topic: str, partition: int) -> None:
        """A registry group's table file: each row's fields are its own message's, as
        its schema version wrote them (the id; qty an int, text, or none; v4's quantity,
        qty by its alias, in the same column)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pq.read_table(pa.BufferReader(self.plain.get_bytes(url)))
        if "reason" in table.column_names:
            return  # dead letters: their reasons are checked with their records
        named = [c for c in ("qty", "quantity") if c in table.column_names]  # v4's rename
        if len(named) > 1:
            raise Violation("wrong row", f"{url}: columns qty and quantity, one field's")
        qty = table.column(named[0]).to_pylist() if named else None
        for i, (kafka, made) in enumerate(zip(table.column("kafka").to_pylist(),
                                              table.column("id").to_pylist())):
            offset = kafka["offset"]
            which = sim_registry.version(offset)
            wanted = {"v2": offset, "v3": str(offset), "v4": offset}.get(which)
            got = qty[i] if qty is not None else None
            if which in ("not avro", "unknown", "foreign") \
                    or made != f"{topic}/{partition}/{offset}" \
                    or got != wanted:
                raise Violation("wrong row", f"{url} offset {offset} ({which}): id {made!r}, "
                                f"qty {got!r}")

    def _check_tables(self, rows: list[dict]) -> None:
        """Invariant 2 for tables: each topic's tables (a parsed group's: its rows and its
        dead letters) read exactly the files of the catalog's current rows (a reader of
        the tables sees what the catalog says)."""
        for topic in sorted(t for t in self.kafka.topics if self._owns_its_tables(t)):
            in_catalog = {f["url"] for row in rows if row["topic"] == topic
                          for f in row_files(row)}
            in_table = set()
            for dead_letters in self.tables.kinds(self.group):
                table = self.tables.find(self.group, topic, dead_letters)
                read = [] if table is None or table.current_snapshot() is None else [
                    task.file.file_path for task in table.scan().plan_files()]
                if self.shape == "registry" and table is not None and not dead_letters and \
                        {"qty", "quantity"} <= set(table.schema()._name_to_id):
                    raise Violation("wrong row", f"table {topic} has columns qty and quantity: "
                                    "one field (v4 renames it with an alias) in two columns")
                if len(read) != len(set(read)) or in_table & set(read):
                    twice = sorted(_names({f for f in read if read.count(f) > 1
                                           or f in in_table}))
                    raise Violation("duplicate", f"table {topic} reads {twice} twice")
                in_table |= set(read)
            if in_table != in_catalog:
                raise Violation("table disagrees", f"table {topic} reads "
                                f"{sorted(_names(in_table - in_catalog))} beyond the catalog's "
                                f"current files and lacks {sorted(_names(in_catalog - in_table))}")

    def _name_taken(self, topic: str) -> bool:
        """A parsed group's topic in Kafka whose table name the other of its pair (`X`,
        `X_dlq`) owns: held (mailed: a person excludes it from the group)."""
        return topic in self.kafka.consumer_topics() and not self._owns_its_tables(topic)

    def _owns_its_tables(self, topic: str) -> bool:
        """Whether a topic's table names are its own: of a pair `X` and `X_dlq` (both in
        Kafka, or one archived: a deleted topic keeps its tables) the one archived first
        owns the name; neither archived yet, `X` does."""
        if self.shape not in PARSED_SHAPES:
            return True
        known = self.kafka.consumer_topics() | (archived := {t for t, *_ in self.ever_archived}
                                                | self._topics_in_catalog())
        named, base = (topic, topic.removesuffix("_dlq")) if topic.endswith("_dlq") else (
            topic + "_dlq", topic)
        if (base if topic == named else named) not in known:
            return True  # no pair
        named_first = named in archived and base not in archived
        return named_first == (topic == named)

    def _topics_in_catalog(self) -> set[str]:
        """Topics with a current row now (archived, whether or not a check saw it quiet)."""
        try:
            cat = catalog.open_catalog(self.plain, self.config, self.group)
        except catalog.CatalogUnreadable:
            return set()
        return {row["topic"] for row in cat.rows()}

    def drain(self) -> list[str]:
        """Liveness: only what the run's failures tell a person to do (accept a retention
        loss), and clean runs: at most 3 runs that advance nothing before every token is
        at Kafka's end and nothing is in flight."""
        said, idle = [], 0
        self.kafka.down = False  # what a failure's mail tells a person to see to
        self.kafka.offline.clear()
        for parts in self.kafka.topics.values():  # (a producer's timeout aborts the rest)
            for p in parts:
                p.end_transaction(commit=True)
        for topic in list(self.broken):
            self._fix_token(Outcome(), topic)
        for n in range(40):
            before = self._positions()
            self.now += timedelta(minutes=1)  # runs a schedule apart (min_records waits)
            run_id = f"drain__{n}"
            out = Outcome()
            self.runs[run_id] = Run(run_id)
            for task in ("plan", "job", "commit", "finalize"):
                if task == "finalize":
                    self._finalize(out, run_id, 0)
                elif not self._task(out, run_id, task, 0):
                    break
            if self.tables is not None:
                self._compaction_task(out, run_id, 0)
            if any("HeldTopicsError" in line or "retention" in line for line in out.lines):
                for topic in sorted(self.kafka.topics):  # what the mail says to do
                    self._accept_loss(out, topic)
            if any("set a new `generation`" in line for line in out.lines):
                self._new_generation(out)  # the remedy a topic re-created or truncated gets
            said += out.lines
            if self._at_end() and not self.in_flight() and not self.compacting():
                retried = Outcome()
                for owed in sorted(self.finalize_owed):  # retried, or Cleared after its mail
                    self._finalize(retried, owed, 0)
                return said + retried.lines + self._maintained_when_idle() + self._audited()
            idle = 0 if self._positions() != before else idle + 1
            if idle > 3:
                break
        raise Violation("stuck", "clean runs do not bring the tokens to Kafka's end: "
                        + " | ".join(said[-6:]))

    def _new_generation(self, out: Outcome) -> None:
        """What the mail of a token or an archive beyond Kafka's latest offset says to
        do: a new generation in the config, and the token of each such topic deleted."""
        self._setting(out, "generation", None)
        for topic, parts in sorted(self.kafka.topics.items()):
            token = self._token(topic)
            if topic not in self.kafka.deleted and token is not None and any(
                    o > parts[p].end for p, o in token.offsets.items() if p < len(parts)):
                self._delete_token(out, topic)

    def _maintained_when_idle(self) -> list[str]:
        """Liveness of maintenance: once a run has planned with nothing in flight (it
        withdraws what a given-up run left in a table), every table is settled, so its
        maintenance would expire its old snapshots (a compacted table's was never settled:
        issue 56, defect 4, it kept every snapshot and the files they replaced). Checked
        without expiring: time travel stays for whoever reads the world after."""
        if self.tables is None:
            return []
        out = Outcome()
        self.runs["idle"] = Run("idle")
        for task in ("plan", "job", "commit"):
            if not self._task(out, "idle", task, 0):
                break
        for topic, dead_letters in ((t, d) for t in sorted(self.kafka.topics)
                                    for d in self.tables.kinds(self.group)):
            table = self.tables.find(self.group, topic, dead_letters)
            if table is not None and not table_maintenance.settled(
                    table, self.storage, self.config, self.group, topic):
                raise Violation("stuck", f"maintenance with nothing in flight waits for table "
                                         f"of {topic} ({len(table.metadata.snapshots)} snapshots): "
                                         + " | ".join(out.lines))
        return out.lines

    def _audited(self) -> list[str]:
        """Liveness of the audit: an audit once everything is archived mails every
        mismatch it has not mailed (and none twice: sim.audit)."""
        if not self.audit:
            return []
        out = Outcome()
        self.now += timedelta(minutes=5)  # past the last window's grace
        self._audit(out, "audit__final", 0, False)
        if unmailed := self.audit.unmailed():
            raise Violation("unmailed", f"{len(unmailed)} mismatches never mailed, e.g. "
                            f"{unmailed[0].status} of topic {unmailed[0].topic} window "
                            f"{unmailed[0].window_start_ms}: " + " | ".join(out.lines))
        return out.lines

    def _positions(self) -> dict:
        found = {}
        for topic in sorted(self.kafka.topics):
            token = self._token(topic)
            found[topic] = dict(token.offsets) if token else {}
        return {"tokens": found, "in_flight": self.in_flight()}

    def _at_end(self) -> bool:
        for topic, parts in self.kafka.topics.items():
            if topic in self.kafka.deleted or self._name_taken(topic):
                continue  # its token waits for a person (the mail says so), as designed
            token = self._token(topic)
            for partition, p in enumerate(parts):
                if p.stable > 0 and (token is None or token.offsets.get(partition) != p.stable):
                    return False
        return True


def _bounded_concatenate(files, out, keep=None, ordered=False):
    """parquet.concatenate (a compaction's rewrite, a rewind's copy-on-write) with the
    cost invariant of its memory: it holds at most one row group's worth of rows beyond
    ROW_GROUP_BYTES (issue 56, defect 5: a bin read whole peaked at 10x). With the bound
    at 1 byte, each row group written may hold no more rows than the largest read."""
    import pyarrow.parquet as pq

    largest = 0
    real_read, real_write = pq.ParquetFile.read_row_group, pq.ParquetWriter.write_table

    def read(source, i, *args, **kwargs):
        nonlocal largest
        table = real_read(source, i, *args, **kwargs)
        largest = max(largest, table.num_rows)
        return table

    def write(writer, table, *args, **kwargs):
        if table.num_rows > largest:
            raise Violation("cost", f"a rewrite held {table.num_rows} rows in one row group, "
                            f"beyond the largest it read ({largest}): its memory grows with "
                            "the bin, not with the row group")
        return real_write(writer, table, *args, **kwargs)

    with patch.object(parquet, "ROW_GROUP_BYTES", 1), \
            patch.object(pq.ParquetFile, "read_row_group", read), \
            patch.object(pq.ParquetWriter, "write_table", write):
        return _CONCATENATE(files, out, keep, ordered)


_CONCATENATE = parquet.concatenate


def _names(files: set) -> list[str]:
    """Short names of urls, or of (url, size) pairs with their sizes."""
    return [f"{url.rsplit('/', 3)[-3]}/{url.rsplit('/', 1)[-1]}" + (
        f" ({rest[0]} bytes)" if rest else "")
            for url, *rest in ((f,) if isinstance(f, str) else f for f in files)]


def _ranges(offsets: set[int]) -> str:
    """12, 13, 14, 20 -> '[12, 15), [20, 21)'."""
    out, run = [], None
    for o in sorted(offsets):
        if run and o == run[1]:
            run[1] = o + 1
        else:
            run = [o, o + 1]
            out.append(run)
    return ", ".join(f"[{a}, {b})" for a, b in out[:6]) + (" ..." if len(out) > 6 else "")
