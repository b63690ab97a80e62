"""The benchmarks' shared parts (tests/support/bench/): the figures they print come from
these, so they are tested like the library. No services: a real child process stands in
for spark-submit's tree."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from tests.support.bench.kafka_data import log_line
from tests.support.bench.processes import TreeSampler, describe_profile

# a Python process that holds ~80 MiB and burns some CPU, then waits to be told to exit
HOLDER = ("import sys, time\n"
          "block = bytearray(80 << 20)\n"
          "for i in range(0, len(block), 4096): block[i] = 1\n"
          "t = time.process_time()\n"
          "while time.process_time() - t < 0.3: pass\n"
          "print('ready', flush=True)\n"
          "sys.stdin.read()\n")


def test_the_sampler_sees_a_python_child_s_memory_and_cpu():
    child = subprocess.Popen([sys.executable, "-c", HOLDER], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    sampler = TreeSampler(child.pid)
    sampler.start()
    try:
        assert child.stdout.readline().strip() == "ready"
        sampler.sample()  # at least one sample once the block is touched
    finally:
        child.stdin.close()
        child.wait(timeout=30)
    result = sampler.stop()
    assert result.peak_python_mib >= 75, result
    assert result.peak_jvm_mib == 0
    assert result.cpu_s["python workers"] >= 0.25, result.cpu_s
    assert result.max_processes == 1


def test_the_profile_summary_splits_driver_workers_and_imports(tmp_path):
    collapsed = tmp_path / "profile.txt"
    collapsed.write_text(
        "process 1:python spark_jobs/archive.py;main (spark_jobs/archive.py:10);"
        "run (/x/kafka_archive/archive/job.py:5);sleep (time.py:1) 20\n"
        "process 1:python;process 2:python -m pyspark.daemon;"
        "_find_and_load (<frozen>:1);compile (zipimport.py:3) 60\n"
        "process 1:python;process 3:python -m pyspark.daemon;"
        "read (/x/kafka_archive/archive/source.py:45);consume (ck.py:9) 120\n")
    text = describe_profile(collapsed)
    assert "200 samples" in text and "(1.0 CPU-s of Python)" in text
    assert "driver 10.0%, worker 90.0%" in text
    assert "importing modules 30.0%" in text
    # the busiest leaf first, named with the kafka_archive function it ran under
    first = text.splitlines()[1]
    assert "60.0%" in first and "consume (ck.py:9)" in first and "source.py:45" in first


def test_log_lines_have_the_asked_size_and_are_json():
    rng = random.Random(1)
    when = datetime(2026, 1, 1, tzinfo=timezone.utc)
    for size in (400, 1024, 4096):
        line = log_line(rng, size, when)
        assert len(line) == size
        assert json.loads(line)["ts"].startswith("2026-01-01T00:")


def test_the_old_command_lines_still_run_the_moved_modules(tmp_path):
    """scripts/localservices.py and scripts/benchmark*.py forward to tests.support, from
    any working directory, with the same arguments."""
    root = Path(__file__).resolve().parents[2]
    for script, args, expected in (
            ("localservices.py", ["status"], "kafka: "),
            ("benchmark.py", ["--help"], "--gigabytes"),
            ("benchmark_catalog.py", ["--help"], "--runs"),
            ("benchmark_audit.py", ["--help"], "--windows")):
        result = subprocess.run([sys.executable, str(root / "scripts" / script), *args],
                                capture_output=True, text=True, cwd=tmp_path, timeout=120)
        assert result.returncode == 0, (script, result.stderr[-2000:])
        assert expected in result.stdout, (script, result.stdout[-2000:])
