"""spark-submit entry point: replay archived messages into Kafka, one task per source
partition (kafka_archive.archive.replay_job).

    spark-submit ... --py-files kafka_archive-<hash>.zip --files CONFIG \
        spark_jobs/replay.py --config CONFIG --replay REPLAY_URL
"""

import argparse
import os
import sys
import time

from kafka_archive import config, kafka_connection, spark as launch
from kafka_archive.archive import replay_job

parser = argparse.ArgumentParser()
parser.add_argument("--config", required=True)
parser.add_argument("--replay", required=True)
parser.add_argument("--max-rate", type=int, help="messages per second per source partition")
args = parser.parse_args()

started = time.monotonic()
session = launch.job_session("kafka-archive-replay")
try:
    cfg = kafka_connection.connected(config.load(launch.shipped_file(args.config)))
    rows = replay_job.run(session, cfg, args.replay, args.max_rate)
    print("\n".join(replay_job.summary_lines(rows, time.monotonic() - started)), flush=True)
except Exception as exc:  # a task's failure, recorded beside the replay for the command
    if os.environ.get("KAFKA_ARCHIVE_VERBOSE"):
        raise
    print(f"replay failed: {str(exc).splitlines()[0]}", file=sys.stderr)
    sys.exit(1)
finally:
    session.stop()
