"""Spark smoke job: read [start, end) of one partition with Spark's Kafka source and write
(offset, value) as JSON lines to a local file."""

import json
import sys

from pyspark.sql import SparkSession

bootstrap, topic, partition, start, end, out = sys.argv[1:7]
spark = SparkSession.builder.appName("kafka-archive-smoke").getOrCreate()
rows = (spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", json.dumps({topic: {partition: int(start)}}))
        .option("endingOffsets", json.dumps({topic: {partition: int(end)}}))
        .load()
        .selectExpr("offset", "CAST(value AS STRING) AS value")
        .collect())
with open(out, "w") as f:
    for row in rows:
        f.write(json.dumps({"offset": row.offset, "value": row.value}) + "\n")
spark.stop()
