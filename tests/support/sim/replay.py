"""The replay's resume rules in the simulation (issue 41 §4): the real replay task
(archive.replay_job.replay_partition) over a file group's real archived files, into a
simulated target that refuses messages its settings refuse (a timestamp too far ahead,
a record beyond max.message.bytes, a message without a key on a compacted topic),
killed at any write (its progress files) or any delivery, with the settings changed by a
person and the same replay run again. After every step each target partition must hold a prefix of what it
replays, in order, each message once; at the end, after the fix, at most 3 runs land all
of it.
"""

from __future__ import annotations

import random
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from unittest.mock import patch

from confluent_kafka import KafkaError
from kafka import TopicPartition

from kafka_archive import brokers
from kafka_archive.archive import replay_job
from kafka_archive.errors import ArchiveError
from kafka_archive.formats.records import Record
from kafka_archive.tools import replay

from tests.support.sim.world import Crash, Outcome, Violation, World

FUTURE_MS = 2_208_988_800_000  # 2040-01-01: refused by Kafka 4's default after.max.ms
REFUSING = {"message.timestamp.type": "CreateTime",
            "message.timestamp.after.max.ms": "3600000"}


@dataclass
class Delivered:
    """A message as the target's consumer reads it back (what same_message compares)."""
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list
    timestamp: int
    timestamp_type: int = 0  # CreateTime


@dataclass
class Target:
    """The target topic: its partitions and the timestamp settings its broker enforces."""
    partitions: dict[int, list[Delivered]]
    settings: dict[str, str] = field(default_factory=dict)

    def refuses(self, key, value, headers, timestamp_ms: int, now_ms: int) -> int | None:
        """The error code its broker answers a message with, or None: it is written."""
        if key is None and "compact" in self.settings.get("cleanup.policy", ""):
            return KafkaError.INVALID_RECORD
        size = replay_job.record_size(Record(None, key, value, timestamp_ms, headers or []))
        if size > int(self.settings.get("max.message.bytes", 1 << 62)):
            return KafkaError.MSG_SIZE_TOO_LARGE
        if timestamp_ms - now_ms > int(self.settings.get("message.timestamp.after.max.ms",
                                                          1 << 62)):
            return KafkaError.INVALID_TIMESTAMP
        return None


class Producer:
    """librdkafka's idempotent producer as the replay uses it: messages queue until a
    poll or flush delivers them, in order; a refused one is reported and not written. A
    kill delivers some prefix of the queue (what the broker had acknowledged) and loses
    the rest."""

    def __init__(self, target: Target, faults, rng: random.Random, now_ms: int):
        self.target, self.faults, self.rng, self.now_ms = target, faults, rng, now_ms
        self.queue = []

    def produce(self, topic, value, key=None, timestamp=None, headers=None, on_delivery=None,
                partition=None):
        self.queue.append((partition, key, value, list(headers or ()), timestamp, on_delivery))

    def _deliver(self, count: int) -> None:
        for partition, key, value, headers, ts, report in self.queue[:count]:
            refused = self.target.refuses(key, value, headers, ts, self.now_ms)
            if refused is None:
                held = self.target.partitions[partition]
                held.append(Delivered(len(held), key, value, headers, ts))
                report(None, None)
            else:
                report(KafkaError(refused), None)
        del self.queue[:count]

    def poll(self, timeout=0):
        try:
            self.faults.tick("a delivery")
        except Crash:
            self._deliver(self.rng.randint(0, len(self.queue)))
            raise
        self._deliver(len(self.queue))
        return 0

    def flush(self, timeout=0):
        self.poll(timeout)
        return 0


class TargetConsumer:
    def __init__(self, target: Target):
        self.target = target

    def end_offsets(self, tps):
        return {tp: len(self.target.partitions[tp.partition]) for tp in tps}

    def close(self):
        pass


