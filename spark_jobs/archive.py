"""spark-submit entry point: archive the slices of one plan.

    spark-submit ... --py-files kafka_archive-<hash>.zip --files CONFIG \
        spark_jobs/archive.py --config CONFIG --plan PLAN_URL
"""

import argparse
import time

from kafka_archive import spark as launch
from kafka_archive.archive import job, progress

parser = argparse.ArgumentParser()
parser.add_argument("--config", required=True)
parser.add_argument("--plan", required=True)
args = parser.parse_args()

started = time.monotonic()
session = launch.job_session("kafka-archive")
ready = time.monotonic()
try:
    manifest = job.main(session, launch.shipped_file(args.config), args.plan)
    # spark-submit's output is the task's log (the Spark provider logs each line)
    print("\n".join(progress.lines(manifest, time.monotonic() - started, ready - started)),
          flush=True)
finally:
    session.stop()
