"""The partitioned group end to end on the real services: parsed event times laid out in
dt=/hr= partitions, unreadable messages quarantined with their reasons, every format
through the real Spark job, the finalizer and late events, backfill from the backup,
generations."""

from __future__ import annotations

import io
import json
import random
import subprocess
import sys
import textwrap
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import msgpack
import pytest
from tests.support.pipeline import airflow
from test_backup_archive import consumed

from kafka_archive import config as config_module, formats
from kafka_archive.airflow import connections
from kafka_archive.formats import records
from kafka_archive.tokens import LocalTokenStore
from kafka_archive.tools import backfill, verify
from tests.support.pipeline import Pipeline

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
HOUR = 3_600_000


def hour_path(ms: int) -> str:
    """The expected time partition, computed independently of kafka_archive.layout."""
    return (EPOCH + timedelta(milliseconds=ms)).strftime("dt=%Y-%m-%d/hr=%H")


class Archive(Pipeline):
    """A pipeline whose config has the backup group and event-time groups (YAML given)."""

    def __init__(self, env, kafka, s3, prefix, tmp_path, groups: str, name: str = "main",
                 generation: int = 1):
        super().__init__(env, kafka, s3, prefix, tmp_path, name=name)
        self.write_config(groups, generation)

    def write_config(self, groups: str, generation: int = 1) -> None:
        self.config_path.write_text(textwrap.dedent(f"""\
            kafka: {{bootstrap_servers: "{self.kafka}"}}
            archive_root: {self.root}
            token_root: {self.token_root}
            generation: {generation}
            groups:
              backup:
                topics: {{include: ["{self.prefix}-.*"]}}
            """) + textwrap.indent(textwrap.dedent(groups), "  "))

    def run(self, group: str, run_id: str) -> dict | None:
        """The DAG's steps in this process (the test has put the config in the env)."""
        from kafka_archive.airflow import tasks

        plan_url = tasks.plan(group, run_id)
        if plan_url is None:
            return None
        self.archive_to_end(plan_url)
        summary = tasks.commit(plan_url)
        tasks.finalize(group, run_id)
        return summary

    def files(self, group: str) -> dict[str, bytes]:
        """Every object under the group (data, quarantine, late, markers), by path below it."""
        return _objects(self, group)

    def produce_at(self, messages) -> None:
        """messages: (topic, partition, key, value, timestamp_ms)."""
        self.produce((topic, partition, key, value, None, ts)
                     for topic, partition, key, value, ts in messages)


def read_file(path: str, data: bytes) -> list[records.Record]:
    return list(formats.read(io.BytesIO(data), path))


def laid_out(files: dict[str, bytes], event: dict) -> tuple[list, dict, set]:
    """What a first run of an event-time group wrote (Archive.files): each archived
    message (as test_backup_archive.consumed gives it), the quarantined values with
    their reasons, and the time partitions with `_SUCCESS`. Each file's rows in offset
    order from the offset its name says; each message in the hour `event` gives it
    ((topic, value) -> ms); nothing late (nothing was final when planned)."""
    kept, quarantined, success = [], {}, set()
    for path, data in files.items():
        topic, *folders, name = path.split("/")
        if name == "_SUCCESS":
            success.add("/".join(folders))
            continue
        if name.startswith("_"):  # the finalizer's watermark
            continue
        rows = read_file(path, data)
        assert [r.offset for r in rows] == sorted(r.offset for r in rows)
        assert int(name.split("_")[2].split(".")[0]) == rows[0].offset, path
        if folders[0] == "_quarantine":
            quarantined.update({r.value: r.error for r in rows})
        else:
            assert folders[0] != "_late", path
            for r in rows:
                assert hour_path(event[(topic, r.value)]) == "/".join(folders), (path, r)
        partition = int(name.split("_")[1])
        kept += [(topic, partition, r.offset, r.key, r.value, r.timestamp_ms, tuple(r.headers))
                 for r in rows]
    return kept, quarantined, success


PARTITIONED = """\
partitioned:
  topics: {{include: ["{p}-.*"]}}
  layout: {{kind: event_time, granularity: hour}}
  parser: {{kind: json, field: {field}, unit: ms}}
  topic_parsers:
    "{p}-mp": {{kind: msgpack, field: meta.t, unit: s}}
    "{p}-rec": timestamp
  lateness: 1h
"""


