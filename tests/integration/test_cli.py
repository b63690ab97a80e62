"""`kafka-archive cat` and `verify` on an archive written by the real backup pipeline."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic

from tests.support.pipeline import airflow

CLI = str(Path(sys.executable).parent / "kafka-archive")
BINARY = bytes(range(256))


@dataclass(frozen=True)
class Archive:
    env: dict[str, str]
    topic: str
    root: str                        # s3://bucket/prefix
    sent: dict[int, list[tuple]]     # partition -> [(key, value)] in offset order


def _produce(kafka: str, topic: str) -> dict[int, list[tuple]]:
    admin = KafkaAdminClient(bootstrap_servers=kafka)
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
    admin.close()
    sent: dict[int, list[tuple]] = {0: [], 1: []}
    for i in range(30):
        sent[i % 2].append((f"key-{i}".encode(), f"value-{i}".encode()))
    sent[0][3] = (b"deleted-key", None)   # a tombstone: null value with a key
    sent[0][4] = (b"empty-key", b"")      # an empty value, not a tombstone
    sent[0][5] = (None, BINARY)           # no key, every byte value
    producer = KafkaProducer(bootstrap_servers=kafka, acks="all")
    for partition, messages in sent.items():
        for key, value in messages:
            producer.send(topic, key=key, value=value, partition=partition,
                          headers=[("source", b"test-cli")])
    producer.flush()
    producer.close()
    return sent


@pytest.fixture(scope="module")
def archive(kafka, s3, airflow_env, tmp_path_factory) -> Archive:
    unique = uuid.uuid4().hex[:10]
    topic = f"cli-{unique}-events"
    root = f"s3://{s3.bucket}/cli-{unique}"
    folder = tmp_path_factory.mktemp("cli")
    config = folder / "kafka-archive.yaml"
    config.write_text(f"""
kafka: {{bootstrap_servers: "{kafka}"}}
archive_root: {root}
token_root: {folder / "offsets"}
groups:
  backup:
    schedule: null
    topics: {{include: ["cli-{unique}-.*"]}}
