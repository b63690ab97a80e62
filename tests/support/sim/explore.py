"""Sequences from seeds, run and checked; a failing one shrunk to a minimal one."""

from __future__ import annotations

import argparse
import logging
import os
import random
import shutil
import sys
import tempfile
import time
import traceback
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.sim import audit, replay
from tests.support.sim.world import LAUNCH_FAILS, NEIGHBOUR, SHAPES, Violation, World

STEPS = 30  # per sequence


@dataclass
class Result:
    seed: int | None
    steps: list[tuple]
    violation: Violation | None = None
    trace: list[str] = field(default_factory=list)
    shape: str = "files"  # the world's group (world.SHAPES)


def scratch() -> Path:
    """A folder for one process's worlds, in memory where the machine has one: the
    library fsyncs every write, which a disk makes the simulation's slowest part."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    return Path(base) / f"kafka-archive-sim-{os.getpid()}"


def next_step(rng: random.Random, world: World) -> tuple:
    """A step drawn for the world as it is (names of runs that exist, partitions)."""
    topic = rng.choice(sorted(world.kafka.topics))
    partition = rng.randrange(len(world.kafka.topics[topic]))
    crash = lambda: rng.choice((0, 0, 0, rng.randint(1, 12)))  # noqa: E731
    # a job's launch may also fail before the job starts (spark-submit's own failure)
    launch = lambda: LAUNCH_FAILS if rng.random() < 0.05 else crash()  # noqa: E731
    runs = sorted(world.runs)
    if world.audit is not None and world.audit.rescan_short and rng.random() < 0.15:
        # a window a rescan found short of files: a late message lands in it (counted by
        # its producer and archived), or a rescan comes while a run is in flight
        topic, source, start = rng.choice(sorted(world.audit.rescan_short))
        if rng.random() < 0.5:
            return ("audit", world.now.strftime("scheduled__%Y-%m-%dT%H:%M:00+00:00"), 0, True)
        late = (world._now_ms() + 60_000 - start) // 60_000  # (the step's clock moves first)
        return ("send", source, topic, rng.randrange(len(world.kafka.topics.get(topic, [0]))),
                rng.randint(1, 3), False, late)
    if world.audit is not None and (r := rng.random()) < 0.4:
        if r < 0.25:  # an audited producer, killed before its count now and then
            return ("send", rng.choice(audit.SOURCES), topic, partition, rng.randint(1, 9),
                    rng.random() < 0.1, 0)
        if r < 0.37:  # the audit DAG's run (a person's rescan now and then)
            return ("audit", world.now.strftime("scheduled__%Y-%m-%dT%H:%M:00+00:00"),
                    rng.choice((0, 0, 0, rng.randint(1, 4))), rng.random() < 0.3)
        return ("delete_file", topic)
    if world.tables is not None and rng.random() < 0.05:
        return ("compact", rng.randint(0, 3), crash())
    if world.tables is not None and (rng.random() < 0.05 or (
            world.compaction_killed and rng.random() < 0.15)):
        # (a compaction killed for memory, not finished since: turning it off is the
        # natural answer)
        return ("compaction_setting", None if world.compaction_killed else rng.choice(
            (None, 0, 0, 3600)))
    offsets_reused = True  # unclean elections
    if rng.random() < 0.02:  # a person changes a setting between runs
        name = rng.choice(("on_retention_gap", "min_records", "start_from")
                          + (("compression",) if world.tables is None else ("keep_snapshots",))
                          + ("generation",))
        return ("setting", name, rng.choice(("fail", "skip")) if name == "on_retention_gap"
                else rng.choice(("none", "gzip")) if name == "compression"
                else rng.choice(("latest", "earliest")) if name == "start_from"
                else rng.choice((0, 3600, 2 * 86400)) if name == "keep_snapshots"
                else 1 if name == "generation" else rng.choice((1, 3)))
    if offsets_reused and rng.random() < 0.015:  # an unclean leader election
        return ("truncate", topic, partition, rng.randint(1, 8))
    if offsets_reused and rng.random() < 0.05 and (plan := world.plan_in_flight()) and (
            rewound := [s for s in plan.slices if s.earlier]):
        # an election while a rewind's plan is in flight, before its job reads Kafka: the
        # job's look alone can find the other messages (the 47-minute soak's seed 902376);
        # producers write to the new leader at once, short of the cut or past it
        s, cut = rng.choice(rewound), rng.randint(1, 8)
        return ("truncate", s.topic, s.partition, cut, rng.randint(0, cut + 2))
    if rng.random() < 0.03:  # another deployment's group on the same root
        return ("neighbour", rng.choice(("run", "run", "compact", "maintain"))
                if world.tables is not None else "run")
    if rng.random() < 0.03:  # a task killed in the middle of one of its local writes
        task = rng.choice(("plan", "job", "commit"))
        run_id = world.now.strftime("scheduled__%Y-%m-%dT%H:%M:00+00:00") if task == "plan" \
            else rng.choice(runs or ["none"])
        return ("torn", run_id, task, rng.randint(1, 10))
    if world.tables is not None and world.unmerged_runs >= 2 and rng.random() < 0.05:
        # runs to merge an hour from now: a compaction finding nothing yet, paused at its
        # release (its 2nd write) while another's, an hour later, takes its lease over as
        # an expired one's, merges them and may be killed
        return ("race", world.now.strftime("scheduled__%Y-%m-%dT%H:%M:00+00:00"), "compact",
                2, "compact", topic, False, rng.choice((0, rng.randint(1, 12))))
    if world.tables is not None and world.unmerged_runs >= 2 and rng.random() < 0.04:
        # runs to merge: a rewind's plan, its rows read, while another deployment's
        # compaction merges them before the plan's mark (issue 56's defect 1 window)
        topic = rng.choice([t for t in sorted(world.kafka.topics) if world._token(t)] or [topic])
        return ("race", world.now.strftime("scheduled__%Y-%m-%dT%H:%M:00+00:00"), "plan",
                rng.randint(1, 3), "compact", topic, True, 0)
    if world.tables is not None and rng.random() < 0.04 and (retried := [
            run for run in runs if world.runs[run].failed == "commit"]):
        # Airflow's retry of a commit (the first to create its topic's tables, often)
        # while maintenance, elsewhere, commits to the same tables
        return ("race", rng.choice(retried), "commit", rng.randint(1, 6), "maintain", topic,
                False, 0)
    if rng.random() < (0.06 if world.tables else 0.03):  # two live tasks: another body
        # at one of the task's writes; a table group's plan most often against another
        # deployment's compaction, half the time of a rewind a person asked for just before
        others = ("rewind", "accept_loss", "retention") + (("compact",) * 4 + ("maintain",)
                                              if world.tables else ())
        task = rng.choice(("plan",) * 2 + ("job", "commit") + (("compact",) * 2 if world.tables
                                                              else ()))
        run_id = world.now.strftime("scheduled__%Y-%m-%dT%H:%M:00+00:00") \
            if task in ("plan", "compact") else rng.choice(runs or ["none"])
        rewound = task == "plan" and rng.random() < 0.5
        if rewound:  # of a topic archived so far, if any
            topic = rng.choice([t for t in sorted(world.kafka.topics) if world._token(t)]
                               or [topic])
        # (two compactions: most often, a holder paused at its release while another's
        # compaction takes its lease over as an expired one's)
        other = "compact" if task == "compact" and rng.random() < 0.6 else rng.choice(others)
        # the other body killed at one of its own writes (a compaction's lease left behind)
        killed_at = rng.choice((0, rng.randint(1, 12)) if other == "compact" else
                               (0, 0, rng.randint(1, 12)))
        # a plan writes a few files, its mark the 3rd; a compaction with nothing to merge
        # takes its lease and releases it (the release is its 2nd write)
        switch_at = rng.randint(1, 4) if task == "plan" else rng.choice(
            (2, rng.randint(1, 8))) if task == "compact" else rng.randint(1, 8)
        return ("race", run_id, task, switch_at, other, topic, rewound, killed_at)
    if rng.random() < 0.1 and (stale := world.stale_jobs()):
        # Airflow retries a given-up plan's job while the runs in flight move on: the
        # same failure each time, naming another run (one incident, one mail)
        return ("task", rng.choice(stale), "job", 0)
    if world.s3 is not None and rng.random() < 0.2 and (plan := world.plan_in_flight()) \
            and (held := sorted(t for t in plan.token_versions if t in world.kafka.topics)):
        # on S3, a person deletes or rewinds the token of a topic a plan in flight holds:
        # its commit's conditional write (If-Match on what it planned from) must lose
        held_topic = rng.choice(held)
        return rng.choice((("delete_token", held_topic),
                           ("rewind", held_topic, 0, rng.randint(0, 30))))
    if world.s3 is not None and runs and rng.random() < 0.15:
        # on S3, a person's rewind beside a commit, at one of its writes: the commit's
        # conditional write of the token (If-Match on the version it read) must lose to
        # it, not overwrite it
        return ("race", rng.choice(runs), "commit", rng.randint(1, 8), "rewind", topic, False, 0)
    if rng.random() < 0.03:  # a task's storage call fails, or a write lands and fails
        task = rng.choice(("plan", "job", "commit"))
        run_id = world.now.strftime("scheduled__%Y-%m-%dT%H:%M:00+00:00") if task == "plan" \
            else rng.choice(runs or ["none"])
        kind = rng.choice(("error", "lands"))
        return ("storage_fault", run_id, task, rng.randint(1, 25 if kind == "error" else 10), kind)
    failing = {run for run in runs if world.runs[run].failed == "commit"}
    named = [t for t in sorted(world.kafka.topics)
             if (token := world._token(t)) is not None and token.run_id in failing]
    if named and rng.random() < 0.1:  # a person rewinds (deletes the token) of a topic a
        return ("delete_token", rng.choice(named))  # failing run's commit moved already
    open_txns = [(t, q) for t, parts in sorted(world.kafka.topics.items())
                 for q, p in enumerate(parts) if p.open_txn]
    if world.kafka.offline and rng.random() < 0.15:  # a partition's leader is back
        return ("offline", *sorted(world.kafka.offline)[0], False)
    if rng.random() < 0.015:  # a partition loses its leader
        return ("offline", topic, partition, True)
    if open_txns and rng.random() < 0.1:  # an open transaction ends
        return ("end_transaction", *rng.choice(open_txns), rng.random() < 0.7)
    r = rng.random()
    if r < 0.28:
        if rng.random() < 0.08:  # a producer's transaction aborted
            return ("abort", topic, partition, rng.randint(1, 9))
        if rng.random() < 0.05:  # one left open: the last stable offset stays behind
            return ("transaction", topic, partition, rng.randint(1, 9))
        late = rng.choice((0, 0, 0, 10, 90)) if world.shape == "events" else 0
        return ("produce", topic, partition, rng.randint(1, 9), rng.random() < 0.2, late)
    if r < 0.32:
        return ("retention", topic, partition, rng.randint(1, 6))
    if r < 0.34:  # a compacted topic's log cleaner
        return ("compact_log", topic, partition, rng.randint(1, 6))
    if r < 0.355:
        return ("add_partition", topic)
    if r < 0.36:
        return ("delete_topic", topic)
    if r < 0.365:  # a new topic, found by the next plan; one named like a dead-letter table
        return ("create_topic", rng.choice(("v", "v_dlq", "t_dlq")), rng.randint(1, 2))
    if r < 0.37:
        return ("time", rng.choice((30, 120)))
    if r < 0.38:
        return ("kafka_down", not world.kafka.down)
    if r < 0.62 or not runs:
        run_id = world.now.strftime("scheduled__%Y-%m-%dT%H:%M:00+00:00")
        if rng.random() < 0.05:
            run_id = rng.choice(("manual__x:1", "manual__x_1"))
        return ("run", run_id, crash(), launch(), crash())
    if r < 0.76:
        failed = [run for run in runs if world.runs[run].failed]
        if failed and rng.random() < 0.5:  # Airflow's retry of a task that failed or died
            run_id = rng.choice(failed)
            task = world.runs[run_id].failed
            return ("task", run_id, task, launch() if task == "job" else crash())
        task = rng.choice(("plan", "job", "commit") + (("finalize",) * 2
                                                       if world.shape == "events" else ()))
        if task == "finalize":
            return ("finalize", rng.choice(runs), crash())
        return ("task", rng.choice(runs), task, launch() if task == "job" else crash())
    if r < 0.79:
        return ("clear_run", rng.choice(runs), crash())
    if r < 0.82:
        return ("delete_token", topic)
    if r < 0.84:
        return ("delete_line", topic, partition)
    if r < 0.85:
        return ("edit_line", topic, partition, rng.randint(0, 30))
    if r < 0.88:
        return ("restore_token", topic, rng.randint(0, 3))
    if r < 0.905:
        return ("rewind", topic, partition, rng.randint(0, 30))
    if r < 0.92:
        return ("rewind_time", topic, rng.choice((None, partition)), rng.choice((1, 5, 30, 120)))
    if r < 0.94:
        return ("accept_loss", topic)
    if r < 0.96:  # a person breaks a token file by hand, or fixes the one they broke
        if world.broken:
            return ("fix_token", rng.choice(sorted(world.broken)))
        return ("break_token", topic)
    if r < 0.97:
        return ("rebuild", crash())
    if r < 0.98:
        return ("damage_catalog", rng.randrange(100))
    if r < 0.99 or world.tables is None:
        return ("remove_inflight",)
    return ("maintain", crash())


def run_steps(steps: list[tuple], root: Path, seed: int | None = None,
              rng: random.Random | None = None, length: int = 0,
              shape: str = "files") -> Result:
    """The steps given, or (rng) `length` steps drawn as the world goes; invariants after
    each, liveness at the end. shape: the world's group (world.SHAPES)."""
    world = World(root, shape)
    result = Result(seed, [], shape=shape)
    try:
        for i in range(length if rng else len(steps)):
            step = next_step(rng, world) if rng else steps[i]
            result.steps.append(step)
            result.trace.append(f"{len(result.steps):3}. {describe(step)}")
            out = world.step(step)
            result.trace += [f"       {line}" for line in out.lines]
            world.check()
        result.trace += [f"       drain: {line}" for line in world.drain()]
        world.check(final=True)
    except Violation as broken:
        result.violation = broken
    except Exception as bug:  # not a classified failure: the library broke  # noqa: BLE001
        result.violation = Violation("unclassified error", "".join(
            traceback.format_exception_only(bug)).strip() + "\n" + traceback.format_exc(limit=-4))
    finally:
        world.close()
    return result


