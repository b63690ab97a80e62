"""How long reconciling a large audit takes: W windows x S sources x T topics.

    .venv/bin/python -m tests.support.bench.audit [--windows 1000 --sources 100 --topics 10]
    .venv/bin/python -m tests.support.bench.audit --runs 1000

With --runs: the incremental audit's cost instead. A local archive root gets that many
committed runs (plan, manifest, commit marker; 4 partitions x 3 sources per run) and their
monitoring events; then a full audit (no checkpoint) and, after one more committed run,
an incremental one, each printing the objects it read and its seconds.

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

from kafka_archive import catalog, config, layout
from kafka_archive.audit import gather, incremental, reconcile, reporting
from kafka_archive.audit.reconcile import MonitoringEvent
from kafka_archive.storage import Storage
from tests.support.counting_storage import CountingStorage

MIN = 60_000



def load_events(cfg, storage) -> gather.Events:
    """Every ingested events file, as the full audit (no checkpoint) reads them."""
    events, bad = [], []
    for url, _ in storage.list(layout.audit_events_dir(cfg.archive_root, cfg.audit.topic)):
        found = gather.read_events_file(storage, url)
        events += found.events
        bad += found.bad
    return gather.Events(events, bad)

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=1000)
    parser.add_argument("--sources", type=int, default=100)
    parser.add_argument("--topics", type=int, default=10)
    parser.add_argument("--runs", type=int, help="benchmark the incremental audit instead")
    args = parser.parse_args()
    if args.runs:
        return incremental_audit(args.runs)
    rng = random.Random(42)
    cfg, work = local_archive("kafka-archive-audit-bench-")
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

    events = stage("load + parse events", lambda: load_events(cfg, storage))
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


def local_archive(prefix: str):
    """A config whose archive root is a fresh local folder (no Kafka reached), and the folder."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    cfg_path = work / "kafka-archive.yaml"
    cfg_path.write_text(f"kafka: {{bootstrap_servers: 127.0.0.1:1}}\narchive_root: file://{work}/archive\n"
                        "audit: {window: 1m, grace: 0}\n")
    return config.load(cfg_path), work


def incremental_audit(runs: int, partitions: int = 4, sources: int = 3) -> None:
    cfg, work = local_archive("kafka-archive-audit-incr-")
    storage = CountingStorage()
    seq = [0]

    def put(url, doc):
        Storage.put_bytes(storage, url, json.dumps(doc).encode())

    def commit_run(i: int) -> None:
        """Run i archives 10 messages per (partition, source) of window i."""
        run_id = f"scheduled__{i:06d}"
        rows = [{"topic": "orders", "partition": p, "start": i * 30 * sources,
                 "end": (i + 1) * 30 * sources, "records": 30 * sources,
                 "url": layout.data_file(cfg.archive_root, "backup", "orders", p, 1,
                                         i * 30 * sources, "sequencefile"),
                 "bytes": 1, "audit": [[f"web-{s}", i * MIN, 10] for s in range(sources)]}
                for p in range(partitions)]
        put(layout.run_file(cfg.archive_root, "backup", run_id, "plan.json"),
            {"run_id": run_id, "superseded": []})
        put(layout.run_file(cfg.archive_root, "backup", run_id, "manifest.json"), {"slices": rows})
        folder = catalog.run_folder(cfg.archive_root, "backup", run_id)
        added = [catalog.catalog_row(r, folder, {}, layout.LayoutSpec(), cfg.archive_root,
                                     "backup") for r in rows]
        catalog.append(Storage(), cfg, "backup",  # as commit.protocol does, before committed.json
                       lambda cat: {"kind": "commit", "run_id": run_id, "add": added})
        put(layout.run_file(cfg.archive_root, "backup", run_id, "committed.json"),
            {"run_id": run_id, "committed_at": f"2026-01-01T00:00:00.{i:06d}"})
        events = []
        for s in range(sources):
            seq[0] += 1
            events.append([seq[0], f"web-{s}", "orders", i * MIN, MIN, 10 * partitions,
                           f"web-{s}/p", seq[0]])
        put(layout.audit_events_file(cfg.archive_root, cfg.audit.topic, 0, events[0][0]),
            {"fields": ["offset", *MonitoringEvent._fields], "events": events, "bad": []})

    for i in range(runs):
        commit_run(i)
    print(f"{runs} committed runs, {partitions} partitions x {sources} sources each, in {work}")

    def audit(name: str, through_ms: int) -> None:
        storage.reads = 0
        started = time.perf_counter()
        done = incremental.audit(cfg, storage, "backup", name, "2026-01-02T00:00:00+00:00",
                                 {"orders": through_ms})
        seconds = time.perf_counter() - started
        totals = reconcile.summarize(done.every)
        print(f"  {name:11s} objects read {storage.reads:6d}   {seconds:6.2f} s   runs counted "
              f"{done.new_runs:5d}   windows judged {len(done.judged):5d}   {totals}")
        assert totals["MISSING"] + totals["EXCESS"] == 0, totals

    audit("full", (runs + 1) * MIN)
    commit_run(runs)
    audit("incremental", (runs + 2) * MIN)


if __name__ == "__main__":
    main()
