"""How kafka-archive launches Spark: pyspark's own spark-submit, Spark's Kafka source jars
from the install cache, and this interpreter for the Python workers."""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_JARS_DIR = REPO / ".cache" / "jars" / "spark-kafka"


def spark_home() -> Path:
    """pyspark's package folder is a complete SPARK_HOME (bin/, jars/)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def kafka_source_jars() -> list[str]:
    """The jars of Spark's Kafka source: $KAFKA_ARCHIVE_SPARK_JARS_DIR or the install cache.
    Passed explicitly so nothing is downloaded when a job starts."""
    folder = Path(os.environ.get("KAFKA_ARCHIVE_SPARK_JARS_DIR", DEFAULT_JARS_DIR))
    jars = sorted(str(p) for p in folder.glob("*.jar"))
    if not jars:
        raise FileNotFoundError(f"no Spark Kafka source jars in {folder}: run scripts/install")
    return jars


def submit_env() -> dict[str, str]:
    """Environment for spark-submit. Without SPARK_HOME, pyspark's launcher asks whatever
    `python3` is first on PATH to find Spark, which outside the venv finds nothing."""
    bin_dir = str(spark_home() / "bin")
    return {"SPARK_HOME": str(spark_home()), "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            # the driver and its web UI bind here (the UI's default is every interface)
            "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"),
            # the Spark provider runs a bare `spark-submit`: make it pyspark's own
            "PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", "")])}


def archive_command(config_path: str, plan_url: str, master: str = "local[2]") -> list[str]:
    """The archive job's spark-submit command line, for running it outside Airflow (CLI,
    tests, benchmark); ArchiveOperator builds the same through the Spark provider."""
    return [str(spark_home() / "bin" / "spark-submit"), "--master", master,
            "--name", "kafka-archive", "--jars", ",".join(kafka_source_jars()),
            str(REPO / "spark_jobs" / "archive.py"), "--config", config_path, "--plan", plan_url]