def explore(seed: int, root: Path, length: int = STEPS, shape: str = "files") -> Result:
    return run_steps([], root, seed, random.Random(seed), length, shape)


@contextmanager
def _quiet():
    """The library's warnings are the steps' outcomes here; restored after, so a test
    run in the same process later still sees its logs."""
    before = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(before)


@_quiet()
def explore_many(first: int, count: int, shape: str = "files") -> list[str]:
    """Explore seeds first..first+count-1 in a scratch folder
    of this process; the report of each failing one, shrunk."""
    root = scratch()
    failed = []
    try:
        for seed in range(first, first + count):
            result = explore(seed, root, shape=shape)
            if result.violation:
                failed.append(report(shrink(result, root)))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return failed


@_quiet()
def explore_replays(first: int, count: int) -> list[str]:
    """Replay sequences (sim.replay) of seeds first..first+count-1; the trace of each
    that broke an invariant (not shrunk: a replay's sequence is a handful of steps)."""
    root = scratch()
    failed = []
    try:
        for seed in range(first, first + count):
            trace, violation = replay.explore(seed, root)
            if violation:
                failed.append("\n".join([f"replay seed {seed}: {violation}", *trace]))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return failed


def _failure(violation: Violation) -> str:
    """What a shrunk sequence must still break: the invariant, or for an unclassified
    error the exception's class (any other error, such as a step the shrinking left
    without the one it needs, is another failure)."""
    if violation.kind != "unclassified error":
        return violation.kind
    return str(violation).removeprefix("unclassified error: ").split(":", 1)[0]


