"""A full local disk: the Spark job writes each slice to a local temp file (in Spark's local
dir, spark.local.dir or SPARK_LOCAL_DIRS) before uploading it. On a real, nearly full filesystem (a 64 MiB tmpfs) the job fails naming the
file and the space left, nothing is committed, and once space is freed the next run
completes the same plan with every message archived exactly once."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from kafka_archive import layout, spark
from kafka_archive.airflow import connections
from kafka_archive.errors import TerminalError
from tests.support.pipeline import GROUP, Pipeline

MESSAGES, SIZE = 320, 64 * 1024  # 20 MiB of incompressible values, more than is left


def _as_root(*command: str) -> None:
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    result = subprocess.run([*sudo, *command], capture_output=True, text=True)
    if result.returncode != 0:
        pytest.fail(f"{' '.join(command)} failed ({result.stderr.strip()}): this test mounts a "
                    "small tmpfs and needs root or passwordless sudo, as scripts/install does")


@pytest.fixture
def small_disk(tmp_path):
    """A 64 MiB tmpfs, unmounted afterwards."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    _as_root("mount", "-t", "tmpfs", "-o", "size=64m,mode=1777", "tmpfs", str(mount))
    try:
        yield mount
    finally:
        _as_root("umount", str(mount))


def fill(mount, leave: int):
    """A filler file taking all but `leave` bytes of the filesystem."""
    filler = mount / "filler"
    with open(filler, "wb") as f:
        f.write(b"\0" * (shutil.disk_usage(mount).free - leave))
    return filler


def test_full_disk_fails_naming_path_and_space_commits_nothing_then_completes(
        small_disk, airflow_env, kafka, s3, tmp_path, monkeypatch, unique):
    mount = small_disk
    pipeline = Pipeline(airflow_env, kafka, s3, f"full{unique}", tmp_path)
    pipeline.in_env(monkeypatch)
    topic = pipeline.create_topic("big", 1)
    values = [os.urandom(SIZE) for _ in range(MESSAGES)]
    pipeline.produce([(topic, 0, None, v, None) for v in values])
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(mount))  # Spark's scratch: the slice files
    # Spark copies what it ships (library zip, config) there, once for the driver and once
    # for the executor; then at most 1 MiB is left for the slice
    shipped = spark.library_zip().stat().st_size + pipeline.config_path.stat().st_size
    filler = fill(mount, 2 * shipped + 1024 * 1024)

    plan_url = pipeline.plan("full-disk-run")
    job = pipeline.archive(plan_url)
    assert job.wait(timeout=600) != 0
    log = pipeline.job_log.read_text(errors="replace")
    assert "DiskFullError" in log and "no space left" in log, log[-3000:]
    failure = next(line for line in log.splitlines() if "DiskFullError: writing" in line)
    assert f"to local {mount}/" in failure and "/kafka-archive-" in failure  # the local file
    assert f"s3://{s3.bucket}/{pipeline.root_key}/{GROUP}/{topic}/partition=0/" in failure
    assert "bytes free of" in failure                               # the space left
    free = int(failure.split(" bytes free of")[0].rsplit("(", 1)[1])
    assert free < MESSAGES * SIZE

    storage = connections.storage("kafka_archive_s3")
    assert storage.get_or_none(layout.run_file(pipeline.root, GROUP, "full-disk-run",
                                               "manifest.json")) is None
    with pytest.raises(TerminalError, match="manifest.json; the archive job did not finish"):
        pipeline.commit(plan_url)                  # nothing to commit: no manifest
    assert pipeline.tokens.topics(GROUP) == []     # no token moved
    assert pipeline.data_files() == {}             # no slice file reached S3
    assert list(mount.rglob("kafka-archive-*")) == []  # the partial temp file was removed

    filler.unlink()                                # space freed: the same plan completes
    assert pipeline.plan("next-run") == plan_url   # the plan in flight, re-executed
    pipeline.archive_to_end(plan_url)
    pipeline.commit(plan_url)
    assert pipeline.token_offsets() == {topic: {0: MESSAGES}}
    archived = pipeline.archived_records()
    assert [(r[2], r[4]) for r in archived] == list(enumerate(values))  # once each, in order
