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
import re
import subprocess
import sys
import threading
import time
from collections import defaultdict

import psutil

SAMPLE_EVERY_S = 0.5

# (kind, test on the command line): the first that matches names the process
KINDS = [
    ("airflow dags test", lambda c: "airflow" in c and " dags test" in c),
    ("airflow task process", lambda c: "airflow" in c and any(
        s in c for s in (" tasks run", "supervisor", "task runner"))),
    ("airflow CLI (other)", lambda c: "bin/airflow " in c and not any(
        s in c for s in ("api-server", "scheduler", "dag-processor", "triggerer", "worker"))),
    ("Spark JVM of a test's context", lambda c: "SparkSubmit" in c and "pyspark-shell" in c),
    ("spark-submit (a task's job)", lambda c: "SparkSubmit" in c),
    ("kafka-archive CLI", lambda c: "kafka_archive.cli" in c or "bin/kafka-archive" in c),
    ("chromium", lambda c: "chrom" in c),
    ("service", lambda c: any(s in c for s in (
        "kafka.Kafka", "minio", "postgres", "toxiproxy", "api-server", "scheduler",
        "dag-processor", "triggerer", "iceberg", "smtp", "deploy.master", "deploy.worker"))),
]


def kind_of(cmdline: str) -> str | None:
    return next((kind for kind, test in KINDS if test(cmdline)), None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    command = [a for a in parser.parse_args(argv).command if a != "--"]
    started = time.monotonic()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output: list[str] = []
    echo = threading.Thread(target=_echo, args=(child.stdout, output), daemon=True)
    echo.start()
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
    echo.join()
    print(f"\nsuite profile: {' '.join(command)}: exit {child.returncode}, {wall:.0f} s wall, "
          f"CPU busy {busy_s:.0f} core-s of {wall * psutil.cpu_count():.0f} "
          f"({busy_s / max(wall * psutil.cpu_count(), 1):.0%})")
    print(f"{'kind':28} {'alive s':>8} {'share':>6} {'started':>8}")
    for kind, _ in KINDS:
        if kind in alive_s:
            print(f"{kind:28} {alive_s[kind]:8.0f} {alive_s[kind] / wall:6.0%} "
                  f"{len(seen[kind]):8}")
    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    by_file, by_phase = durations(output)
    if by_file:
        print("pytest --durations by phase: " + ", ".join(
            f"{phase} {seconds:.0f} s" for phase, seconds in by_phase.items()))
        for name, seconds in sorted(by_file.items(), key=lambda kv: -kv[1])[:30]:
            print(f"{seconds:8.0f} s  {name}")
    return child.returncode


def _echo(stream, into: list[str]) -> None:
    for line in stream:
        sys.stdout.write(line)
        into.append(line)


def durations(lines: list[str]) -> tuple[dict[str, float], dict[str, float]]:
    """pytest's --durations lines summed by test file and by phase."""
    by_file, by_phase = defaultdict(float), defaultdict(float)
    for line in lines:
        if m := re.match(r"\s*([\d.]+)s (call|setup|teardown)\s+(\S+?)::", line):
            by_file[m[3]] += float(m[1])
            by_phase[m[2]] += float(m[1])
    return by_file, by_phase


if __name__ == "__main__":
    sys.exit(main())