@pytest.fixture
def archive(airflow_env, kafka, s3, unique, tmp_path, monkeypatch):
    made = Archive(airflow_env, kafka, s3, f"t{unique}", tmp_path,
                   PARTITIONED.format(p=f"t{unique}", field="ts"))
    made.in_env(monkeypatch)
    return made


def test_json_msgpack_and_timestamp_topics_land_in_their_hours_bad_ones_in_quarantine(
        archive, kafka):
    rng = random.Random(7)
    now = int(time.time() * 1000)
    js, mp, rec = (archive.create_topic(n, parts) for n, parts in (("js", 2), ("mp", 1), ("rec", 1)))
    event = {}  # (topic, value) -> event time ms
    messages = []
    for i in range(120):  # random event times over the last four days, and some in this hour
        ms = now - rng.randrange(0, 4 * 24 * HOUR) if i % 10 else now
        value = json.dumps({"ts": ms, "i": i}).encode()
        event[(js, value)] = ms
        messages.append((js, i % 2, None, value, now))
    bad = [b"not json", json.dumps({"other": 1}).encode(), json.dumps({"ts": "soon"}).encode(),
           None]
    messages += [(js, 0, b"k", value, now) for value in bad]
    for i in range(40):
        ms = now - rng.randrange(0, 4 * 24 * HOUR)
        value = msgpack.packb({"meta": {"t": ms / 1000}, "i": i})
        event[(mp, value)] = ms
        messages.append((mp, 0, None, value, now))
    for i in range(40):
        ms = now - rng.randrange(0, 4 * 24 * HOUR)
        value = f"record {i}".encode()
        event[(rec, value)] = ms
        messages.append((rec, 0, None, value, ms))
    archive.produce_at(messages)
    expected = consumed(kafka, [js, mp, rec])
    assert len(expected) == 204

    airflow(archive.env, "dags", "test", "kafka_archive_partitioned")
    archive.run("backup", "backup-1")

    kept, quarantined, success = laid_out(archive.files("partitioned"), event)
    # nothing dropped, nothing twice: archived + quarantined = consumed
    assert len(kept) == len(set(kept)) == len(expected) and set(kept) == expected
    assert set(quarantined) == set(bad)
    assert "is not a JSON object" in quarantined[b"not json"]
    assert "no field 'ts'" in quarantined[json.dumps({"other": 1}).encode()]
    assert "is not a number" in quarantined[json.dumps({"ts": "soon"}).encode()]
    assert "tombstone" in quarantined[None]
    # the run reports them: committed summary and manifest count
    committed = [json.loads(data) for key, data in _objects(archive, "_runs/partitioned").items()
                 if key.endswith("committed.json")]
    assert [c["quarantined"] for c in committed] == [4]

    # finalized: every hour that ended over an hour ago (all archived, caught up), not this one
    hours = {hour_path(ms) for ms in event.values()}
    final = {h for h in hours if int(datetime.strptime(h, "dt=%Y-%m-%d/hr=%H").replace(
        tzinfo=timezone.utc).timestamp() * 1000) + HOUR + HOUR <= now}
    assert hour_path(now) not in success
    assert final and final <= success

    # the backup group is untouched by the parser: every message verbatim
    assert set(archive.archived_records()) == expected

    # verify understands the event-time layout
    cfg = config_module.load()
    report = verify.verify_group(cfg, "partitioned", connections.storage(cfg.s3_conn_id),
                                 LocalTokenStore(archive.token_root), files=True)
    assert not report.errors(), report.render()


