"""Sends the archive's metrics (kafka_archive.monitor.metrics) through Airflow's own
metrics client, in the task's process: wherever the deployment's `[metrics]` section sends
Airflow's (StatsD or OpenTelemetry; nowhere when neither is on). A metric never fails a
task: a client that cannot send is logged and the task goes on."""

from __future__ import annotations

import logging
from typing import Iterable

from kafka_archive.monitor.metrics import PREFIX, Metric

log = logging.getLogger(__name__)


def emit(metrics: Iterable[Metric]) -> None:
    from airflow.sdk.observability import stats

    try:
        for m in metrics:
            name, tags = PREFIX + m.name, dict(m.tags)
            if m.kind == "gauge":
                stats.gauge(name, m.value, tags=tags)
            elif m.kind == "count":
                stats.incr(name, count=int(m.value), tags=tags)
            else:
                stats.timing(name, m.value, tags=tags)
    except Exception as exc:  # noqa: BLE001 - the figures are not worth a failed task
        log.warning("could not send the archive's metrics: %s", exc)
