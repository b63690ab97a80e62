"""The training run of the JVM class-data sharing archive scripts/install builds
(.cache/spark-cds/spark.jsa): a spark-submit application that loads the classes the archive
job's driver loads (a SparkSession, a range mapped by mapInArrow in Python workers, collect:
kafka_archive.spark.mapped), run once with `-XX:ArchiveClassesAtExit`. Jobs started with
`-XX:SharedArchiveFile` then map those classes instead of finding, reading and verifying
them in Spark's ~250 jars: a good part of the driver's CPU at start-up (issue 14). Needs no
broker and no S3.

    spark-submit --master local[2] --driver-java-options -XX:ArchiveClassesAtExit=OUT \
        scripts/spark_class_archive.py
"""

import json

from pyspark.sql import SparkSession

session = (SparkSession.builder.appName("kafka-archive-class-archive")
           .config("spark.ui.enabled", "false").config("spark.log.level", "WARN").getOrCreate())


def archive(batches):
    import pyarrow as pa

    for batch in batches:
        for i in batch.column(0).to_pylist():
            yield pa.RecordBatch.from_pydict({"row": [json.dumps({"partition": i})]})


try:
    rows = session.range(0, 4, 1, numPartitions=4).mapInArrow(archive, "row string").collect()
    assert sorted(json.loads(r.row)["partition"] for r in rows) == [0, 1, 2, 3], rows
finally:
    session.stop()
