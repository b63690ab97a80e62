"""The benchmarks' data and Kafka's own tools: JSON log lines that compress like real logs,
ProducerPerformance to fill a topic with them, ConsumerPerformance as the read baseline."""

from __future__ import annotations

import json
import random
import re
import string
import subprocess
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from tests.support.localservices import ROOT

KAFKA_JARS = ROOT / ".cache" / "jars" / "kafka" / "*"
MIB = 1 << 20
POOL_SIZE = 50_000


# --- the data ---------------------------------------------------------------------------

_WORDS = ("request handled user session cache miss hit retry upstream timeout connection "
          "pool order payment invoice shipment created updated deleted queued processed "
          "failed accepted rejected token refresh validation schema record batch commit "
          "offset partition leader replica fetch produce latency slow query index table "
          "row lock acquired released worker thread scheduler job started finished").split()
_SERVICES = ["checkout", "payments", "search", "inventory", "auth", "gateway", "shipping",
             "recommendations", "notifications", "billing"]
_PATHS = ["/api/v1/orders", "/api/v1/orders/{id}", "/api/v1/cart", "/api/v2/search",
          "/api/v1/users/{id}/profile", "/api/v1/payments", "/healthz", "/api/v1/items/{id}"]


def log_line(rng: random.Random, size: int, when: datetime) -> bytes:
    """One JSON log line of exactly `size` bytes (ASCII): structured fields, then free text
    in `msg` cut to make up the size."""
    service = rng.choice(_SERVICES)
    fields = {
        "ts": (when + timedelta(microseconds=rng.randrange(3_600_000_000)))
        .isoformat(timespec="microseconds"),
        "level": rng.choices(["INFO", "DEBUG", "WARN", "ERROR"], [70, 15, 10, 5])[0],
        "service": service,
        "host": f"{service}-{rng.randrange(40):02d}.prod.internal",
        "pod": f"{service}-{''.join(rng.choices(string.ascii_lowercase + string.digits, k=10))}",
        "trace_id": f"{rng.getrandbits(128):032x}",
        "span_id": f"{rng.getrandbits(64):016x}",
        "user_id": rng.randrange(10_000_000),
        "http": {"method": rng.choice(["GET", "GET", "GET", "POST", "PUT", "DELETE"]),
                 "path": rng.choice(_PATHS).replace("{id}", str(rng.randrange(1_000_000))),
                 "status": rng.choices([200, 201, 204, 400, 404, 500, 503],
                                       [80, 5, 5, 3, 4, 2, 1])[0],
                 "latency_ms": round(rng.lognormvariate(3, 1), 3),
                 "bytes": rng.randrange(100, 200_000)},
        "msg": "",
    }
    base = len(json.dumps(fields, separators=(",", ":")))
    if base >= size:
        raise ValueError(f"--message-bytes {size} is too small for a log line ({base} bytes)")
    words: list[str] = []
    while sum(map(len, words)) + len(words) - 1 < size - base:  # joined with spaces
        words.append(rng.choice(_WORDS) if rng.random() < 0.9 else str(rng.randrange(100_000)))
    fields["msg"] = " ".join(words)[:size - base]
    line = json.dumps(fields, separators=(",", ":")).encode()
    assert len(line) == size, (len(line), size)
    return line


def write_pool(path: Path, size: int, count: int = POOL_SIZE) -> None:
    rng = random.Random(20260101)
    when = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0)
    with open(path, "wb") as out:
        for _ in range(count):
            out.write(log_line(rng, size, when) + b"\n")


# --- Kafka --------------------------------------------------------------------------------

def kafka_tool(main_class: str, *args: str, heap: str = "512m", timeout: int = 3600) -> str:
    """Run one of Kafka's tools from the broker's own jars (the heap of Kafka's own
    kafka-*-perf-test.sh scripts by default); its stdout."""
    command = ["java", f"-Xmx{heap}", "-XX:+UseG1GC", "-cp", str(KAFKA_JARS),
               f"org.apache.kafka.tools.{main_class}", *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"{main_class} exited {result.returncode}:\n{result.stderr[-3000:]}")
    return result.stdout


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
    finally:
        admin.close()


def delete_topics(bootstrap: str, names: list[str]) -> None:
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        existing = set(admin.list_topics())
        if doomed := [n for n in names if n in existing]:
            admin.delete_topics(doomed)
    finally:
        admin.close()


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    try:
        parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
        return {tp.partition: o for tp, o in consumer.end_offsets(parts).items()}
    finally:
        consumer.close()


@dataclass
class Throughput:
    seconds: float
    messages: int
    payload_bytes: int
    tool_msg_s: float | None = None

    @property
    def mib_s(self) -> float:
        return self.payload_bytes / MIB / self.seconds

    @property
    def msg_s(self) -> float:
        return self.messages / self.seconds


def produce(bootstrap: str, topic: str, messages: int, pool: Path, message_bytes: int,
            idempotent: bool = False) -> tuple[Throughput, dict[int, int]]:
    """ProducerPerformance sends `messages` lines of `pool` to `topic`: acks=1 to fill a
    topic, or (idempotent) as the replay's producer sends, acks=all with idempotence and
    the same batching. Its time includes the JVM's start; `tool_msg_s` is the tool's own
    rate (without it)."""
    acks = ["acks=all", "enable.idempotence=true"] if idempotent else ["acks=1"]
    started = time.perf_counter()
    out = kafka_tool("ProducerPerformance", "--topic", topic, "--num-records", str(messages),
                     "--throughput", "-1", "--payload-file", str(pool),
                     "--producer-props", f"bootstrap.servers={bootstrap}", *acks,
                     "compression.type=none", "linger.ms=20", f"batch.size={1 << 20}",
                     f"buffer.memory={64 << 20}", f"max.request.size={8 << 20}",
                     heap="1g")  # the payload pool and the buffers
    seconds = time.perf_counter() - started
    # its last line: "N records sent, X records/sec (Y MB/sec), ..."
    rate = re.findall(r"records sent, ([\d.]+) records/sec", out)
    per_partition = end_offsets(bootstrap, topic)
    if sum(per_partition.values()) != messages:
        raise RuntimeError(f"asked ProducerPerformance for {messages} messages, topic has "
                           f"{sum(per_partition.values())}")
    return (Throughput(seconds, messages, messages * message_bytes,
                       float(rate[-1]) if rate else None), per_partition)


@dataclass
class ConsumerRun:
    mib_s: float        # Kafka's MB.sec: from subscribe to the last message (group join included)
    msg_s: float        # nMsg.sec, same interval
    fetch_mib_s: float  # fetch.MB.sec: without the group join
    fetch_msg_s: float
    messages: int


def consumer_perf(bootstrap: str, topic: str, messages: int) -> ConsumerRun:
    out = kafka_tool("ConsumerPerformance", "--bootstrap-server", bootstrap, "--topic", topic,
                     "--messages", str(messages), "--timeout", "60000",
                     "--group", f"bench-perf-{time.time_ns()}")
    lines = [l for l in out.splitlines() if l.strip()]
    header = next(i for i, l in enumerate(lines) if l.startswith("start.time"))
    names = [n.strip() for n in lines[header].split(",")]
    values = dict(zip(names, (v.strip() for v in lines[header + 1].split(","))))
    run = ConsumerRun(float(values["MB.sec"]), float(values["nMsg.sec"]),
                      float(values["fetch.MB.sec"]), float(values["fetch.nMsg.sec"]),
                      int(values["data.consumed.in.nMsg"]))
    if run.messages < messages:
        raise RuntimeError(f"ConsumerPerformance read {run.messages} of {messages} messages")
    return run
