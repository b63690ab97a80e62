"""The Spark entry points, shipped in the wheel as kafka_archive.spark_jobs (pyproject's
package-dir): spark-submit runs these files by path (kafka_archive.spark.APPLICATION)."""
