"""spark-submit entry point: archive the slices of one plan.

    spark-submit ... spark_jobs/archive.py --config CONFIG --plan PLAN_URL
"""

import argparse

from pyspark.sql import SparkSession

from kafka_archive import archiving, config

parser = argparse.ArgumentParser()
parser.add_argument("--config", required=True)
parser.add_argument("--plan", required=True)
args = parser.parse_args()

spark = SparkSession.builder.appName("kafka-archive").getOrCreate()
try:
    archiving.run(spark, config.load(args.config), args.plan)
finally:
    spark.stop()
