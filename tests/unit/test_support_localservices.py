"""tests/support/localservices.py: a start while the service is shutting down waits for the
stop and starts it afresh, instead of calling the dying process running."""

from __future__ import annotations

import fcntl
import sys
import threading
import time
from pathlib import Path

from tests.support import localservices

# exits 1.5 s after SIGTERM, like a broker flushing its logs; says when it listens for it
SLOW_TO_STOP = ("import pathlib, signal, sys, time\n"
                "signal.signal(signal.SIGTERM, lambda *_: (time.sleep(1.5), sys.exit(0)))\n"
                "pathlib.Path('ready').touch()\n"
                "while True: time.sleep(0.1)\n")


def ready_file(env):
    if not (localservices.SERVICES_DIR / "slow" / "ready").exists():
        raise localservices.NotReady("not yet")


def held(lock: Path) -> bool:
    """Whether another holder has the lock (a stop in progress)."""
    with open(lock, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
        return False


def test_a_start_during_a_stop_waits_and_starts_afresh(tmp_path, monkeypatch):
    monkeypatch.setattr(localservices, "SERVICES_DIR", tmp_path)
    service = localservices.Service(
        name="slow", command=lambda env, home: [sys.executable, "-c", SLOW_TO_STOP],
        ready=ready_file)
    assert service.start({}) is True
    first = service.pid()
    (tmp_path / "slow" / "ready").unlink()
    stopping = threading.Thread(target=service.stop)
    stopping.start()
    deadline = time.monotonic() + 10
    while not held(tmp_path / "slow" / "start.lock"):  # the stop is under way
        assert time.monotonic() < deadline
        time.sleep(0.01)
    try:
        assert service.start({}) is True  # waited for the stop, then started
        assert service.pid() not in (None, first)
    finally:
        stopping.join()
        service.stop()
    assert service.pid() is None


def test_the_shells_airflow_is_the_running_one():
    """`localservices.py env` (the demo, `airflow dags test`, the CLI) points at the
    metadata DB of the Airflow service and links to its UI: one Airflow, not two."""
    env = localservices.local_env()
    shell, service = localservices.shell_env(env), localservices._airflow_process_env(env)
    for name in ("AIRFLOW_HOME", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "AIRFLOW__API__BASE_URL",
                 "AIRFLOW__CORE__DAGS_FOLDER"):
        assert shell[name] == service[name], name
    assert shell["AIRFLOW__API__BASE_URL"] == localservices.airflow_url(env)
