"""Rewinding the event-time group on the real services never archives a message twice:
by deleting a token (with retention cutting into an archived slice) and by
`kafka-archive rewind` (to an offset inside a slice). After each, verify --full finds no
error, Hadoop's own reader finds each message exactly once across time partitions,
`_late/` and `_quarantine/`, and the audit of the group stays OK."""

from __future__ import annotations

import json
import time
from collections import Counter

import msgpack
import pytest
from kafka import KafkaAdminClient, TopicPartition
from kafka.admin import NewTopic
from test_partitioned import Archive, read_file
from test_rewind_cli import cli

from kafka_archive.airflow import tasks
from kafka_archive.audit.producer import AuditedProducer
from kafka_archive.formats import audit_counts
from kafka_archive.formats.sequencefile import BYTES_WRITABLE

HOUR, MIN = 3_600_000, 60_000
GROUPS = """\
partitioned:
  topics: {{include: ["{p}-.*"]}}
  layout: {{kind: event_time, granularity: hour}}
  parser: {{kind: json, field: ts, unit: ms}}
  lateness: 1m
"""


@pytest.fixture
def archive(airflow_env, kafka, s3, unique, tmp_path, monkeypatch):
    prefix = f"t{unique}"
    made = Archive(airflow_env, kafka, s3, prefix, tmp_path, GROUPS.format(p=prefix))
    made.monitoring = f"_mon-{prefix}"
    admin = KafkaAdminClient(bootstrap_servers=kafka)
    admin.create_topics([NewTopic(made.monitoring, 1, 1)])
    admin.close()
    made.config_path.write_text(made.config_path.read_text() + (
        f"audit: {{topic: {made.monitoring}, window: 1m, grace: 0, groups: [partitioned]}}\n"))
    made.in_env(monkeypatch)
    return made


