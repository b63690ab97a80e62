"""Where a test run's wall time goes, by cause (issue 42): runs a command (the suite) and
samples the machine's processes twice a second, then prints per kind of process the
seconds during which at least one was alive, the count started, and the machine's CPU
use, so that "waiting" and "working" can be told apart.

    .venv/bin/python -m tests.support.bench.suite_profile -- scripts/test --durations=0

Kinds are read from command lines; a process alive through the whole run (a service)
counts as a service, not as a cause of waiting. Printed beside `uptime`.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections import defaultdict

import psutil

SAMPLE_EVERY_S = 0.5

# (kind, test on the command line): the first that matches names the process
KINDS = [
    ("airflow dags test", lambda c: "airflow" in c and " dags test" in c),
    ("airflow CLI (other)", lambda c: "bin/airflow " in c and not any(
        s in c for s in ("api-server", "scheduler", "dag-processor", "triggerer", "celery",
                         " tasks run", "supervisor"))),
    ("airflow task process", lambda c: "airflow" in c and (" tasks run" in c
                                                          or "supervisor" in c)),
    ("spark-submit / Spark JVM", lambda c: "java" in c and ("SparkSubmit" in c
                                                           or "spark-class" in c)),
    ("kafka-archive CLI", lambda c: "kafka_archive.cli" in c or "bin/kafka-archive" in c),
    ("chromium", lambda c: "chrom" in c),
    ("hadoop reader JVM", lambda c: "java" in c and "hadoop" in c.lower()),
    ("service", lambda c: any(s in c for s in (
        "kafka.Kafka", "minio", "postgres", "toxiproxy", "api-server", "scheduler",
        "dag-processor", "triggerer", "iceberg", "smtp", "Master", "Worker"))),
]


def kind_of(cmdline: str) -> str | None:
    return next((kind for kind, test in KINDS if test(cmdline)), None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    command = [a for a in parser.parse_args(argv).command if a != "--"]
    started = time.monotonic()
    child = subprocess.Popen(command)
    alive_s: dict[str, float] = defaultdict(float)   # kind -> seconds with one alive
    seen: dict[str, set[int]] = defaultdict(set)     # kind -> pids
    busy_s, samples = 0.0, 0
    psutil.cpu_percent()
    while child.poll() is None:
        time.sleep(SAMPLE_EVERY_S)
        kinds = set()
        for proc in psutil.process_iter(["pid", "cmdline"]):
            kind = kind_of(" ".join(proc.info["cmdline"] or ()))
            if kind is not None:
                kinds.add(kind)
                seen[kind].add(proc.info["pid"])
        for kind in kinds:
            alive_s[kind] += SAMPLE_EVERY_S
        busy_s += psutil.cpu_percent() / 100 * psutil.cpu_count() * SAMPLE_EVERY_S
        samples += 1
    wall = time.monotonic() - started
    print(f"\nsuite profile: {' '.join(command)}: exit {child.returncode}, {wall:.0f} s wall, "
          f"CPU busy {busy_s:.0f} core-s of {wall * psutil.cpu_count():.0f} "
          f"({busy_s / max(wall * psutil.cpu_count(), 1):.0%})")
    print(f"{'kind':28} {'alive s':>8} {'share':>6} {'started':>8}")
    for kind, _ in KINDS:
        if kind in alive_s:
            print(f"{kind:28} {alive_s[kind]:8.0f} {alive_s[kind] / wall:6.0%} "
                  f"{len(seen[kind]):8}")
    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    return child.returncode


if __name__ == "__main__":
    sys.exit(main())
