"""What a deployment's DAG file costs Airflow's DAG processor on every parse (issue 55):

    .venv/bin/python -m tests.support.bench.parse [--groups 50] [--repeat 5]

A DAG folder holding the two-line DAG file of docs/deploy/airflow.md and a config of N
groups; each figure is the median of --repeat fresh processes (the processor parses a file
in a fresh process). Printed:
- our imports: kafka_archive.airflow's modules on top of what any @task DAG file imports
  from Airflow anyway (airflow.sdk, the standard provider's decorators, the task runner);
- the file's parse by Airflow's own DagBag (its `dagbag_stats` duration: our imports,
  the config's load and check, and Airflow building N archive DAGs);
- the same with one group's config broken: that group's DAG stays (its task fails with
  the error), the others parse as before.
Target (issue 55): the file's parse under 0.5 s for 50 groups. Nothing is read from
Kafka or S3 at parse time; the figures do not depend on a service.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.support.bench.processes import uptime

DAG_FILE = "from kafka_archive.airflow import dags_from_config\nglobals().update(dags_from_config())\n"

MEASURE = """
import json, time
import airflow.sdk
import airflow.providers.standard.decorators.python, airflow.sdk.execution_time.task_runner
from airflow.dag_processing.dagbag import DagBag
started = time.perf_counter()
import kafka_archive.airflow.dags
imported = time.perf_counter() - started
bag = DagBag(dag_folder={folder!r})
[stat] = bag.dagbag_stats
print("RESULT", json.dumps({{"imports_s": imported, "parse_s": stat.duration.total_seconds(),
                            "dags": len(bag.dag_ids), "errors": len(bag.import_errors),
                            "broken": sorted(i for i, d in bag.dags.items()
                                             if "config-error" in d.tags)}}))
"""


def config(groups: int, broken: int | None = None) -> str:
    lines = ["kafka: {bootstrap_servers: 'broker:9092'}", "archive_root: s3://bucket/archive",
             "groups:"]
    for n in range(groups):
        policy = "max_recrods: 5" if n == broken else "max_records: 5000000"
        lines.append(f"  group{n}: {{topics: {{include: ['topic{n}\\\\..*']}}, policy: {{{policy}}},"
                     " spark_connect: kafka_archive_spark_connect}")
    return "\n".join(lines) + "\n"


def measure(folder: Path, home: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "KAFKA_ARCHIVE_CONFIG"}
    env |= {"AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(folder),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    done = subprocess.run([sys.executable, "-c", MEASURE.format(folder=str(folder))], env=env,
                          capture_output=True, text=True, timeout=300)
    [line] = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")] or [
        sys.exit(done.stdout[-2000:] + done.stderr[-3000:])]
    return json.loads(line[len("RESULT "):])


def median_of(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        for label, broken in (("every group sound", None), ("one group broken", args.groups // 2)):
            folder = Path(scratch) / label.replace(" ", "-")
            folder.mkdir()
            (folder / "kafka_archive_dags.py").write_text(DAG_FILE)
            (folder / "kafka-archive.yaml").write_text(config(args.groups, broken))
            runs = [measure(folder, Path(scratch) / "airflow") for _ in range(args.repeat)]
            imports, parse = median_of(runs, "imports_s"), median_of(runs, "parse_s")
            print(f"{args.groups} groups, {label}: our imports {imports:.3f} s + the file's parse "
                  f"(DagBag: config, {args.groups} DAGs) {parse:.3f} s = {imports + parse:.3f} s "
                  f"(target < 0.5 s; medians of {args.repeat}); {runs[0]['dags']} DAGs, "
                  f"{runs[0]['errors']} import errors, broken groups' DAGs {runs[0]['broken']}")
    print(uptime())


if __name__ == "__main__":
    main()
