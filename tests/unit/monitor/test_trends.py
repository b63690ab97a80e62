import re
from datetime import datetime, timedelta, timezone

from kafka_archive import layout
from kafka_archive.monitor import trends
from kafka_archive.monitor.freshness import PartitionFreshness
from kafka_archive.storage import Storage

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)
NOW_MS = int(NOW.timestamp() * 1000)


def summary(run_id, committed_at, records=5):
    return {"run_id": run_id, "committed_at": committed_at, "records": records, "files": 2,
            "by_topic": {"t": {"records": records, "files": 2, "bytes": 10 * records}}}


def part(topic, archived_to, latest, caught_up_s_ago):
    return PartitionFreshness(topic, 0, archived_to, latest, None, None, None,
                              NOW_MS - caught_up_s_ago * 1000)


def test_a_runs_line_has_its_figures_and_per_topic_the_lag_it_left():
    line = trends.run_line(summary("r1", "2026-11-29T11:59:30+00:00"),
                           "2026-11-29T11:59:00+00:00",
                           [part("t", 5, 20, 30), part("u", 3, 3, 0)], NOW_MS)
    assert line == {"run_id": "r1", "planned_at": "2026-11-29T11:59:00+00:00",
                    "committed_at": "2026-11-29T11:59:30+00:00", "records": 5, "bytes": 50,
                    "files": 2, "duration_s": 30.0,
                    "topics": {"t": {"records": 5, "bytes": 50, "lag_messages": 15,
                                     "lag_s": 30.0},
                               "u": {"records": 0, "bytes": 0, "lag_messages": 0,
                                     "lag_s": 0.0}}}


def test_the_history_keeps_a_run_once_and_only_its_last_days(tmp_path):
    storage, root = Storage(), str(tmp_path)
    old = (NOW - timedelta(days=9)).isoformat(timespec="seconds")
    trends.record(storage, root, "g", {"run_id": "old", "committed_at": old}, NOW - timedelta(days=9))
    for run, records in (("r1", 5), ("r2", 7), ("r1", 6)):  # r1 again: a retried task
        trends.record(storage, root, "g", {"run_id": run, "committed_at": f"2026-11-29T0{records}:00:00+00:00",
                                           "records": records}, NOW)
    assert [(x["run_id"], x["records"]) for x in trends.read(storage, root, "g", NOW)] == [
        ("r1", 6), ("r2", 7)]
    assert not (tmp_path / "_history" / "g" / f"{old[:10]}.jsonl").exists()  # deleted
    day = layout.history_file(root, "g", "2026-11-29")
    storage.put_bytes(day, storage.get_bytes(day) + b'{"run_id": "cut sho')  # a write cut short
    assert len(trends.read(storage, root, "g", NOW)) == 2


def test_each_chart_point_is_a_runs_figure_within_its_window():
    lines = [trends.run_line(summary(f"r{h}", f"2026-11-{d}T{h:02d}:00:10+00:00", records=h),
                             f"2026-11-{d}T{h:02d}:00:00+00:00", [part("t", 0, h, 0)], NOW_MS)
             for d, h in ((25, 1), (29, 9), (29, 11))]
    html = trends.charts_html(lines, NOW_MS)
    day, week = html.split("<div class='window' data-window='604800'>")
    points = lambda text, chart: re.findall(  # noqa: E731
        r"data-run='(\w+)' data-topic='\w*' data-value='([\d.]+)'",
        text.split(f"data-chart='{chart}'")[1].split("</figure>")[0])
    assert points(day, "records") == [("r9", "9"), ("r11", "11")]  # not 4 days ago
    assert points(week, "records") == [("r1", "1"), ("r9", "9"), ("r11", "11")]
    assert points(day, "duration_s") == [("r9", "10"), ("r11", "10")]
    assert points(day, "throughput") == [("r9", "0.9"), ("r11", "1.1")]
    assert points(day, "lag_messages") == [("r9", "9"), ("r11", "11")]
    assert "No history yet" in trends.charts_html([], NOW_MS)


def test_a_chart_draws_the_topics_lagging_most_and_counts_the_rest():
    lines = {f"t{i}": [("r", NOW_MS - 1000, float(i))] for i in range(12)}
    svg = trends.chart("lag_s", "lag", lines, NOW_MS - 3600_000, NOW_MS)
    assert svg.count("<polyline") == trends.TOPICS_CHARTED and "and 4 more" in svg
    assert "data-topic='t11'" in svg and "data-topic='t3'" not in svg