def produce(archive: Archive, topic: str, start_ms: int, count: int) -> None:
    """count JSON messages round robin over 3 partitions, event time = record time,
    spread over the five hours after start_ms, through the audited producer."""
    with AuditedProducer(source="app", monitoring_topic=archive.monitoring,
                         bootstrap_servers=archive.kafka, acks="all") as producer:
        for i in range(count):
            ts = start_ms + i * (5 * HOUR // count)
            producer.send(topic, value=json.dumps({"ts": ts, "i": i}).encode(),
                          partition=i % 3, timestamp_ms=ts)


def hadoop_offsets(archive: Archive, sc, tmp_path) -> Counter:
    """(partition, offset) of every message in the group's data files (time partitions,
    `_late/`, `_quarantine/`), read by Hadoop's own SequenceFile reader."""
    found: Counter = Counter()
    folder = tmp_path / f"read-{time.monotonic_ns()}"
    folder.mkdir()
    for i, (path, data) in enumerate(sorted(archive.files("partitioned").items())):
        if not path.endswith(".seq"):
            continue
        local = folder / f"{i}.seq"
        local.write_bytes(data)
        for key, _ in sc.sequenceFile(str(local), BYTES_WRITABLE, BYTES_WRITABLE).collect():
            found[(int(path.rsplit("/", 1)[-1].split("_")[1]), msgpack.unpackb(bytes(key),
                                                                                strict_map_key=False)[1])] += 1
    return found


def verify_full(archive: Archive) -> str:
    done = cli(archive, "verify", "--group", "partitioned", "--full")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 errors" in done.stdout and "not in the catalog" not in done.stdout
    return done.stdout


def audit_ok(run_id: str) -> None:
    """Every window of the group OK (a mismatch would also fail the task)."""
    tasks.audit_ingest(run_id)
    totals = tasks.audit_reconcile("partitioned", run_id)["totals"]
    assert totals["OK"] > 0 and totals["OK"] == sum(totals.values()), totals


def test_rewinds_of_the_event_time_group_archive_each_message_once(archive, kafka, sc,
                                                                  tmp_path):
    topic = archive.create_topic("ev1", 3)
    start = audit_counts.window_start(int(time.time() * 1000) - 6 * HOUR, MIN)
    produce(archive, topic, start, 300)
    assert archive.run("partitioned", "first")["records"] == 300
    produce(archive, topic, start + 30_000, 300)  # the same hours again: two slices each
    assert archive.run("partitioned", "second")["records"] == 300
    verify_full(archive)
    everything = {(p, o) for p in range(3) for o in range(200)}
    assert hadoop_offsets(archive, sc, tmp_path) == Counter(everything)

    # 1. kafka-archive rewind to an offset inside the second slice of partition 0: the
    #    whole slice is archived again, its old files (hours and _late/) move aside
    done = cli(archive, "rewind", "--group", "partitioned", "--topic", topic,
               "--partition", "0", "--to-offset", "150")
    assert done.returncode == 0, done.stderr
    assert "token 200 -> 100 (rewound to 100: offset 150 is inside archived" in done.stdout
    summary = archive.run("partitioned", "after-cli-rewind")
    assert summary["records"] == 100
    verify_full(archive)
    assert hadoop_offsets(archive, sc, tmp_path) == Counter(everything)
    audit_ok("audit-1")

    # 2. retention cuts into the first slice of partition 1, then the token is deleted:
    #    every partition starts again from Kafka's earliest offset; partition 1's first
    #    slice straddles it and keeps its messages, every later slice is archived again
    admin = KafkaAdminClient(bootstrap_servers=kafka)
    admin.delete_records({TopicPartition(topic, 1): 40})
    admin.close()
    (archive.token_root / "partitioned" / f"{topic}.token").unlink()
    summary = archive.run("partitioned", "after-token-deleted")
    assert summary["tokens"][topic] == {"0": 200, "1": 200, "2": 200}
    assert summary["records"] == 200 + 100 + 200
    verify_full(archive)
    assert hadoop_offsets(archive, sc, tmp_path) == Counter(everything)
    audit_ok("audit-2")


def hour_folders(archive: Archive, sc, tmp_path, topic: str) -> Counter:
    """The values a folder reader of the topic's `dt=*/hr=*` partitions sees, as a Hive
    table over them would: Hadoop's reader through Spark over the glob (`_late/` and
    `_quarantine/` are not in it)."""
    folder = tmp_path / f"hive-{time.monotonic_ns()}"
    for path, data in archive.files("partitioned").items():
        if path.startswith(f"{topic}/dt=") and path.endswith(".seq"):
            (folder / path).parent.mkdir(parents=True, exist_ok=True)
            (folder / path).write_bytes(data)
    return Counter(bytes(value) for _, value in sc.sequenceFile(
        str(folder / topic / "dt=*" / "hr=*"), BYTES_WRITABLE, BYTES_WRITABLE).collect())


def test_no_kind_of_rewind_changes_what_the_hour_folders_hold(archive, kafka, sc, tmp_path):
    """Issue 31 §3, reproduced: with every hour finalized, a rewind archived the hours'
    messages again into `_late/`, and a reader of the hour folders went from all of them
    to none. Now each message goes back where it was: the 300 on time into their hours,
    the 30 that came late into `_late/` again, whatever kind of rewind."""
    topic = archive.create_topic("hive", 3)
    start = audit_counts.window_start(int(time.time() * 1000) - 6 * HOUR, MIN)
    produce(archive, topic, start, 300)
    archive.run("partitioned", "on-time")  # archives and finalizes the five hours
    produce(archive, topic, start + 30_000, 30)  # into final hours: `_late/`
    assert archive.run("partitioned", "late")["late"] == 30
    seen = hour_folders(archive, sc, tmp_path, topic)
    assert sum(seen.values()) == len(seen) == 300
    everything = Counter({(p, o) for p in range(3) for o in range(110)})
    token = archive.token_root / "partitioned" / f"{topic}.token"

    def rewound_by(what: str, command=None, edit=None) -> None:
        if command:
            done = cli(archive, "rewind", "--group", "partitioned", "--topic", topic, *command)
            assert done.returncode == 0, done.stderr
        if edit:
            edit()
        summary = archive.run("partitioned", f"after-{what}")
        assert summary["records"] > 0, what
        assert hour_folders(archive, sc, tmp_path, topic) == seen, what
        assert hadoop_offsets(archive, sc, tmp_path) == everything, what
        verify_full(archive)

    rewound_by("to-offset", ["--partition", "0", "--to-offset", "50"])
    rewound_by("to-time", ["--to-time", str(start + 2 * HOUR)])
    rewound_by("line-deleted", edit=lambda: token.write_text(
        "".join(line for line in token.read_text().splitlines(keepends=True)
                if not line.rstrip().endswith(" 1 110"))))
    rewound_by("file-deleted", edit=token.unlink)
    late = sum(len(read_file(path, data)) for path, data in archive.files("partitioned").items()
               if path.startswith(f"{topic}/_late/") and path.endswith(".seq"))
    assert late == 30  # and the late messages are back in `_late/`