def shrink(result: Result, root: Path) -> Result:
    """The shortest sequence found that breaks the same invariant (delta debugging by
    chunks, then each kill point cleared where the failure does not need it)."""
    kind = _failure(result.violation)
    best = result

    def attempt(steps: list[tuple]) -> bool:
        nonlocal best
        tried = run_steps(steps, root, result.seed, shape=result.shape)
        if tried.violation is not None and _failure(tried.violation) == kind:
            best = tried
            return True
        return False

    chunks = 2
    while len(best.steps) > 1:
        size = max(1, len(best.steps) // chunks)
        for start in range(0, len(best.steps), size):
            if attempt(best.steps[:start] + best.steps[start + size:]):
                chunks = max(chunks - 1, 2)
                break
        else:
            if size == 1:
                break
            chunks = min(len(best.steps), chunks * 2)
    for i, step in enumerate(list(best.steps)):
        if step[0] in ("run", "task", "clear_run", "rebuild", "maintain", "finalize",
                       "compact") and any(isinstance(a, int) and a for a in
                                                            step[-3:]):
            calm = step[:2] + tuple(0 if isinstance(a, int) else a for a in step[2:])
            attempt(best.steps[:i] + [calm] + best.steps[i + 1:])
    return best


def _kill(n: int) -> str:
    if n == LAUNCH_FAILS:
        return " (spark-submit fails before the job starts)"
    return f" (killed before its write #{n})" if n else ""


# each step kind as a person reads it, from the step's arguments
_SAID = {
    "produce": lambda t, p, n, marker, late=0: f"produce {n} messages to {t}/{p}"
                                               + (f" (events of {late} minutes ago)" if late else "")
                                               + (" and a marker" if marker else ""),
    "offline": lambda t, p, offline: f"{t}/{p} " + ("loses its leader (offline)" if offline
                                                    else "has a leader again"),
    "transaction": lambda t, p, n: f"a transaction of {n} messages to {t}/{p} begins and "
                                   "stays open",
    "end_transaction": lambda t, p, commit: f"the open transaction of {t}/{p} "
                                            f"{'commits' if commit else 'aborts'}",
    "abort": lambda t, p, n: f"a transaction of {n} messages to {t}/{p} aborted (no reader "
                             "sees its offsets)",
    "retention": lambda t, p, n: f"retention deletes the {n} oldest offsets of {t}/{p}",
    "compact_log": lambda t, p, n: f"the log cleaner removes {n} superseded messages of "
                                   f"{t}/{p} below its head",
    "neighbour": lambda task: f"group {NEIGHBOUR} on the same root: its {task} task",
    "truncate": lambda t, p, n, written=0: f"an unclean leader election cuts the last {n} "
                                           f"offsets of {t}/{p} (the next messages take them "
                                           "again" + (f"; {written} do at once)" if written
                                                      else ")"),
    "add_partition": lambda t: f"a partition is added to {t}",
    "create_topic": lambda t, n: f"topic {t} is created with {n} partition(s)",
    "time": lambda minutes: f"{minutes} minutes pass",
    "kafka_down": lambda down: "Kafka's brokers go down" if down else "Kafka's brokers are back",
    "run": lambda run, plan, job, commit: f"DAG run {run}: plan{_kill(plan)}, "
                                          f"archive{_kill(job)}, commit{_kill(commit)}",
    "task": lambda run, task, n: f"Clear task {task} of run {run}{_kill(n)}",
    "clear_run": lambda run, n: f"Clear the whole run {run}{_kill(n)}",
    "delete_token": lambda t: f"a person deletes token {t}",
    "delete_line": lambda t, p: f"a person deletes the line of partition {p} from token {t}",
    "edit_line": lambda t, p, o: f"a person edits the line of partition {p} of token {t} down "
                                 f"to {o}",
    "restore_token": lambda t, back: f"a person restores token {t} from its copy {back} "
                                     "versions back",
    "rewind": lambda t, p, o: f"kafka-archive rewind --topic {t} --partition {p} --to-offset {o}",
    "rewind_time": lambda t, p, m: f"kafka-archive rewind --topic {t}"
                                   + (f" --partition {p}" if p is not None else "")
                                   + f" --to-time <{m} minutes ago>",
    "delete_topic": lambda t: f"topic {t} is deleted from Kafka",
    "accept_loss": lambda t: f"kafka-archive accept-loss --topic {t}",
    "break_token": lambda t: f"a person's edit leaves a malformed line in token {t}",
    "fix_token": lambda t: f"a person fixes token {t} (puts back the file before their edit)",
    "remove_inflight": lambda: "a person deletes the group's _runs/<group>/_inflight.json",
    "rebuild": lambda n: f"kafka-archive catalog --rebuild{_kill(n)}",
    "damage_catalog": lambda n: f"a catalog snapshot or row chunk is damaged (file #{n})",
    "maintain": lambda n: f"a day later, the tables' maintenance (expiry, orphans){_kill(n)}",
    "compact": lambda hours, n: f"{hours} hours later, the tables' compaction{_kill(n)}",
    "setting": lambda name, value: f"a person sets {name}: {value}",
    "compaction_setting": lambda after: "a person sets compact_after: " + (
        "null (compaction off)" if after is None or after is False else "1h"
        if after is True or after == 3600 else f"{after} s (each run merges the runs before)"),
    "finalize": lambda run, n: f"Clear task finalize of run {run}{_kill(n)}",
    "send": lambda source, t, p, n, dies, late=0: (
        f"producer {source} sends {n} messages to {t}/{p}"
        + (f" stamped {late} minutes ago" if late else "")
        + (", killed before it publishes their count" if dies else "")),
    "audit": lambda run, n, rescan: f"the audit DAG's run {run}{' (rescan)' if rescan else ''}"
                                    f"{_kill(n)}",
    "delete_file": lambda t: f"a person deletes topic {t}'s newest archived file",
    "storage_fault": lambda run, task, n, kind: f"task {task} of run {run}: " + (
        f"its storage call #{n} fails (503)" if kind == "error" else
        f"its write #{n} lands and is reported failed (a conditional one: 412 on the retry)"),
    "torn": lambda run, task, n: f"task {task} of run {run} killed in the middle of its "
                                 f"local write #{n}",
    "race": lambda run, task, n, other, t, rewound=False, killed_at=0: (
        (f"kafka-archive rewind --topic {t} (its partition of most rows, to Kafka's earliest), then "
         if rewound else "")
        + f"task {task} of run {run} and, at its write #{n}, "
                                           + {"compact": "an hour later, a compaction "
                                                         "(another deployment)",
                                              "maintain": "the tables' maintenance",
                                              "rewind": f"kafka-archive rewind --topic {t} "
                                                        "--to-offset 0",
                                              "accept_loss": f"kafka-archive accept-loss "
                                                             f"--topic {t}",
                                              "retention": f"Kafka's retention deletes {t}/0 "
                                                           "up to its end"}[other]
        + _kill(killed_at)),
}


def describe(step: tuple) -> str:
    kind, *args = step
    return _SAID[kind](*args) if kind in _SAID else repr(step)


def report(result: Result) -> str:
    return "\n".join([f"seed {result.seed}{'' if result.shape == 'files' else ' --' + result.shape}: "
                      f"{result.violation}", *result.trace])


def main(argv: list[str] | None = None) -> int:
    args = argparse.ArgumentParser(description=__doc__)
    args.add_argument("--seed", type=int, help="run this seed only, printing every step")
    args.add_argument("--first-seed", type=int, default=0)
    args.add_argument("--sequences", type=int, default=200)
    args.add_argument("--steps", type=int, default=STEPS)
    args.add_argument("--soak", type=float, metavar="MINUTES",
                      help="new seeds (from --first-seed) until this many minutes have passed")
    args.add_argument("--no-shrink", action="store_true")
    args.add_argument("--stop-at-first", action="store_true",
                      help="stop at the first violation (a mutant is caught by one)")
    args.add_argument("--shape", choices=(*SHAPES, "all"), default="files",
                      help="the world's group: SequenceFiles by Kafka partition (files), "
                           "Iceberg tables with maintenance (tables), files by event time "
                           "with finalized hours and their Asset events (events), Iceberg "
                           "tables of typed columns with dead-letter tables (parsed), files "
                           "of audited producers and the audit (audit); all: "
                           "each seed in the next of them")
    args.add_argument("--replay", action="store_true",
                      help="replay sequences (a target that refuses, kills, resumes)")
    opts = args.parse_args(argv)
    logging.disable(logging.WARNING)  # the library's warnings are the steps' outcomes here
    root = scratch()
    try:
        return _run(opts, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _run(opts: argparse.Namespace, root: Path) -> int:
    if opts.replay:
        started = time.monotonic()
        failed = explore_replays(opts.first_seed, opts.sequences)
        print(f"{opts.sequences} replay sequences in {time.monotonic() - started:.1f} s; "
              f"violations: {len(failed)}" + "".join("\n\n" + f for f in failed[:3]))
        return 1 if failed else 0
    if opts.seed is not None:
        result = explore(opts.seed, root, opts.steps, _shape(opts.shape, opts.seed))
        print("\n".join(result.trace))
        print(result.violation or "no invariant broken")
        return 1 if result.violation else 0
    started, seed, found, steps, shapes = time.monotonic(), opts.first_seed, Counter(), 0, Counter()
    first: dict[str, Result] = {}
    failing: list[str] = []  # every failing seed, to replay each (--seed N --shape S)
    while True:
        if opts.soak is None and seed >= opts.first_seed + opts.sequences:
            break
        if opts.soak is not None and time.monotonic() - started > opts.soak * 60:
            break
        result = explore(seed, root, opts.steps, _shape(opts.shape, seed))
        steps += len(result.steps)
        shapes[result.shape] += 1
        seed += 1
        if result.violation:
            found[result.violation.kind] += 1
            first.setdefault(result.violation.kind, result)
            failing.append(f"{result.seed} --shape {result.shape} ({result.violation.kind})")
            if opts.stop_at_first:
                break
    elapsed = time.monotonic() - started
    print(f"{seed - opts.first_seed} sequences ({', '.join(f'{n} {s}' for s, n in shapes.items())})"
          f", {steps} steps in {elapsed:.1f} s ({(seed - opts.first_seed) / elapsed:.1f} "
          f"sequences/s); violations: {dict(found) or 'none'}")
    if failing:
        print("failing seeds: " + ", ".join(failing), flush=True)
    for kind, result in first.items():
        small = result if opts.no_shrink else shrink(result, root)
        print(f"\n--- {kind}: first at seed {result.seed}, shrunk from {len(result.steps)} to "
              f"{len(small.steps)} steps (replay: the steps below) ---\n{report(small)}")
    return 1 if found else 0


def _shape(option: str, seed: int) -> str:
    return list(SHAPES)[seed % len(SHAPES)] if option == "all" else option


if __name__ == "__main__":
    sys.exit(main())
