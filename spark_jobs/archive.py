"""spark-submit entry point: archive the slices of one plan.

    spark-submit ... spark_jobs/archive.py --config CONFIG --plan PLAN_URL
"""

import argparse

from pyspark.sql import SparkSession

from kafka_archive import config
from kafka_archive.archive import job

parser = argparse.ArgumentParser()
parser.add_argument("--config", required=True)
parser.add_argument("--plan", required=True)
args = parser.parse_args()

spark = (SparkSession.builder.appName("kafka-archive")
         # Spark 4.1 sizes each Arrow batch row by row, quadratic in the list-typed
         # headers column; batches stay capped at maxRecordsPerBatch rows anyway
         .config("spark.sql.execution.arrow.maxBytesPerBatch", str(2**31 - 1))
         # a batch job nobody browses: no web UI to start (the Airflow task log has it all)
         .config("spark.ui.enabled", "false")
         .getOrCreate())
try:
    job.run(spark, config.load(args.config), args.plan)
finally:
    spark.stop()
