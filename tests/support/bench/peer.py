"""The peer tests/support/bench/archive.py measures the archive job against: the Spark Structured
Streaming query a user would write instead of kafka-archive, draining a topic once with
`trigger(availableNow=True)` into parquet (Spark's default codec) or text (the values).

    spark-submit --master local[2] --jars <Spark's Kafka source jars> tests/support/bench/peer.py \
        --bootstrap HOST:PORT --topic TOPIC --sink parquet|text --output DIR

Writes to a local folder (the bundled Hadoop has no S3 client), and prints one line
`peer-result {"query_s": ..., "rows": ...}`: the query's time from start() to its end,
without Spark's start-up, and the rows it read.
"""

import argparse
import json
import time

from pyspark.sql import SparkSession

parser = argparse.ArgumentParser()
parser.add_argument("--bootstrap", required=True)
parser.add_argument("--topic", required=True)
parser.add_argument("--sink", choices=("parquet", "text"), required=True)
parser.add_argument("--output", required=True, help="a local folder; its checkpoint goes beside it")
args = parser.parse_args()

spark = SparkSession.builder.appName(f"kafka-archive-peer-{args.sink}").getOrCreate()
try:
    frame = (spark.readStream.format("kafka")
             .option("kafka.bootstrap.servers", args.bootstrap)
             .option("subscribe", args.topic)
             .option("startingOffsets", "earliest")
             .load())
    if args.sink == "text":
        frame = frame.selectExpr("CAST(value AS STRING) AS value")
    started = time.perf_counter()
    query = (frame.writeStream.format(args.sink)
             .option("path", args.output)
             .option("checkpointLocation", args.output + "-checkpoint")
             .trigger(availableNow=True)
             .start())
    query.awaitTermination()
    seconds = time.perf_counter() - started
    rows = sum(p["numInputRows"] for p in query.recentProgress)
    print("peer-result " + json.dumps({"query_s": seconds, "rows": rows}), flush=True)
finally:
    spark.stop()
