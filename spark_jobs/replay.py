"""spark-submit entry point: replay archived messages into Kafka, one task per source
partition (kafka_archive.tools.replay_job).

    spark-submit ... --py-files kafka_archive-<hash>.zip --files CONFIG \
        spark_jobs/replay.py --config CONFIG --replay REPLAY_URL
"""

import argparse
import os
import time

from pyspark import SparkConf
from pyspark.sql import SparkSession

from kafka_archive import config, spark as launch
from kafka_archive.archive import progress
from kafka_archive.tools import replay_job

parser = argparse.ArgumentParser()
parser.add_argument("--config", required=True)
parser.add_argument("--replay", required=True)
parser.add_argument("--max-rate", type=int, help="messages per second per source partition")
args = parser.parse_args()

started = time.monotonic()
spark = (SparkSession.builder.appName("kafka-archive-replay")
         .config(conf=SparkConf().set("spark.log.level", progress.SPARK_LOG_LEVEL))
         # the executors read S3 with the driver's credentials (never on a command line)
         .config(map=launch.executor_env_conf(dict(os.environ)))
         .config("spark.ui.enabled", "false")
         .getOrCreate())
try:
    rows = replay_job.run(spark, config.load(launch.shipped_file(args.config)), args.replay,
                           args.max_rate)
    print("\n".join(replay_job.summary_lines(rows, time.monotonic() - started)), flush=True)
finally:
    spark.stop()
