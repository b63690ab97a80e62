"""The archive's figures as metrics, for the systems teams already run beside Airflow.

Pure: each function turns what a task already knows (a commit's summary, the freshness
task's partitions, an audit's outcome, a mail) into `Metric`s; the Airflow adapter
(kafka_archive.airflow.metrics) sends them through Airflow's own metrics client, so they
go wherever the deployment sends Airflow's (StatsD, with tags when `statsd_influxdb_enabled`
or `statsd_datadog_enabled` is on; OpenTelemetry when `otel_on`). `METRICS` names every one
(the docs' metrics reference is generated from it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from kafka_archive.monitor.freshness import (PartitionFreshness, plan_to_commit_s, topic_lags,
                                           topic_pending)

PREFIX = "kafka_archive."  # after Airflow's own statsd_prefix ("airflow." by default)


@dataclass(frozen=True)
class Kind:
    kind: str  # "gauge": the latest value; "count": added up; "timing": milliseconds
    tags: tuple[str, ...]
    what: str


METRICS: dict[str, Kind] = {
    "lag_messages": Kind("gauge", ("group", "topic"),
                         "messages in Kafka not archived yet, after the run's commit"),
    "lag_seconds": Kind("gauge", ("group", "topic"),
                        "how far the archive is behind Kafka (its worst partition's lag, "
                        "as the freshness SLA measures it)"),
    "run.records": Kind("count", ("group", "topic"), "messages a run committed"),
    "run.bytes": Kind("count", ("group", "topic"), "bytes of the files a run committed"),
    "run.files": Kind("count", ("group", "topic"), "files a run committed"),
    "run.duration": Kind("timing", ("group",), "a run's plan-to-commit time, in ms"),
    "audit.mismatches": Kind("gauge", ("group",),
                             "audit windows whose archived count differs from what the "
                             "producers counted, as of the latest reconcile"),
    "mails": Kind("count", ("group", "kind"), "alert mails sent, by kind"),
}


@dataclass(frozen=True)
class Metric:
    name: str  # a key of METRICS
    value: float
    tags: tuple[tuple[str, str], ...]

    @property
    def kind(self) -> str:
        return METRICS[self.name].kind


def _metric(name: str, value: float, **tags: str) -> Metric:
    if set(tags) != set(METRICS[name].tags):
        raise ValueError(f"metric {name} takes tags {METRICS[name].tags}, got {sorted(tags)}")
    return Metric(name, value, tuple(sorted(tags.items())))


def of_commit(group: str, summary: dict, planned_at: str) -> list[Metric]:
    """A committed run's figures per topic, and its plan-to-commit time."""
    found = []
    for topic, figures in sorted(summary.get("by_topic", {}).items()):
        for name in ("records", "bytes", "files"):
            found.append(_metric(f"run.{name}", figures.get(name, 0), group=group, topic=topic))
    if (took := plan_to_commit_s(planned_at, summary["committed_at"])) is not None:
        found.append(_metric("run.duration", took * 1000, group=group))
    return found


def of_freshness(group: str, partitions: Iterable[PartitionFreshness],
                 now_ms: int) -> list[Metric]:
    """Per topic measured, messages waiting and the lag in seconds (when Kafka told it)."""
    partitions = list(partitions)
    return [_metric("lag_messages", count, group=group, topic=topic)
            for topic, count in topic_pending(partitions).items()] + [
        _metric("lag_seconds", seconds, group=group, topic=topic)
        for topic, seconds in topic_lags(partitions, now_ms).items()]


def of_audit(group: str, mismatches: int) -> list[Metric]:
    return [_metric("audit.mismatches", mismatches, group=group)]


def of_mail(group: str, kind: str) -> list[Metric]:
    return [_metric("mails", 1, group=group, kind=kind)]
