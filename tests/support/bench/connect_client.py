"""The archive task over Spark Connect, as the benchmark runs it in a process of its own
(the Airflow task's part: no JVM here): connect to the deployment's server session, run the
plan's job as a Connect client, print the job's summary (progress.lines, which the
benchmark parses as spark-submit's) and the process's peak RSS.

    python -m tests.support.bench.connect_client --config C --plan URL --url sc://...
"""

import argparse
import resource
import time

from kafka_archive import config, kafka_connection, spark_connect
from kafka_archive.archive import job, progress
from kafka_archive.storage import Storage

parser = argparse.ArgumentParser()
for name in ("--config", "--plan", "--url"):
    parser.add_argument(name, required=True)
args = parser.parse_args()

started = time.monotonic()
cfg = kafka_connection.connected(config.load(args.config))
storage = Storage.from_environment()
with spark_connect.connected(args.url, cfg, args.plan, storage) as session:
    ready = time.monotonic()
    manifest = job.recorded(session, cfg, args.plan, storage)
    print("\n".join(progress.lines(manifest, time.monotonic() - started, ready - started)))
print(f"client peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB",
      flush=True)
