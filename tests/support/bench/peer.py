"""The peer tests/support/bench/archive.py measures the archive job against: the Spark Structured
Streaming query a user would write instead of kafka-archive, draining a topic once with
`trigger(availableNow=True)` into parquet (Spark's default codec), text (the values) or an
Iceberg table (as Iceberg's Spark docs write a stream: `toTable`, fanout writers; every
Kafka column and the headers, as the table group's key_value shape holds them,
partitioned by Kafka partition), in the catalog `peer` the spark-submit's --conf names.

    spark-submit --master local[2] --jars <Spark's Kafka source jars> tests/support/bench/peer.py \
        --bootstrap HOST:PORT --topic TOPIC --sink parquet|text|iceberg --output DIR

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
parser.add_argument("--sink", choices=("parquet", "text", "iceberg"), required=True)
parser.add_argument("--output", required=True, help="a local folder; its checkpoint goes beside it")
args = parser.parse_args()

spark = SparkSession.builder.appName(f"kafka-archive-peer-{args.sink}").getOrCreate()
try:
    frame = (spark.readStream.format("kafka")
             .option("kafka.bootstrap.servers", args.bootstrap)
             .option("subscribe", args.topic)
             .option("startingOffsets", "earliest")
             .option("includeHeaders", str(args.sink == "iceberg").lower())
             .load())
    if args.sink == "text":
        frame = frame.selectExpr("CAST(value AS STRING) AS value")
    started = time.perf_counter()
    writer = (frame.writeStream.option("checkpointLocation", args.output + "-checkpoint")
              .trigger(availableNow=True))
    if args.sink == "iceberg":
        query = (writer.format("iceberg").outputMode("append").partitionBy("partition")
                 .option("fanout-enabled", "true").toTable("peer.bench.events"))
    else:
        query = writer.format(args.sink).option("path", args.output).start()
    query.awaitTermination()
    seconds = time.perf_counter() - started
    rows = sum(p["numInputRows"] for p in query.recentProgress)
    print("peer-result " + json.dumps({"query_s": seconds, "rows": rows}), flush=True)
finally:
    spark.stop()
