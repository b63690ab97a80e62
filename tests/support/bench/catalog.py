"""What a group's history costs each operator call, on generated archive metadata.

    .venv/bin/python -m tests.support.bench.catalog [--runs 100,1000,3500] [--partitions 100]
                                                  [--wide 500x20x100]

No Kafka data, real MinIO and Kafka (tests/support/localservices.py starts them if they are
not running, and stops only what it started). Per history size N, one group of one topic
with --partitions partitions whose run folders hold N committed runs (a run every 15
minutes, one file per partition per run), a rewind every 1,000 runs (the plan's
`superseded` list), a replacement of one slice every 1,500 (a `backfill.json`), and one
accepted loss; tokens on S3. Then:
- the catalog is rebuilt from the run folders: the one call whose cost follows history,
  made only when a group has no catalog (printed, with its S3 requests);
- 20 more runs are committed through the catalog (commit.protocol.add_to_catalog), so
  readers see a snapshot plus a tail of log entries, as after a day of runs;
- each call is timed and its S3 requests counted (boto3's before-send event): status and
  the UI page (the real functions, against the real Kafka, where the topics do not
  exist), ls of one partition's newest slices, plan (the catalog part: supersede and the
  watermarks), commit, replay planning of the last hour of one partition, the
  incremental audit after one commit, plain verify (every topic, against the tokens),
  and the rows verify --files reads for one topic.
With --wide TxPxR: one group of T topics x P partitions, R committed runs: plan, commit
(its catalog part, its log entry's bytes, its check of the files), opening the catalog,
status and page.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from kafka_archive import brokers, catalog, config as config_module, layout, retries
from kafka_archive.audit import incremental
from kafka_archive.commit import protocol
from kafka_archive.monitor import overview, page, status
from kafka_archive.plan import rewinds
from kafka_archive.plan.planning import Plan, Slice
from kafka_archive.storage import Storage
from kafka_archive.tokens import Token, open_store
from kafka_archive.tools import replay, verify
from tests.support import localservices
from tests.support.bench import processes

SLICE = 1000                    # offsets per slice
START = datetime(2025, 11, 1, tzinfo=timezone.utc)
RUN_EVERY = timedelta(minutes=15)
TAIL_RUNS = 20


def catalog_total(storage: Storage, root: str) -> int:
    return sum(size for _, size in storage.list(catalog.store.folder(root, "g")))


class CleanupTally:
    """catalog.store.clean, wrapped to add up the bytes each call deletes."""

    def __init__(self):
        self.deleted, self.real = 0, catalog.store.clean

    def __call__(self, storage, root, group):
        before = catalog_total(storage, root)
        try:
            return self.real(storage, root, group)
        finally:
            self.deleted += before - catalog_total(storage, root)


def catalog_bytes(storage: Storage, cfg, runs: int, tally: CleanupTally) -> str:
    """The catalog's size on storage against one snapshot and the chunks it names (what a
    cleaned-up catalog holds: catalog.store.clean keeps two snapshots, sharing chunks),
    what the cleanups deleted, and what a year of log entries would hold without them."""
    total = catalog_total(storage, cfg.archive_root)
    cat = catalog.open_catalog(storage, cfg, "g")
    one = (storage.size(catalog.store.snapshot_url(cfg.archive_root, "g", cat.snapshot_seq))
           or 0) + sum(storage.size(c.url) or 0 for cs in cat.chunks.values() for c in cs)
    entry = list(storage.list(catalog.store.folder(cfg.archive_root, "g") + "/log"))[-1][1]
    return (f"  catalog bytes after cleanup               {total:,}; one snapshot and its "
            f"chunks {one:,}: {total / max(one, 1):.2f}x  (target <= 2x)\n"
            f"  catalog bytes before cleanup              {total + tally.deleted:,} (cleanups "
            f"deleted {tally.deleted:,} since the rebuild); without any cleanup the log alone "
            f"would hold ~{runs * entry:,} ({runs:,} entries of {entry:,} bytes)")


@dataclass
class Counter:
    requests: int = 0

    def __call__(self, **_):
        self.requests += 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default="100,1000,3500",
                        help="history sizes, committed runs (comma separated)")
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--wide", default="500x20x100",
                        help="TOPICSxPARTITIONSxRUNS, or 0 to skip")
    args = parser.parse_args()
    env = localservices.local_env()
    started = [name for name in ("kafka", "s3") if localservices.SERVICES[name].start(env)]
    try:
        counter = Counter()
        # the measured client is configured as the library's own (retries.s3_config);
        # `fast`, the same, writes the generated metadata uncounted
        client, fast = (localservices.s3_client(env, retries.s3_config()) for _ in range(2))
        client.meta.events.register("before-send.s3", counter)
        bench = Bench(env, client, fast, counter, Path("/tmp/kafka-archive-catalog-bench"))
        print(f"uptime: {Path('/proc/loadavg').read_text().strip()}")
        for runs in (int(n) for n in args.runs.split(",")):
            bench.history(runs, args.partitions)
        if args.wide != "0":
            topics, partitions, runs = (list(map(int, args.wide.split("x"))) + [1])[:3]
            bench.wide(topics, partitions, runs)
    finally:
        for name in started:
            localservices.SERVICES[name].stop()
    return 0


class Bench:
    def __init__(self, env, client, fast, counter: Counter, work: Path):
        self.env, self.client, self.fast, self.counter = env, client, fast, counter
        self.bucket = "kafka-archive"
        self.work = work
        self.tally = catalog.store.clean = CleanupTally()
        work.mkdir(parents=True, exist_ok=True)

    def config(self, name: str, topics: str):
        path = self.work / f"{name}.yaml"
        path.write_text(textwrap.dedent(f"""\
            kafka: {{bootstrap_servers: "{localservices.kafka_bootstrap(self.env)}"}}
            archive_root: s3://{self.bucket}/bench-catalog/{name}
            token_root: s3://{self.bucket}/bench-catalog/{name}/_tokens
            audit: {{topic: _bench_audit, groups: [g]}}
            groups:
              g: {{topics: {{include: ["{topics}"]}}}}
            """))
        return config_module.load(path)

    def measure(self, what: str, fn, *, limit_s: float | None = None, limit_requests=None,
                limit_rss_mib: float | None = None):
        self.counter.requests = 0
        sampler = processes.TreeSampler(os.getpid()) if limit_rss_mib else None
        if sampler:
            sampler.start()
        t0 = time.perf_counter()
        result = fn()
        seconds = time.perf_counter() - t0
        if sampler:
            peak = sampler.stop().peak_total_mib
            print(f"  {what + ': peak RSS':38s} {peak:8.0f} MiB" + (
                "  ok" if peak <= limit_rss_mib else f"  OVER (target <= {limit_rss_mib:.0f} MiB)"))
        verdict = ""
        if limit_s is not None:
            ok = seconds <= limit_s and (limit_requests is None
                                         or self.counter.requests <= limit_requests)
            verdict = "  ok" if ok else f"  OVER (target <= {limit_s} s" + (
                f", <= {limit_requests} requests)" if limit_requests else ")")
        print(f"  {what:38s} {seconds:8.2f} s  {self.counter.requests:7d} S3 requests{verdict}")
        return result

    # --- generation ----------------------------------------------------------------------

    def put_many(self, objects: list[tuple[str, bytes]]) -> None:
        def put(item):
            url, data = item
            self.fast.put_object(Bucket=self.bucket, Key=url[len(f"s3://{self.bucket}/"):],
                                 Body=data)
        with ThreadPoolExecutor(32) as pool:
            list(pool.map(put, objects))

    def run_folder(self, cfg, topics: list[str], partitions: int, i: int,
                   superseded=(), starts=None) -> list[tuple[str, bytes]]:
        run_id = f"scheduled__{(START + i * RUN_EVERY).isoformat()}"
        at = (START + i * RUN_EVERY + timedelta(seconds=40)).isoformat()
        rows = []
        for topic in topics:
            for p in range(partitions):
                start = (starts or {}).get((topic, p), i * SLICE)  # a rewind: a longer slice
                url = layout.data_file(cfg.archive_root, "g", topic, p, 1, start, "sequencefile")
                rows.append({"topic": topic, "partition": p, "start": start,
                             "end": (i + 1) * SLICE, "cut": False,
                             "records": (i + 1) * SLICE - start,
                             "quarantined": 0, "late": 0, "bytes": 1_100_000, "gaps": [],
                             "errors": [], "min_timestamp_ms": 0, "max_timestamp_ms": 0,
                             "audit": [["app", int((START + i * RUN_EVERY).timestamp() * 1000),
                                        SLICE]],
                             "files": [{"url": url, "records": SLICE, "bytes": 1_100_000}]})
        plan = {"run_id": run_id, "created_at": (START + i * RUN_EVERY).isoformat(),
                "generation": 1, "superseded": list(superseded), "anomalies": [],
                "format": {"kind": "sequencefile"}}
        folder = layout.runs_dir(cfg.archive_root, "g")
        name = layout.run_file(cfg.archive_root, "g", run_id, "x").rsplit("/", 2)[1]
        return [(f"{folder}/{name}/plan.json", json.dumps(plan).encode()),
                (f"{folder}/{name}/manifest.json", json.dumps({"slices": rows}).encode()),
                (f"{folder}/{name}/committed.json",
                 json.dumps({"run_id": run_id, "committed_at": at}).encode())]

    def generate(self, cfg, topics: list[str], partitions: int, runs: int) -> None:
        marker = f"{cfg.archive_root}/_generated.json"
        storage = Storage(lambda: self.fast)
        if storage.get_or_none(marker) is not None:
            return
        t0 = time.perf_counter()
        batch: list = []
        for i in range(runs):
            superseded, starts = (), None
            if i and i % 1000 == 0:  # a rewind of partition 0 by 10 slices
                starts = {(topics[0], 0): (i - 10) * SLICE}
                superseded = [layout.data_file(cfg.archive_root, "g", topics[0], 0, 1, s * SLICE,
                                               "sequencefile") for s in range(i - 10, i)]
            batch += self.run_folder(cfg, topics, partitions, i, superseded, starts)
            if i and i % 1500 == 0:  # one slice of this run rebuilt (a backfill), after it
                run = layout.run_file(cfg.archive_root, "g", f"backfill-{i}", "backfill.json")
                replaced = catalog.run_folder(
                    cfg.archive_root, "g", f"scheduled__{(START + i * RUN_EVERY).isoformat()}")
                row = json.loads(batch[-2][1])["slices"][1]  # this run's partition 1
                at = (START + i * RUN_EVERY + timedelta(minutes=1)).isoformat()
                batch.append((run, json.dumps({"at": at, "slices": [
                    {**row, "replaces_run": replaced}]}).encode()))
            if len(batch) > 3000 or len(topics) * partitions >= 1000:  # big manifests
                self.put_many(batch)
                batch = []
        loss = catalog.AcceptedLoss("g", topics[-1], partitions - 1, 0, 0, "bench", "then",
                                    "generated")
        batch.append((layout.accepted_loss(cfg.archive_root, "g", loss.topic, loss.partition, 0),
                      json.dumps(loss.__dict__).encode()))
        self.put_many(batch)
        tokens = open_store(cfg.token_root, lambda: self.fast)
        for topic in topics:
            tokens.write(Token("g", topic, cfg.bootstrap_servers,
                               {p: runs * SLICE for p in range(partitions)}), None)
        storage.put_bytes(marker, b"{}")
        print(f"  generated {runs} runs x {len(topics) * partitions} partitions in "
              f"{time.perf_counter() - t0:.0f} s")

    def commit(self, cfg, storage, topics, partitions, i, what: str | None = None):
        """Run i's folder, and the catalog's part of committing it
        (commit.protocol.add_to_catalog), measured when `what` names it."""
        objects = self.run_folder(cfg, topics, partitions, i)
        manifest = json.loads(objects[1][1])
        plan = Plan(group="g", run_id=json.loads(objects[0][1])["run_id"],
                    created_at=json.loads(objects[0][1])["created_at"], bootstrap="b",
                    generation=1, format={"kind": "sequencefile"},
                    slices=tuple(Slice(r["topic"], r["partition"], r["start"], r["end"], 1 << 30)
                                 for r in manifest["slices"]),
                    token_versions={}, base_offsets={})
        self.put_many(objects[:2])

        def add():
            protocol.add_to_catalog(cfg, plan, manifest, storage,
                                    START + i * RUN_EVERY + timedelta(seconds=40))
        if what:
            self.measure(what, add, limit_s=2)
            files = [f["url"] for r in manifest["slices"] for f in r["files"]]
            # what commit.protocol.verify asks of each file before any token moves
            self.measure("commit: its check of the files (a HEAD each)",
                         lambda: storage.sizes(files), limit_requests=1000, limit_s=60)
        else:
            add()
        self.put_many(objects[2:])

    # --- the calls ------------------------------------------------------------------------

    def history(self, runs: int, partitions: int) -> None:
        print(f"\n{runs} committed runs of a group of 1 topic x {partitions} partitions")
        cfg = self.config(f"history-{runs}x{partitions}", "bench-history")
        topics = ["bench-history"]
        self.generate(cfg, topics, partitions, runs)
        storage = Storage(lambda: self.client)
        tokens = open_store(cfg.token_root, lambda: self.client)
        if storage.get_or_none(f"{cfg.archive_root}/_tail.json") is None:
            self.measure("rebuild the catalog from the runs", lambda: catalog.rebuild(
                storage, cfg, "g"), limit_s=120, limit_rss_mib=1024)
            for i in range(runs, runs + TAIL_RUNS):
                self.commit(cfg, storage, topics, partitions, i)
            storage.put_bytes(f"{cfg.archive_root}/_tail.json", b"{}")
        consumer = brokers.consumer(cfg)
        now_ms = int(time.time() * 1000)
        try:
            self.measure("status", lambda: status.status(cfg, tokens, consumer, now_ms, "g",
                                                         storage), limit_s=2, limit_requests=50)
            self.measure("page", lambda: page.render(overview.gather(
                cfg, "g", storage, tokens, consumer, now_ms), "/dags/x"),
                limit_s=2, limit_requests=50)
        finally:
            consumer.close()
        # where the archive ends now (a second invocation has committed more)
        end = catalog.open_catalog(storage, cfg, "g").state.topics[topics[0]].summaries["0:1"].end
        self.measure("ls one partition, newest 100 slices", lambda: catalog.open_catalog(
            storage, cfg, "g").rows(topics[0], 7, end_after=end - 100 * SLICE),
            limit_s=2, limit_requests=50)
        self.measure("verify (plain, every topic)", lambda: verify.verify_group(
            cfg, "g", storage, tokens), limit_s=2, limit_requests=50)
        self.measure("verify one topic: its current rows (--files reads them)",
                     lambda: catalog.contents(storage, cfg, "g", topics[0]))
        slices = [Slice(topics[0], p, end, end + SLICE, 1 << 30) for p in range(partitions)]
        self.measure("plan: catalog, supersede, watermarks", lambda: rewinds.supersede(
            catalog.open_catalog(storage, cfg, "g"), cfg, slices), limit_s=10)
        request = replay.Request("g", topics[0], "elsewhere", partition=3,
                                 from_offset=end - 4 * SLICE, to_offset=end)
        self.measure("replay plan, one hour of one partition",
                     lambda: replay.plan_replay(cfg, storage, request, partitions))

        def audit():
            return incremental.audit(cfg, storage, "g", f"audit-{time.time_ns()}",
                                     datetime.now(timezone.utc).isoformat(), {topics[0]: now_ms})
        if storage.get_or_none(layout.audit_checkpoint(cfg.archive_root, "g")) is None:
            self.measure("first audit (counts every row)", audit)
        self.commit(cfg, storage, topics, partitions, end // SLICE, "commit (the catalog's part)")
        self.measure("audit after one commit", audit)
        print(catalog_bytes(storage, cfg, end // SLICE, self.tally))

    def wide(self, topics_n: int, partitions: int, runs: int) -> None:
        print(f"\na group of {topics_n} topics x {partitions} partitions, {runs} runs")
        cfg = self.config(f"wide-{topics_n}x{partitions}x{runs}", "bench-wide-.*")
        topics = [f"bench-wide-{t:04d}" for t in range(topics_n)]
        self.generate(cfg, topics, partitions, runs)
        storage = Storage(lambda: self.client)
        tokens = open_store(cfg.token_root, lambda: self.client)
        self.measure("rebuild the catalog from the runs", lambda: catalog.rebuild(
            storage, cfg, "g"))
        end = catalog.open_catalog(storage, cfg, "g").state.topics[topics[0]].summaries["0:1"].end
        slices = [Slice(t, p, end, end + SLICE, 1 << 30) for t in topics for p in range(partitions)]
        self.measure("plan: catalog, supersede, watermarks", lambda: rewinds.supersede(
            catalog.open_catalog(storage, cfg, "g"), cfg, slices), limit_s=10)
        rewound = [Slice(t, p, 0, end, 1 << 30) for t in topics for p in range(partitions)]
        self.measure("plan with every token deleted (rewind)", lambda: rewinds.supersede(
            catalog.open_catalog(storage, cfg, "g"), cfg, rewound), limit_s=10)
        self.commit(cfg, storage, topics, partitions, end // SLICE, "commit (the catalog's part)")
        newest = list(storage.list(catalog.store.folder(cfg.archive_root, "g") + "/log"))[-1]
        print(f"  bytes of that commit's log entry           {newest[1]:,} "
              f"({newest[1] / len(topics) / partitions:.0f} per partition)")
        self.measure("open the catalog", lambda: catalog.open_catalog(storage, cfg, "g"),
                     limit_s=1)
        consumer = brokers.consumer(cfg)
        now_ms = int(time.time() * 1000)
        try:
            self.measure("status", lambda: status.status(cfg, tokens, consumer, now_ms, "g",
                                                         storage), limit_s=5)
            self.measure("page", lambda: page.render(overview.gather(
                cfg, "g", storage, tokens, consumer, now_ms), "/dags/x"), limit_s=5)
        finally:
            consumer.close()


if __name__ == "__main__":
    sys.exit(main())
