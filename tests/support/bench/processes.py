"""Process figures for the benchmarks, from psutil: peak memory and CPU seconds of a process
tree by kind (JVM, Python driver, Python workers), the services' and the machine's CPU, the
load beside every figure, and a summary of py-spy's profiles."""

from __future__ import annotations

import os
import re
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from tests.support import localservices

MIB = 1 << 20
SAMPLE_EVERY_S = 0.2


@dataclass
class TreeSample:
    """What the sampler saw of one process tree."""
    peak_total_mib: float = 0.0
    peak_jvm_mib: float = 0.0
    peak_python_mib: float = 0.0   # all Python processes together, at their own peak
    at_peak: dict = field(default_factory=dict)  # kind -> MiB when the total peaked
    max_processes: int = 0
    cpu_s: dict = field(default_factory=dict)    # kind -> CPU seconds (user + system)
    # PySpark's daemon and the workers it forked, each seen once: with workers reused
    # (spark.python.worker.reuse), one per task slot whatever the number of tasks
    python_worker_pids: set = field(default_factory=set)


def _kind(proc: psutil.Process) -> str:
    try:
        name, argv = proc.name(), proc.cmdline()
    except psutil.Error:
        return "gone"
    if name == "java":
        return "jvm"
    if "python" in name or (argv and "python" in argv[0]):
        return "python driver" if "spark_jobs/archive.py" in " ".join(argv) else "python workers"
    return "other"


def _cpu_s(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system


class TreeSampler(threading.Thread):
    """Every SAMPLE_EVERY_S, the RSS of every process under `root`, grouped by kind, and
    the last CPU time seen per process (processes that exit keep the CPU time last
    sampled, so up to 0.2 s of a short-lived worker may be missed)."""

    def __init__(self, root: int):
        super().__init__(daemon=True)
        self.root, self.result = root, TreeSample()
        self._stop_event = threading.Event()
        self._cpu: dict[int, tuple[str, float]] = {}
        self._kinds: dict[int, str] = {}

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.sample()
            self._stop_event.wait(SAMPLE_EVERY_S)

    def stop(self) -> TreeSample:
        self._stop_event.set()
        self.join()
        for kind, cpu in self._cpu.values():
            self.result.cpu_s[kind] = self.result.cpu_s.get(kind, 0.0) + cpu
        return self.result

    def sample(self) -> None:
        try:
            root = psutil.Process(self.root)
            tree = [root, *root.children(recursive=True)]
        except psutil.Error:
            return
        rss: dict[str, float] = {}
        seen = 0
        for proc in tree:
            try:
                with proc.oneshot():
                    cpu, mib = _cpu_s(proc), proc.memory_info().rss / MIB
            except psutil.Error:
                continue
            seen += 1
            # the kind can change once (spark-submit's shell execs the JVM): ask until it's known
            kind = self._kinds.get(proc.pid)
            if kind in (None, "other"):
                kind = self._kinds[proc.pid] = _kind(proc)
            rss[kind] = rss.get(kind, 0.0) + mib
            self._cpu[proc.pid] = (kind, cpu)
            if kind == "python workers":
                self.result.python_worker_pids.add(proc.pid)
        r, total = self.result, sum(rss.values())
        r.max_processes = max(r.max_processes, seen)
        r.peak_jvm_mib = max(r.peak_jvm_mib, rss.get("jvm", 0.0))
        r.peak_python_mib = max(r.peak_python_mib,
                                rss.get("python driver", 0.0) + rss.get("python workers", 0.0))
        if total > r.peak_total_mib:
            r.peak_total_mib, r.at_peak = total, dict(rss)


def service_cpu_s() -> dict[str, float]:
    """CPU seconds used so far by the broker's, the S3 server's and the Spark Connect
    server's processes (its Python workers too), and by the
    whole machine (`machine`: busy time of all cores)."""
    times = psutil.cpu_times()
    out = {"machine": sum(times) - times.idle - times.iowait}
    for name in ("kafka", "s3", "spark-connect"):
        if pid := localservices.SERVICES[name].pid():
            try:
                server = psutil.Process(pid)  # the Connect server: with its Python workers
                out[name] = sum(_cpu_s(p) for p in [server, *server.children(recursive=True)])
            except psutil.Error:
                pass
    return out



def describe_profile(path: Path, top: int = 14) -> str:
    """Where the Python processes' CPU went, from py-spy's collapsed stacks: the share of
    the driver and of the workers, of imports, and the functions with the most samples of
    their own (with the kafka_archive function they ran under)."""
    own: dict[str, int] = {}
    kinds: dict[str, int] = {}
    total = importing = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        # py-spy nests each subprocess's stacks under its parents' "process <pid>:<command>"
        nested = max(i for i, f in enumerate(frames) if f.startswith("process "))
        process, frames = frames[nested], frames[nested + 1:]
        samples = int(count)
        total += samples
        kind = "worker" if "pyspark.daemon" in process or "pyspark.worker" in process else "driver"
        kinds[kind] = kinds.get(kind, 0) + samples
        if any(f.startswith("_find_and_load ") for f in frames):
            importing += samples
        if not frames:
            continue
        leaf = re.sub(r" \((.*/)?", " (", frames[-1])
        ours = next((re.sub(r" \((.*/)?", " (", f) for f in reversed(frames)
                     if "kafka_archive/" in f or "spark_jobs/" in f), None)
        key = leaf if ours in (None, leaf) else f"{leaf}  under  {ours}"
        own[key] = own.get(key, 0) + samples
    share = lambda n: f"{100 * n / max(total, 1):.1f}%"  # noqa: E731
    lines = [f"  py-spy profile {path}: {total:,} samples at 200 Hz ({total / 200:.1f} CPU-s of "
             f"Python); " + ", ".join(f"{k} {share(v)}" for k, v in sorted(kinds.items()))
             + f"; importing modules {share(importing)}"]
    for name, count in sorted(own.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"    {share(count):>6}  {name}")
    return "\n".join(lines)


def uptime() -> str:
    """`uptime`'s line: the load beside every figure, since the machine is shared."""
    result = subprocess.run(["uptime"], capture_output=True, text=True)
    return result.stdout.strip() or f"load average {os.getloadavg()}"