""")
    sent = _produce(kafka, topic)
    env = {**airflow_env, "KAFKA_ARCHIVE_CONFIG": str(config)}
    airflow(env, "dags", "test", "kafka_archive_backup")
    return Archive(env, topic, root, sent)


def _cli(archive: Archive, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, *args], env=archive.env, capture_output=True, text=True,
                          timeout=120)


def _file_url(archive: Archive, partition: int, first_offset: int) -> str:
    return (f"{archive.root}/backup/{archive.topic}/partition={partition}/"
            f"1_{partition}_{first_offset:020d}.seq")


def test_verify_reports_each_partition_and_passes(archive):
    result = _cli(archive, "verify", "--group", "backup")
    assert result.returncode == 0, result.stdout + result.stderr
    for partition in (0, 1):
        assert (f"{archive.topic} partition={partition} generation 1: 1 files, 15 records, "
                f"offsets 0..14, token 15") in result.stdout
    assert result.stdout.rstrip().endswith("group backup: 2 partitions, 2 files, 0 errors")


def test_cat_lists_every_record_with_null_empty_and_binary_values(archive):
    result = _cli(archive, "cat", _file_url(archive, 0, 0))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [int(line.split()[0]) for line in lines] == list(range(15))
    assert all(line.endswith("headers=source") for line in lines)
    assert "key=deleted-key  value=<null>" in lines[3]
    assert "key=empty-key  value=<empty>" in lines[4]
    # bytes that are not printable UTF-8 escaped, cut after 200 characters
    assert "key=<null>  value=\\x00\\x01\\x02" in lines[5] and "\\t\\n\\x0b" in lines[5]
    assert "...(+" in lines[5] and " chars)  headers=source" in lines[5]
    assert "key=key-0  value=value-0" in lines[0]
    assert lines[0].split()[1].endswith("Z")  # ISO timestamp in UTC

    limited = _cli(archive, "cat", "--limit", "2", _file_url(archive, 1, 0))
    assert [line.split()[0] for line in limited.stdout.splitlines()] == ["0", "1"]


def test_cat_json_round_trips_every_record(archive):
    result = _cli(archive, "cat", "--format", "json", _file_url(archive, 0, 0))
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    unb64 = lambda s: None if s is None else base64.b64decode(s)  # noqa: E731
    assert [(unb64(r["key"]), unb64(r["value"])) for r in records] == archive.sent[0]
    assert all([(n, unb64(v)) for n, v in r["headers"]] == [("source", b"test-cli")]
               and r["timestamp_ms"] > 1_700_000_000_000 for r in records)
    raw = subprocess.run([CLI, "cat", "--format", "raw", _file_url(archive, 0, 0)],
                         env=archive.env, capture_output=True, timeout=120)
    assert raw.stdout.split(b"\n")[:5] == [v or b"" for _, v in archive.sent[0][:5]]


def test_cat_of_a_missing_or_damaged_file_names_it(archive, s3):
    missing = _file_url(archive, 0, 99)
    result = _cli(archive, "cat", missing)
    assert result.returncode == 1
    assert f"cannot read archived file {missing}" in result.stderr
    assert "Traceback" not in result.stderr

    manifest_dir = f"{archive.root}/_runs/backup"
    bucket, prefix = manifest_dir[len("s3://"):].split("/", 1)
    keys = [o["Key"] for o in s3.client.list_objects_v2(Bucket=bucket, Prefix=prefix)["Contents"]]
    manifest = f"s3://{bucket}/" + next(k for k in keys if k.endswith("/manifest.json"))
    result = _cli(archive, "cat", manifest)
    assert result.returncode == 1
    assert (f"cannot read archived file {manifest}: {manifest}: not an archive file name"
            in result.stderr)


def test_verify_full_fails_on_a_copy_that_duplicates_offsets(archive, s3):
    """A stray copy is no file of the catalog: verify checks the catalog's files, and
    --full walks the tree and finds the copy."""
    original, copy = _file_url(archive, 0, 0), _file_url(archive, 0, 5)
    bucket, key = original[len("s3://"):].split("/", 1)
    copy_key = copy[len("s3://") + len(bucket) + 1:]
    s3.client.copy_object(Bucket=bucket, Key=copy_key, CopySource={"Bucket": bucket, "Key": key})
    try:
        current = _cli(archive, "verify", "--group", "backup")
        result = _cli(archive, "verify", "--group", "backup", "--full")
    finally:
        s3.client.delete_object(Bucket=bucket, Key=copy_key)
    assert current.returncode == 0 and "2 partitions, 2 files, 0 errors" in current.stdout
    assert result.returncode == 1, result.stdout
    assert f"{copy}: in the tree, not in the catalog" in result.stdout
    assert f"duplicate offsets [0, 14] are in both {original} and {copy}" in result.stdout
    assert f"{copy}: first record has offset 0, but the file name says 5" in result.stdout
    assert result.stdout.rstrip().endswith("group backup: 2 partitions, 3 files, 2 errors")


def test_every_command_uses_the_config_it_was_given(archive, kafka, tmp_path, smtp_maildir):
    """`--config X` wins over $KAFKA_ARCHIVE_CONFIG for every subcommand (the audit's tasks
    used to read the environment's config): here the environment names a file that does
    not exist, so any command reading it fails."""
    from kafka.admin import KafkaAdminClient, NewTopic

    monitoring = f"_mon-{archive.topic}"
    admin = KafkaAdminClient(bootstrap_servers=kafka)
    admin.create_topics([NewTopic(monitoring, 1, 1)])
    admin.close()
    given = tmp_path / "given.yaml"
    given.write_text(Path(archive.env["KAFKA_ARCHIVE_CONFIG"]).read_text()
                     + f"audit: {{topic: {monitoring}, window: 1m, grace: 0, groups: [backup]}}\n")
    env = {**archive.env, "KAFKA_ARCHIVE_CONFIG": str(tmp_path / "not-this-one.yaml")}
    commands = [["status", "--group", "backup"], ["verify", "--group", "backup"],
                ["ls", "--group", "backup"], ["catalog", "--group", "backup"],
                ["cat", _file_url(archive, 0, 0), "--limit", "1"],
                ["audit", "--group", "backup"], ["audit", "list", "--group", "backup"],
                ["preflight"]]
    for command in commands:
        done = subprocess.run([CLI, "--config", str(given), *command], env=env,
                              capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, (command, done.stdout[-1500:], done.stderr[-1500:])
        assert "not-this-one" not in done.stdout + done.stderr, command
