import pytest

from kafka_archive.monitor import alerts, metrics
from kafka_archive.monitor.freshness import PartitionFreshness

NOW_MS = 1_800_000_000_000


def as_dict(found):
    return {(m.name, m.tags): m.value for m in found}


def test_a_commit_gives_each_topics_records_bytes_and_files_and_the_runs_duration():
    summary = {"committed_at": "2026-11-29T05:00:40+00:00",
               "by_topic": {"b": {"records": 5, "files": 1, "bytes": 300, "replaced": 0},
                            "a": {"records": 0, "files": 0, "bytes": 0, "replaced": 0}}}
    found = as_dict(metrics.of_commit("backup", summary, "2026-11-29T05:00:10+00:00"))
    tags = lambda topic: (("group", "backup"), ("topic", topic))  # noqa: E731
    assert found == {("run.records", tags("a")): 0, ("run.bytes", tags("a")): 0,
                     ("run.files", tags("a")): 0, ("run.records", tags("b")): 5,
                     ("run.bytes", tags("b")): 300, ("run.files", tags("b")): 1,
                     ("run.duration", (("group", "backup"),)): 30_000}


def test_freshness_gives_messages_waiting_per_topic_and_the_worst_partitions_lag():
    def part(topic, partition, archived_to, latest, caught_up_s_ago):
        return PartitionFreshness(topic, partition, archived_to, latest, None, None, None,
                                  NOW_MS - caught_up_s_ago * 1000)

    found = as_dict(metrics.of_freshness("g", [part("t", 0, 10, 25, 40), part("t", 1, 7, 9, 90),
                                               part("u", 0, 3, 3, 500)], NOW_MS))
    assert found == {("lag_messages", (("group", "g"), ("topic", "t"))): 17,
                     ("lag_messages", (("group", "g"), ("topic", "u"))): 0,
                     ("lag_seconds", (("group", "g"), ("topic", "t"))): 90.0,
                     ("lag_seconds", (("group", "g"), ("topic", "u"))): 0.0}


def test_every_mail_kind_is_counted_under_its_kind():
    assert all(m.kind == "count" and dict(m.tags) == {"group": "g", "kind": kind}
               for kind in alerts.MAIL_KINDS for m in metrics.of_mail("g", kind))


def test_a_metric_with_other_tags_than_its_documented_ones_is_refused():
    with pytest.raises(ValueError, match="metric lag_seconds takes tags"):
        metrics._metric("lag_seconds", 1, group="g")


def test_the_grafana_dashboard_charts_every_metric_by_its_prometheus_name():
    import json
    import re
    from pathlib import Path

    dashboard = json.loads((Path(__file__).parents[3] / "docs" / "operate"
                            / "grafana-dashboard.json").read_text())
    exprs = " ".join(t["expr"] for p in dashboard["panels"] for t in p.get("targets", ()))
    charted = set(re.findall(r"airflow_kafka_archive_([a-z_]+?)(?:_sum|_count)?\b[{\[]", exprs))
    assert charted == {name.replace(".", "_") for name in metrics.METRICS}
