"""spark-submit entry point: archive the slices of one plan.

    spark-submit ... --py-files kafka_archive-<hash>.zip --files CONFIG \
        spark_jobs/archive.py --config CONFIG --plan PLAN_URL
"""

import argparse
import os
import time

from pyspark import SparkConf
from pyspark.sql import SparkSession

from kafka_archive import config, spark as launch
from kafka_archive.archive import job, progress

parser = argparse.ArgumentParser()
parser.add_argument("--config", required=True)
parser.add_argument("--plan", required=True)
args = parser.parse_args()

started = time.monotonic()
# Spark's own INFO lines would bury the job's (the level: progress.SPARK_LOG_LEVEL)
quiet = SparkConf().set("spark.log.level", progress.SPARK_LOG_LEVEL)
spark = (SparkSession.builder.appName("kafka-archive").config(conf=quiet)
         # Spark 4.1 sizes each Arrow batch row by row, quadratic in the list-typed
         # headers column; batches stay capped at maxRecordsPerBatch rows anyway
         .config("spark.sql.execution.arrow.maxBytesPerBatch", str(2**31 - 1))
         # the executors reach S3 with the driver's credentials (never on a command line)
         .config(map=launch.executor_env_conf(dict(os.environ)))
         .getOrCreate())
ready = time.monotonic()
try:
    manifest = job.run(spark, config.load(launch.shipped_file(args.config)), args.plan)
    # spark-submit's output is the task's log (the Spark provider logs each line)
    print("\n".join(progress.lines(manifest, time.monotonic() - started, ready - started)),
          flush=True)
finally:
    spark.stop()