def _objects(archive: Archive, under: str) -> dict[str, bytes]:
    out = {}
    prefix = f"{archive.root_key}/{under}/"
    for page in archive.s3.client.get_paginator("list_objects_v2").paginate(
            Bucket=archive.s3.bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            out[obj["Key"][len(prefix):]] = archive.s3.client.get_object(
                Bucket=archive.s3.bucket, Key=obj["Key"])["Body"].read()
    return out


FORMATS = {
    "pseq": "{kind: sequencefile, key: offset, compression: gzip}",
    "pnone": "{kind: sequencefile, key: msgpack, compression: none}",
    "ptext": "{kind: text, compression: gzip, escape_newlines: true}",
    "pbaldr": "{kind: baldr}",
}


def test_every_format_round_trips_through_the_job_and_hadoop_reads_sequencefiles(
        airflow_env, kafka, s3, unique, tmp_path, monkeypatch, sc):
    prefix = f"t{unique}"
    groups = "".join(f"""\
{name}:
  topics: {{include: ["{prefix}-.*"]}}
  layout: event_time
  parser: timestamp
  format: {fmt}
""" for name, fmt in FORMATS.items())
    archive = Archive(airflow_env, kafka, s3, prefix, tmp_path, groups)
    archive.in_env(monkeypatch)
    topic = archive.create_topic("fmt", 1)
    now = int(time.time() * 1000)
    values = [b"plain", b"", b"two\nlines\\n", bytes(range(256)), b"x" * 5000]
    archive.produce_at([(topic, 0, None, v, now - (i % 3) * HOUR) for i, v in enumerate(values * 4)])
    produced = sorted(values * 4)
    for group in FORMATS:
        archive.run(group, f"{group}-1")
        files = {p: d for p, d in archive.files(group).items() if not p.split("/")[-1].startswith("_")}
        assert len(files) == 3, files.keys()  # three hours
        read = sorted(r.value or b"" for p, d in files.items() for r in read_file(p, d))
        assert read == produced, group
        if group in ("pseq", "pnone"):
            for path, data in files.items():
                local = tmp_path / group / path
                local.parent.mkdir(parents=True, exist_ok=True)
                local.write_bytes(data)
                key_class = ("org.apache.hadoop.io.LongWritable" if group == "pseq"
                             else "org.apache.hadoop.io.BytesWritable")
                pairs = sc.sequenceFile(str(local), key_class,
                                        "org.apache.hadoop.io.BytesWritable").collect()
                ours = read_file(path, data)
                assert [bytes(v) for _, v in pairs] == [r.value for r in ours]
                if group == "pseq":
                    assert [k for k, _ in pairs] == [r.offset for r in ours]


def test_late_events_before_finalization_are_included_after_it_go_to_late(archive):
    topic = archive.create_topic("late", 1)
    now = int(time.time() * 1000)
    old, recent = now - 5 * HOUR, now
    archive.produce_at([(topic, 0, None, json.dumps({"ts": t}).encode(), now)
                        for t in (old, old + 1, recent)])
    archive.run("partitioned", "run-1")
    first = archive.files("partitioned")
    old_dir, recent_dir = f"{topic}/{hour_path(old)}", f"{topic}/{hour_path(recent)}"
    assert f"{old_dir}/_SUCCESS" in first
    assert f"{recent_dir}/_SUCCESS" not in first  # its lateness allowance has not passed

    # a late event for the open hour is still included; one for the final hour is not
    archive.produce_at([(topic, 0, None, json.dumps({"ts": t}).encode(), now)
                        for t in (old + 2, recent + 1)])
    archive.run("partitioned", "run-2")
    second = archive.files("partitioned")
    assert {p: d for p, d in second.items() if p.startswith(old_dir + "/")} == \
        {p: d for p, d in first.items() if p.startswith(old_dir + "/")}  # never changed
    late = [p for p in second if p.startswith(f"{topic}/_late/{hour_path(old)}/")]
    assert len(late) == 1
    assert [json.loads(r.value)["ts"] for r in read_file(late[0], second[late[0]])] == [old + 2]
    recent_files = [p for p in second if p.startswith(recent_dir + "/") and not p.endswith("_SUCCESS")]
    assert len(recent_files) == 2  # one per slice: offsets 2 and 4
    cfg = config_module.load()
    report = verify.verify_group(cfg, "partitioned", connections.storage(cfg.s3_conn_id),
                                 LocalTokenStore(archive.token_root), files=True)
    assert not report.errors(), report.render()


def parser_fix(airflow_env, kafka, s3, prefix: str, tmp_path, monkeypatch
               ) -> tuple[Archive, Archive, str]:
    """Two archives of one topic of 200 JSON messages over three days: `broken` reads the
    event time from a field the messages lack (all quarantined), `reference` from `ts`;
    both archived (backup, then partitioned). (broken, reference, topic)."""
    broken = Archive(airflow_env, kafka, s3, prefix, tmp_path,
                     PARTITIONED.format(p=prefix, field="wrong"), name="broken")
    reference = Archive(airflow_env, kafka, s3, prefix, tmp_path,
                        PARTITIONED.format(p=prefix, field="ts"), name="reference")
    topic = broken.create_topic("js", 2)
    now = int(time.time() * 1000)
    rng = random.Random(3)
    broken.produce_at([(topic, i % 2, None, json.dumps({"ts": now - rng.randrange(3 * 24 * HOUR),
                                                        "i": i}).encode(), now)
                       for i in range(200)])
    for made in (reference, broken):
        made.in_env(monkeypatch)
        made.run("backup", "backup-1")
        made.run("partitioned", "run-1")
    return broken, reference, topic


def test_backfill_after_a_parser_fix_is_byte_identical_to_a_correct_run(
        airflow_env, kafka, s3, unique, tmp_path, monkeypatch):
    prefix = f"t{unique}"
    broken, reference, topic = parser_fix(airflow_env, kafka, s3, prefix, tmp_path, monkeypatch)
    assert all("/_quarantine/" in p for p in broken.files("partitioned") if "_SUCCESS" not in p
               and not p.endswith(".json"))

    broken.write_config(PARTITIONED.format(p=prefix, field="ts"))  # the fix
    broken.in_env(monkeypatch)
    cfg = config_module.load()
    summary = backfill.backfill(cfg, connections.storage(cfg.s3_conn_id), "partitioned", topic,
                                "backfill-1", "2026-01-01T00:00:00+00:00", from_offset=0)
    assert len(summary["slices"]) == 2 and len(summary["moved_aside"]) == 2

    def data(made):  # _SUCCESS markers depend on when the finalizer ran, not on the data
        return {p: d for p, d in made.files("partitioned").items()
                if not p.split("/")[-1].startswith("_")}
    rebuilt = data(broken)
    assert rebuilt == data(reference) and len(rebuilt) > 10
    assert not any("/_quarantine/" in p for p in rebuilt)
    assert len(_objects(broken, f"_superseded/backfill-1/partitioned/{topic}/_quarantine")) == 2
    report = verify.verify_group(cfg, "partitioned", connections.storage(cfg.s3_conn_id),
                                 LocalTokenStore(broken.token_root), files=True)
    assert not report.errors(), report.render()

    # the same backfill again changes nothing (a crashed backfill is repaired by a re-run)
    backfill.backfill(cfg, connections.storage(cfg.s3_conn_id), "partitioned", topic,
                      "backfill-2", "2026-01-01T00:00:01+00:00", from_offset=0)
    assert data(broken) == rebuilt


def test_backfill_dag_validates_its_params_and_runs(archive):
    topic = archive.create_topic("js", 1)
    now = int(time.time() * 1000)
    archive.produce_at([(topic, 0, None, json.dumps({"ts": now - i * HOUR}).encode(), now)
                        for i in range(3)])
    archive.run("backup", "backup-1")
    archive.run("partitioned", "run-1")
    before = archive.files("partitioned")
    refused = subprocess.run([str(Path(sys.executable).parent / "airflow"), "dags", "test",
                              "kafka_archive_backfill", "-c", json.dumps({"topic": topic,
                                                                          "from_offset": -1})],
                             env=archive.env, capture_output=True, text=True, timeout=600)
    assert refused.returncode != 0 and "from_offset" in refused.stdout + refused.stderr
    airflow(archive.env, "dags", "test", "kafka_archive_backfill", "-c",
            json.dumps({"topic": topic, "from_offset": 0}))
    assert [k for k in _objects(archive, "_runs/partitioned") if k.endswith("/backfill.json")]
    after = archive.files("partitioned")
    assert {p: d for p, d in after.items() if not p.endswith(".json")} == \
        {p: d for p, d in before.items() if not p.endswith(".json")}


def test_a_new_generation_writes_new_names_and_verify_reads_both(archive):
    topic = archive.create_topic("js", 1)
    now = int(time.time() * 1000)
    archive.produce_at([(topic, 0, None, json.dumps({"ts": now - HOUR}).encode(), now)] * 3)
    archive.run("partitioned", "run-1")
    archive.write_config(PARTITIONED.format(p=archive.prefix, field="ts"), generation=2)
    archive.produce_at([(topic, 0, None, json.dumps({"ts": now - HOUR}).encode(), now)] * 2)
    archive.run("partitioned", "run-2")
    names = sorted(p.rsplit("/", 1)[1] for p in archive.files("partitioned")
                   if p.startswith(f"{topic}/{hour_path(now - HOUR)}/") and not p.endswith("_SUCCESS"))
    assert names == ["1_0_00000000000000000000.seq", "2_0_00000000000000000003.seq"]
    cfg = config_module.load()
    report = verify.verify_group(cfg, "partitioned", connections.storage(cfg.s3_conn_id),
                                 LocalTokenStore(archive.token_root), files=True)
    assert not report.errors(), report.render()
    assert {(p.generation, len(p.files)) for p in report.partitions} == {(1, 1), (2, 1)}
