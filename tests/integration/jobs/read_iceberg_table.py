"""A Spark reader of a table group's table, as a data team's would be: Iceberg's
JdbcCatalog on the database pyiceberg's SqlCatalog writes (SQLite or PostgreSQL), or its
RESTCatalog, S3FileIO on MinIO. Arguments: the catalog's JDBC URL (or the REST catalog's
http URL), warehouse, S3 endpoint, namespace, output JSON path, then each table to read
as `name` or `name=expression`: the SQL expression read beside each row's Kafka partition
and offset (default: the value as hex). One Spark start for all of them.
Credentials: the AWS_* environment; the database's, if any, in JDBC_USER and
JDBC_PASSWORD, the REST catalog's token in REST_TOKEN (never on a command line)."""

import json
import os
import sys

from pyspark.sql import SparkSession

jdbc_url, warehouse, endpoint, namespace, out, *tables = sys.argv[1:]
prefix = "spark.sql.catalog.local"
builder = SparkSession.builder.appName("read-iceberg-table")
for key in ("user", "password"):
    if f"JDBC_{key.upper()}" in os.environ:
        builder = builder.config(f"{prefix}.jdbc.{key}", os.environ[f"JDBC_{key.upper()}"])
if jdbc_url.startswith("http"):
    builder = builder.config(f"{prefix}.type", "rest").config(f"{prefix}.token",
                                                              os.environ["REST_TOKEN"])
else:
    builder = builder.config(f"{prefix}.type", "jdbc").config(f"{prefix}.jdbc.schema-version", "V1")
spark = (builder
         .config(prefix, "org.apache.iceberg.spark.SparkCatalog")
         .config(f"{prefix}.uri", jdbc_url)
         .config(f"{prefix}.warehouse", warehouse)
         .config(f"{prefix}.io-impl", "org.apache.iceberg.aws.s3.S3FileIO")
         .config(f"{prefix}.s3.endpoint", endpoint)
         .config(f"{prefix}.s3.path-style-access", "true")
         .config(f"{prefix}.client.region", "us-east-1")
         .getOrCreate())
found = {}
for argument in tables:
    name, _, expression = argument.partition("=")  # a topic's name holds no "="
    table = f"local.{namespace}.`{name}`"
    rows = spark.sql(f"SELECT kafka.partition AS p, kafka.offset AS o, "
                     f"{expression or 'lower(hex(value))'} AS v FROM {table}").collect()
    snapshots = spark.sql(f"SELECT snapshot_id, operation, summary['kafka-archive.run-id'] AS run "
                          f"FROM {table}.snapshots ORDER BY committed_at").collect()
    first = snapshots[0].snapshot_id
    at_first = spark.sql(f"SELECT count(*) AS n FROM {table} VERSION AS OF {first}").first().n
    found[name] = {"rows": [[r.p, r.o, r.v] for r in rows],
                   "snapshots": [[s.operation, s.run] for s in snapshots],
                   "records_at_first_snapshot": at_first}
with open(out, "w") as f:
    json.dump(found, f)
spark.stop()
