"""`kafka-archive rewind` on the real services: the token moves back, the next run moves
the files it replaces aside and archives every message exactly once, and the archive is
the same as after a rewind by deleting the token; so is a rewind asked for in the trigger
params of a run on the real Airflow."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from kafka import KafkaProducer
from test_airflow_rest import run_to_end
from test_backup_archive import consumed, varied_messages

from kafka_archive.plan.rewinds import format_ms
from kafka_archive.tokens import open_store
from tests.support.pipeline import Pipeline, objects

CLI = str(Path(sys.executable).parent / "kafka-archive")
BASE_MS = (int(time.time()) - 86_400) * 1000  # message timestamps: a day ago, 1 s apart


def cli(pipeline: Pipeline, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, *args], env=pipeline.env, capture_output=True, text=True,
                          timeout=120)


def produce_timed(kafka: str, topic: str, offsets: range) -> None:
    """One message per offset of a fresh one-partition topic, at BASE_MS + offset s."""
    producer = KafkaProducer(bootstrap_servers=kafka, acks="all")
    for offset in offsets:
        producer.send(topic, value=f"{topic}-{offset}".encode(), partition=0,
                      timestamp_ms=BASE_MS + offset * 1000)
    producer.flush()
    producer.close()


def superseded(pipeline: Pipeline) -> list[str]:
    """Keys below <root>/_superseded/, relative to it."""
    prefix = f"{pipeline.root_key}/_superseded/"
    listing = pipeline.s3.client.list_objects_v2(Bucket=pipeline.s3.bucket, Prefix=prefix)
    return sorted(o["Key"][len(prefix):] for o in listing.get("Contents", []))


@pytest.fixture
def pipeline(airflow_env, kafka, s3, unique, tmp_path):
    return Pipeline(airflow_env, kafka, s3, f"t{unique}", tmp_path)


def test_rewind_to_an_offset_and_to_a_time_then_each_message_once(pipeline, kafka):
    by_offset = pipeline.create_topic("byoffset", 1)
    by_time = pipeline.create_topic("bytime", 1)
    for topic in (by_offset, by_time):
        produce_timed(kafka, topic, range(0, 20))
    pipeline.run("first")
    for topic in (by_offset, by_time):
        produce_timed(kafka, topic, range(20, 30))
    pipeline.run("second")  # files 0..19 and 20..29 in each topic
    token_file = pipeline.token_root / "backup" / f"{by_offset}.token"
    token_text = token_file.read_text()

    forward = cli(pipeline, "rewind", "--group", "backup", "--topic", by_offset,
                  "--to-offset", "31")
    assert forward.returncode == 1
    assert (f"backup/{by_offset} partition 0: offset 31 is past the token 30; a rewind only "
            "moves back") in forward.stderr
    assert "Traceback" not in forward.stderr and token_file.read_text() == token_text

    # offset 25 is inside the second file: the rewind goes to that file's first offset
    done = cli(pipeline, "rewind", "--group", "backup", "--topic", by_offset, "--partition", "0",
               "--to-offset", "25")
    assert done.returncode == 0, done.stderr
    file_20 = f"{pipeline.root}/backup/{by_offset}/partition=0/1_0_{20:020d}.seq"
    assert (f"backup/{by_offset} partition 0: token 30 -> 20 (rewound to 20: offset 25 is inside "
            f"archived file {file_20} (offsets 20..29), which is archived again whole); the next "
            "run moves 1 archived file aside and archives from 20") in done.stdout

    # half a second after message 5: the first message at or after that time is 6, which
    # is inside the first file, so the whole topic is archived again
    when = format_ms(BASE_MS + 5_500)
    done = cli(pipeline, "rewind", "--group", "backup", "--topic", by_time, "--to-time", when)
    assert done.returncode == 0, done.stderr
    assert (f"backup/{by_time} partition 0 (the first message at or after {when} is offset 6): "
            "token 30 -> 0") in done.stdout
    assert "token 30 -> 0 (rewound to 0: offset 6 is inside archived file" in done.stdout
    assert "moves 2 archived files aside and archives from 0" in done.stdout
    assert pipeline.token_offsets() == {by_offset: {0: 20}, by_time: {0: 0}}

    pipeline.run("after-rewind")

    archived = pipeline.archived_records()
    assert len(archived) == len(set(archived)) == 60  # each message exactly once
    assert set(archived) == consumed(kafka, [by_offset, by_time])
    assert superseded(pipeline) == sorted(
        [f"after-rewind/backup/{by_offset}/partition=0/1_0_{20:020d}.seq"]
        + [f"after-rewind/backup/{by_time}/partition=0/1_0_{first:020d}.seq" for first in (0, 20)])
    assert sorted(pipeline.data_files()) == sorted(
        [f"backup/{by_offset}/partition=0/1_0_{first:020d}.seq" for first in (0, 20)]
        + [f"backup/{by_time}/partition=0/1_0_{0:020d}.seq"])
    assert pipeline.token_offsets() == {by_offset: {0: 30}, by_time: {0: 30}}
    check = cli(pipeline, "verify", "--group", "backup")
    assert check.returncode == 0 and "0 errors" in check.stdout, check.stdout + check.stderr


def test_rewind_by_cli_and_by_deleting_the_token_give_identical_archives(
        airflow_env, kafka, s3, unique, tmp_path):
    deleted = Pipeline(airflow_env, kafka, s3, f"t{unique}", tmp_path, name="deleted")
    rewound = Pipeline(airflow_env, kafka, s3, f"t{unique}", tmp_path, name="rewound")
    topic = deleted.create_topic("same", 2)  # both archive the same topic
    deleted.produce(varied_messages(topic, 2, 40, seed=21))
    for pipeline in (deleted, rewound):
        pipeline.run("first")
    deleted.produce(varied_messages(topic, 2, 10, seed=22))

    (deleted.token_root / "backup" / f"{topic}.token").unlink()
    done = cli(rewound, "rewind", "--group", "backup", "--topic", topic, "--to-offset", "0")
    assert done.returncode == 0, done.stderr
    assert [line.split(":")[0] for line in done.stdout.splitlines()] == [
        f"backup/{topic} partition 0", f"backup/{topic} partition 1"]
    for pipeline in (deleted, rewound):
        pipeline.run("second")

    files = deleted.data_files()
    assert files == rewound.data_files()  # same names, same bytes
    assert superseded(deleted) == superseded(rewound) == [
        f"second/backup/{topic}/partition={p}/1_{p}_{0:020d}.seq" for p in (0, 1)]
    archived = rewound.archived_records()
    assert len(archived) == len(set(archived)) == 50
    assert set(archived) == consumed(kafka, [topic])
    assert deleted.token_offsets() == rewound.token_offsets() == {topic: {0: 25, 1: 25}}


def test_rewind_by_trigger_params_and_by_deleting_the_token_give_identical_archives(
        airflow_stack, airflow_env, kafka, s3, unique, tmp_path):
    """Two archives of the same topic: the real Airflow's (its own root and tokens), rewound
    by a run triggered through the REST API with a `rewind` param, and one of this test's,
    rewound by deleting its token file before the next run."""
    stack_format = airflow_stack.config().group("backup").format  # the example config's
    deleted = Pipeline(airflow_env, kafka, s3, f"t{unique}", tmp_path, name="deleted",
                       group_extra=f"format: {{kind: {stack_format.kind}, key: {stack_format.key}, "
                                   f"compression: {stack_format.compression}}}\n")
    topic = deleted.create_topic("same", 2)
    deleted.produce(varied_messages(topic, 2, 40, seed=21))
    airflow_stack.unpause("kafka_archive_backup")
    run_to_end(airflow_stack, {"topics": [topic]})
    # in this session's long-lived Spark: since `fast` is ISA-L's level 3, whose bytes do
    # not depend on the process, as the archive task's spark-submit writes them
    deleted.run("first")
    deleted.produce(varied_messages(topic, 2, 10, seed=22))

    (deleted.token_root / "backup" / f"{topic}.token").unlink()
    deleted.run("second")
    run_to_end(airflow_stack, {"topics": [topic], "rewind": [{"topic": topic, "offset": 0}]},
               run_id=f"rewound-{unique}")

    cfg = airflow_stack.config()
    stack_root = cfg.archive_root.removeprefix(f"s3://{s3.bucket}/")
    assert objects(s3, stack_root, f"backup/{topic}/") == deleted.data_files()  # names, bytes
    moved_aside = objects(s3, f"{stack_root}/_superseded/rewound-{unique}")
    assert moved_aside == objects(s3, f"{deleted.root_key}/_superseded/second")
    assert sorted(moved_aside) == [f"backup/{topic}/partition={p}/1_{p}_{0:020d}.seq"
                                   for p in (0, 1)]
    archived = deleted.archived_records()
    assert len(archived) == len(set(archived)) == 50  # each message exactly once
    assert set(archived) == consumed(kafka, [topic])
    stack_tokens = open_store(cfg.token_root, lambda: s3.client).read("backup", topic).token
    assert dict(stack_tokens.offsets) == deleted.token_offsets()[topic] == {0: 25, 1: 25}


def test_s3_listing_starts_after_a_key_server_side(s3, unique):
    """What keeps a run's check for files beyond its tokens to one cheap request."""
    from kafka_archive.storage import Storage

    folder = f"s3://{s3.bucket}/{unique}/partition=0"
    storage = Storage(lambda: s3.client)
    for first in (0, 10, 20):
        storage.put_bytes(f"{folder}/1_0_{first:020d}.seq", b"x")
    assert [url for url, _ in storage.list(folder, start_after=f"{folder}/1_0_{9:020d}~")] == [
        f"{folder}/1_0_{first:020d}.seq" for first in (10, 20)]
