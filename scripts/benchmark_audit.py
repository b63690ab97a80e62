"""How long reconciling a large audit takes: W windows x S sources x T topics.

    .venv/bin/python scripts/benchmark_audit.py [--windows 1000 --sources 100 --topics 10]

Writes the monitoring events as the audit's ingest step stores them (JSON lines under
<root>/_audit/_events/) into a local archive root, then times each stage of the audit
task that follows: loading and parsing the events, summing them (deduplicated),
reconciling against archived counts (some windows short, some in excess), and rendering
the JSON, CSV and HTML reports. No services: the Kafka and S3 parts are measured by the
integration tests, not here.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

from kafka_archive import config, layout
from kafka_archive.audit import gather, reconcile, reporting
from kafka_archive.audit.reconcile import MonitoringEvent
from kafka_archive.storage import Storage

MIN = 60_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=1000)
    parser.add_argument("--sources", type=int, default=100)
    parser.add_argument("--topics", type=int, default=10)
    args = parser.parse_args()
    rng = random.Random(42)
    work = Path(tempfile.mkdtemp(prefix="kafka-archive-audit-bench-"))
    cfg_path = work / "kafka-archive.yaml"
    cfg_path.write_text(f"kafka: {{bootstrap_servers: 127.0.0.1:1}}\narchive_root: file://{work}/archive\n"
                        "audit: {window: 1m, grace: 0}\n")
    cfg = config.load(cfg_path)
    storage = Storage()

    topics = [f"topic-{t}" for t in range(args.topics)]
    cells = [(t, f"source-{s}", w * MIN) for t in topics for s in range(args.sources)
             for w in range(args.windows)]
    counts = {cell: rng.randint(1, 1000) for cell in cells}
    archived = dict(counts)
    for cell in rng.sample(cells, len(cells) // 1000):
        archived[cell] += rng.choice((-3, -1, 1, 2))
    stored = {"fields": ["offset", *MonitoringEvent._fields],  # as gather.ingest stores them
              "events": [[i, s, t, w, MIN, n, f"{s}/producer", i]
                         for i, ((t, s, w), n) in enumerate(counts.items())], "bad": []}
    events_file = layout.audit_events_file(cfg.archive_root, cfg.audit.topic, 0, 0)
    storage.put_bytes(events_file, json.dumps(stored).encode())
    size_mib = storage.size(events_file) / 2**20
    through = {t: args.windows * MIN for t in topics}
    print(f"{len(cells):,} (topic, source, window) cells: {args.windows} windows x "
          f"{args.sources} sources x {args.topics} topics; events file {size_mib:.0f} MiB")

    started = time.perf_counter()
    stages = {}

    def stage(name, fn):
        t0 = time.perf_counter()
        result = fn()
        stages[name] = time.perf_counter() - t0
        return result

    events = stage("load + parse events", lambda: gather.load_events(cfg, storage))
    expected = stage("sum events (dedup)", lambda: reconcile.expected_counts(events.events))
    verdicts = stage("reconcile", lambda: reconcile.reconcile(expected, archived, MIN, through, 0))
    header = {"group": "backup"}
    stage("report.json", lambda: reporting.to_json(header, verdicts))
    stage("report.csv", lambda: reporting.to_csv(verdicts))
    stage("report.html", lambda: reporting.to_html(header, verdicts))
    total = time.perf_counter() - started
    for name, seconds in stages.items():
        print(f"  {name:22s} {seconds:6.2f} s")
    print(f"  {'total':22s} {total:6.2f} s")
    totals = reconcile.summarize(verdicts)
    print(f"verdicts: {totals}")
    assert totals["MISSING"] + totals["EXCESS"] == len(cells) // 1000, totals


if __name__ == "__main__":
    main()
