"""The training run of the JVM class-data sharing archive scripts/install builds
(.cache/spark-cds/spark.jsa): a spark-submit application that loads the classes the archive
job's driver loads (SparkSession, the SQL planner and code generator, a Python mapInArrow
over binary, long and header columns, Arrow, collect), run once with
`-XX:ArchiveClassesAtExit`. Jobs started with `-XX:SharedArchiveFile` then map those
classes instead of finding, reading and verifying them in Spark's ~250 jars: about 40% of
the driver's CPU at start-up (issue 14). Needs no broker and no S3.

    spark-submit --master local[2] --driver-java-options -XX:ArchiveClassesAtExit=OUT \
        scripts/spark_class_archive.py
"""

from pyspark.sql import SparkSession

spark = (SparkSession.builder.appName("kafka-archive-class-archive")
         .config("spark.ui.enabled", "false").config("spark.log.level", "WARN").getOrCreate())


def write(batches):
    import pyarrow as pa

    for batch in batches:
        yield pa.RecordBatch.from_pylist([{"records": batch.num_rows}])


try:
    frame = spark.range(0, 1000, numPartitions=2).selectExpr(
        "'topic' AS topic", "CAST(id % 2 AS INT) AS partition", "id AS offset",
        "CAST(NULL AS BINARY) AS key", "CAST(repeat('x', 100) AS BINARY) AS value",
        "unix_millis(current_timestamp()) AS timestamp_ms",
        "array(named_struct('key', 'k', 'value', CAST('v' AS BINARY))) AS headers")
    rows = frame.mapInArrow(write, "records long").collect()
    assert sum(r.records for r in rows) == 1000, rows
finally:
    spark.stop()
