"""The training run of the JVM class-data sharing archive scripts/install builds
(.cache/spark-cds/spark.jsa): a spark-submit application that loads the classes the archive
job's driver loads (a SparkContext, a Python RDD's tasks of pickled slices, collect), run
once with `-XX:ArchiveClassesAtExit`. Jobs started with `-XX:SharedArchiveFile` then map
those classes instead of finding, reading and verifying them in Spark's ~250 jars: a good
part of the driver's CPU at start-up (issue 14). Needs no broker and no S3.

    spark-submit --master local[2] --driver-java-options -XX:ArchiveClassesAtExit=OUT \
        scripts/spark_class_archive.py
"""

from pyspark import SparkConf, SparkContext

sc = SparkContext.getOrCreate(SparkConf().setAppName("kafka-archive-class-archive")
                              .set("spark.ui.enabled", "false").set("spark.log.level", "WARN"))


def archive(tasks):
    for slices in tasks:
        for topic, partition in slices:
            yield {"topic": topic, "partition": partition, "records": 1}


try:
    tasks = [[("topic", p)] for p in range(4)]
    rows = sc.parallelize(tasks, len(tasks)).mapPartitions(archive).collect()
    assert sorted(r["partition"] for r in rows) == [0, 1, 2, 3], rows
finally:
    sc.stop()
