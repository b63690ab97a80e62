"""The archive's metrics reach a real metrics system: the Airflow stack sends Airflow's
StatsD metrics (ours among them, tags InfluxDB's way) to Prometheus's statsd_exporter,
which this test scrapes over HTTP as Prometheus would."""

from __future__ import annotations

import json
import re

import httpx
from test_airflow_rest import DAG, make_topic, run_to_end

from kafka_archive import layout

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def scrape(url: str) -> dict[tuple[str, frozenset], float]:
    """Prometheus's text format: (name, labels) -> value."""
    found = {}
    for line in httpx.get(url, timeout=10).raise_for_status().text.splitlines():
        if (m := SAMPLE.match(line)) and not line.startswith("#"):
            found[(m[1], frozenset(LABEL.findall(m[2] or "")))] = float(m[3])
    return found


def test_a_runs_figures_reach_statsd_exporter_with_the_runs_values(airflow_stack, statsd,
                                                                    kafka, s3, unique):
    topic = f"metrics-{unique}"
    make_topic(kafka, topic, 20)
    airflow_stack.unpause(DAG)
    runs_before = scrape(statsd).get(
        ("airflow_kafka_archive_run_duration_count", frozenset({("group", "backup")})), 0)

    run_id = run_to_end(airflow_stack, {"topics": [topic], "max_records": 5})

    cfg = airflow_stack.config()
    root = cfg.archive_root.removeprefix(f"s3://{s3.bucket}/")
    files = s3.client.list_objects_v2(Bucket=s3.bucket, Prefix=f"{root}/backup/{topic}/")
    sizes = [o["Size"] for o in files.get("Contents", ())]
    committed = json.loads(s3.client.get_object(Bucket=s3.bucket, Key=layout.run_file(
        cfg.archive_root, "backup", run_id, "committed.json").split("/", 3)[3])["Body"].read())
    assert committed["by_topic"][topic] == {"records": 5, "files": len(sizes),
                                            "bytes": sum(sizes), "replaced": 0}

    got = scrape(statsd)
    ours = {(name, dict(labels).get("topic")): value for (name, labels), value in got.items()
            if name.startswith("airflow_kafka_archive_")
            and dict(labels).get("topic") in (topic, None)}
    assert ours[("airflow_kafka_archive_run_records", topic)] == 5
    assert ours[("airflow_kafka_archive_run_files", topic)] == len(sizes) > 0
    assert ours[("airflow_kafka_archive_run_bytes", topic)] == sum(sizes)
    assert ours[("airflow_kafka_archive_lag_messages", topic)] == 15  # 20 produced, 5 taken
    assert ours[("airflow_kafka_archive_lag_seconds", topic)] >= 0
    runs_after = got[("airflow_kafka_archive_run_duration_count",
                      frozenset({("group", "backup")}))]
    assert runs_after >= runs_before + 1