class ReplayWorld:
    """A file group's world whose topic `t` is archived, and one replay of it into a
    simulated target topic."""

    def __init__(self, root: Path, rng: random.Random):
        self.world = World(root)
        self.world.kafka.keyless = True
        self.rng = rng
        for partition in range(2):
            for _ in range(rng.randint(1, 3)):
                self.world.step(("produce", "t", partition, rng.randint(1, 9), rng.random() < .2))
        for offsets in (p.messages for p in self.world.kafka.topics["t"]):
            for offset in offsets:  # a few messages stamped 2040: refused by the target
                if rng.random() < 0.08:
                    offsets[offset] = FUTURE_MS + offset
        self.world.drain()
        # the simulated group archives every topic; the target is not a real one
        self.request = replay.Request("backup", "t", "t_copy", allow_archived_target=True)
        settings = dict(REFUSING) if rng.random() < 0.7 else {}
        if rng.random() < 0.4:  # a value padded by 10 bytes fits, by 20 does not
            settings["max.message.bytes"] = str(replay_job.record_size(
                Record(None, b"k", b"t/0/99" + b"." * 10, 0, [])))
        if rng.random() < 0.3:
            settings["cleanup.policy"] = "compact"
        self.target = Target({0: [], 1: []}, settings)
        self.expected = {p: self._archived(p) for p in (0, 1)}

    def _archived(self, partition: int) -> list[tuple]:
        rows = self.world.kafka.topics["t"][partition].messages
        return [(self.world.kafka.value("t", partition, o), rows[o]) for o in sorted(rows)]

    def fix_settings(self, which: str | None = None) -> None:
        """What a refusal's error tells a person to change: one setting, or (None) all."""
        for name in ("message.timestamp.after.max.ms", "max.message.bytes"):
            if which in (None, name):
                self.target.settings.pop(name, None)
        if which in (None, "cleanup.policy"):
            self.target.settings["cleanup.policy"] = "delete"

    def step(self, step: tuple) -> Outcome:
        out, (kind, *args) = Outcome(), step
        if kind == "fix_setting":
            self.fix_settings(*args)
            out.add(f"the target's {args[0] if args else 'settings'} fixed")
            return out
        crash = args[0]
        self.world.faults.arm(crash)
        try:
            with self._simulated_target():
                url, plan = replay.prepare(self.world.config, self.world.plain, self.request, 2)
                for part in plan["partitions"]:
                    done = replay_job.replay_partition(self.world.config, plan, part,
                                                       self.world.storage)
                    out.add(f"partition {part['partition']}: {done['messages']} messages, "
                            f"{done['sent']} sent")
        except Crash as kill:
            out.add(f"replay killed before {kill}")
        except ArchiveError as failed:
            out.add(f"replay failed: {type(failed).__name__}: {failed}")
        finally:
            self.world.faults.arm(0)
        return out

    def _simulated_target(self) -> ExitStack:
        stack = ExitStack()
        now_ms = int(time.time() * 1000)
        producer = Producer(self.target, self.world.faults, self.rng, now_ms)
        consumer = TargetConsumer(self.target)

        def read_range(_consumer, tp: TopicPartition, start: int, end: int, timeout_s=60):
            return iter(self.target.partitions[tp.partition][start:end])

        stack.enter_context(patch.object(brokers, "consumer", lambda *a, **k: consumer))
        stack.enter_context(patch.object(brokers, "producer", lambda *a, **k: producer))
        stack.enter_context(patch.object(brokers, "read_range", read_range))
        stack.enter_context(patch.object(replay_job, "target_settings",
                                         lambda *a: dict(self.target.settings)))
        # small enough that a sequence of a few dozen messages meets them
        stack.enter_context(patch.object(replay_job, "PROGRESS_EVERY", 3))
        stack.enter_context(patch.object(replay_job, "POLL_EVERY", 2))
        return stack

    def check(self, final: bool = False) -> None:
        for partition, held in self.target.partitions.items():
            got = [(d.value, d.timestamp) for d in held]
            want = self.expected[partition]
            if got != want[:len(got)]:
                raise Violation("not a prefix", f"target partition {partition} holds "
                                f"{len(got)} messages that are not the first {len(got)} of the "
                                "archived sequence (a gap, a repeat or another order)")
            if final and len(got) != len(want):
                raise Violation("replay stuck", f"target partition {partition} holds "
                                f"{len(got)} of {len(want)} messages after the setting was "
                                "fixed and the replay was run again")


def next_step(rng: random.Random) -> tuple:
    if rng.random() < 0.15:
        return ("fix_setting", rng.choice(("message.timestamp.after.max.ms", "max.message.bytes",
                                           "cleanup.policy")))
    return ("replay", rng.choice((0, 0, rng.randint(1, 14))))


def explore(seed: int, root: Path, length: int = 8) -> tuple[list[str], Violation | None]:
    """One replay sequence: the trace and the first invariant it broke (None: none)."""
    rng = random.Random(seed)
    world, trace = ReplayWorld(root, rng), []
    try:
        for n in range(length):
            step = next_step(rng)
            out = world.step(step)
            trace.append(f"{n + 1:3}. {step}")
            trace += [f"       {line}" for line in out.lines]
            world.check()
        world.step(("fix_setting",))
        for n in range(3):
            out = world.step(("replay", 0))
            trace += [f"  end: {line}" for line in out.lines]
        world.check(final=True)
    except Violation as found:
        return trace, found
    return trace, None
