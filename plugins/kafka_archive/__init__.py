"""kafka-archive: archive Kafka topics to S3 in scheduled micro-batches.

The library behind the DAGs in dags/, the Spark jobs in spark_jobs/ and the
`kafka-archive` CLI. Airflow puts plugins/ on sys.path; tests and the CLI import it
through the editable install; Spark ships it to executors with --py-files.
"""
