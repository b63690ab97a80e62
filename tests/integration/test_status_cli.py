"""`kafka-archive status` on the real services, with a known lag: it agrees with Kafka's
own end offsets and with the token files."""

from __future__ import annotations

import json
import time

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from tests.support.pipeline import Pipeline
from test_rewind_cli import cli


def test_status_reports_lag_in_messages_and_time(airflow_env, kafka, s3, unique, tmp_path):
    pipeline = Pipeline(airflow_env, kafka, s3, f"t{unique}", tmp_path)
    topic = pipeline.create_topic("lagging", 2)
    producer = KafkaProducer(bootstrap_servers=kafka, acks="all")
    for i in range(20):  # 10 per partition
        producer.send(topic, value=b"archived", partition=i % 2)
    producer.flush()
    pipeline.run("first")
    hour_ago = int(time.time() * 1000) - 3_600_000
    for i in range(7):  # partition 0 falls behind by 7 messages, the oldest an hour old
        producer.send(topic, value=b"pending", partition=0, timestamp_ms=hour_ago + i)
    producer.flush()
    producer.close()
    unarchived = pipeline.create_topic("new", 1)  # no token yet: lags from the earliest offset
    pipeline.produce([(unarchived, 0, None, b"x", None)] * 3)

    asked_ms = int(time.time() * 1000)
    result = cli(pipeline, "status", "--group", "backup", "--json")
    assert result.returncode == 0, result.stderr
    rows = {(r["topic"], r["partition"]): r for r in json.loads(result.stdout)}

    consumer = KafkaConsumer(bootstrap_servers=kafka)
    ends = consumer.end_offsets([TopicPartition(topic, p) for p in (0, 1)])
    consumer.close()
    token_file = pipeline.token_root / "backup" / f"{topic}.token"
    headers = dict(line[2:].split(": ", 1) for line in token_file.read_text().splitlines()
                   if line.startswith("# "))
    assert set(rows) == {(topic, 0), (topic, 1), (unarchived, 0)}
    for p in (0, 1):
        row = rows[(topic, p)]
        assert row["end"] == ends[TopicPartition(topic, p)] == {0: 17, 1: 10}[p]
        assert row["token"] == pipeline.token_offsets()[topic][p] == 10
        assert row["lag_messages"] == row["end"] - row["token"]
        assert (row["committed_at"], row["run_id"]) == (headers["committed_at"], "first")
    assert rows[(topic, 1)]["lag_ms"] == 0
    # the message at the token was written an hour before status asked
    assert 0 <= rows[(topic, 0)]["lag_ms"] - (asked_ms - hour_ago) < 60_000
    new = rows[(unarchived, 0)]
    assert (new["token"], new["end"], new["lag_messages"], new["run_id"]) == (None, 3, 3, None)

    table = cli(pipeline, "status", "--group", "backup")
    assert table.returncode == 0, table.stderr
    lines = {tuple(line.split()[1:3]): line.split() for line in table.stdout.splitlines()[1:]}
    assert lines[(topic, "0")][3:7] == ["10", "17", "7", "1h00m"]
    assert lines[(topic, "1")][3:7] == ["10", "10", "0", "0s"]
    assert lines[(topic, "1")][-1] == "first"

    # one malformed token: its topic is flagged and named, the others still printed, exit 1
    broken = pipeline.token_root / "backup" / f"{unarchived}.token"
    broken.parent.mkdir(parents=True, exist_ok=True)
    broken.write_text(f"# group: backup\n# topic: {unarchived}\nnot a token line\n")
    flagged = cli(pipeline, "status", "--group", "backup")
    assert flagged.returncode == 1, flagged.stderr
    assert "Traceback" not in flagged.stderr
    lines = {tuple(line.split()[1:3]): line.split() for line in flagged.stdout.splitlines()[1:]
             if not line.startswith("PROBLEM")}
    assert lines[(topic, "0")][3:6] == ["10", "17", "7"] and (unarchived, "!") in lines
    [problem] = [line for line in flagged.stdout.splitlines() if line.startswith("PROBLEM")]
    assert problem.startswith(f"PROBLEM backup/{unarchived}: MalformedTokenError: ")
    assert f"{unarchived}.token" in problem and "line 3" in problem
