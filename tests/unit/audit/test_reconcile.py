"""Audit verdicts, monitoring events and reports: pure logic, no services."""

from __future__ import annotations

import csv
import io
import json
import random

import pytest
from hypothesis import given, strategies as st

from kafka_archive.audit import reconcile, reporting
from kafka_archive.audit.checkpoint import Alarm
from kafka_archive.audit.reconcile import BadMonitoringEvent, MonitoringEvent, Verdict
from kafka_archive.formats import audit_counts

MIN = 60_000


def event(topic="t", source="s", start=0, count=1, seq=1, width=MIN, producer="p1"):
    return MonitoringEvent(source, topic, start, width, count, producer, seq)


def verdicts(events, archived, through=None, grace=0, **kw):
    through = {"t": 10 * MIN} if through is None else through
    return reconcile.reconcile(reconcile.expected_counts(events), archived, MIN, through, grace, **kw)


def by_window(vs):
    return {(v.source, v.window_start_ms): (v.status, v.expected, v.archived) for v in vs}


def test_matching_counts_are_ok_and_mismatches_name_the_difference():
    vs = verdicts([event(start=0, count=5), event(start=MIN, count=5, seq=2),
                   event(start=2 * MIN, count=5, seq=3)],
                  {("t", "s", 0): 5, ("t", "s", MIN): 3, ("t", "s", 2 * MIN): 7})
    assert by_window(vs) == {("s", 0): ("OK", 5, 5), ("s", MIN): ("MISSING", 5, 3),
                             ("s", 2 * MIN): ("EXCESS", 5, 7)}
    assert [v.status for v in vs] == ["MISSING", "EXCESS", "OK"]  # mismatches first
    assert vs[0].difference == -2 and vs[1].difference == 2
    assert vs[0].describe().startswith("MISSING 2: topic t, source s, window 1970-01-01T00:01:00Z")


def test_a_retried_event_counts_once_and_delta_events_add_up():
    events = [event(count=4, seq=1), event(count=4, seq=1),   # the same event, sent twice
              event(count=3, seq=2),                         # a later delta for the window
              event(count=4, seq=1, producer="p2")]          # another producer, same seq
    assert reconcile.expected_counts(events) == {("t", "s", 0): (MIN, 11)}


def test_window_not_archived_past_its_end_plus_grace_is_pending():
    events = [event(start=0, count=2), event(start=MIN, count=2, seq=2)]
    archived = {("t", "s", 0): 2, ("t", "s", MIN): 1}
    # archived up to 1.5 windows: the second window is only partly archived
    assert by_window(verdicts(events, archived, {"t": MIN + MIN // 2})) == {
        ("s", 0): ("OK", 2, 2), ("s", MIN): ("PENDING", 2, 1)}
    # with a grace period, even the first window waits
    assert by_window(verdicts(events, archived, {"t": MIN + MIN // 2}, grace=MIN))[("s", 0)][0] == "PENDING"
    assert all(v.status == "PENDING" for v in verdicts(events, archived, {"t": None}))


def test_sources_that_publish_no_counts_are_unaudited_never_alarms():
    vs = verdicts([event(count=1)], {("t", "s", 0): 1, ("t", audit_counts.UNKNOWN_SOURCE, 0): 9})
    assert by_window(vs) == {("s", 0): ("OK", 1, 1), ("unknown", 0): ("UNAUDITED", None, 9)}


def test_archived_messages_of_an_audited_source_in_a_window_it_did_not_report_are_excess():
    vs = verdicts([event(start=0, count=1)], {("t", "s", 0): 1, ("t", "s", 3 * MIN): 2})
    assert by_window(vs)[("s", 3 * MIN)] == ("EXCESS", 0, 2)


def test_archive_windows_roll_up_into_wider_producer_windows():
    five = 5 * MIN
    vs = reconcile.reconcile(reconcile.expected_counts([event(start=five, count=10, width=five)]),
                         {("t", "s", five + i * MIN): 2 for i in range(5)}, MIN,
                         {"t": 100 * MIN}, 0)
    assert [(v.window_start_ms, v.window_ms, v.expected, v.archived, v.status) for v in vs] == [
        (five, five, 10, 10, "OK")]


def test_producer_window_must_be_a_multiple_of_the_archive_window():
    with pytest.raises(reconcile.TerminalError, match="not a multiple"):
        reconcile.reconcile(reconcile.expected_counts([event(width=90_000)]), {}, MIN, {"t": 0}, 0)


def test_time_range_and_topic_selection():
    events = [event(start=i * MIN, count=1, seq=i) for i in range(5)] + [event(topic="other", seq=9)]
    vs = verdicts(events, {}, since_ms=MIN, until_ms=3 * MIN)
    assert sorted(v.window_start_ms for v in vs) == [MIN, 2 * MIN]  # "other" is not audited here


@pytest.mark.parametrize("raw, problem", [
    (b"not json", "not a monitoring event"),
    (b'{"source": "s"}', "not a monitoring event"),
    (json.dumps({"source": "s", "topic": "t", "window_start_ms": 5, "window_ms": 60000,
                 "count": 1, "producer_id": "p", "seq": 1}).encode(), "invalid monitoring event"),
    (json.dumps({"source": "s", "topic": "t", "window_start_ms": 0, "window_ms": 60000,
                 "count": "1", "producer_id": "p", "seq": 1}).encode(), "count"),
])
def test_bad_monitoring_events_name_where_they_are(raw, problem):
    with pytest.raises(BadMonitoringEvent, match=problem) as error:
        MonitoringEvent.from_json(raw, "monitoring topic m partition=0 offset 7")
    assert "offset 7" in str(error.value)


def test_monitoring_event_round_trips():
    e = event(start=3 * MIN, count=12, seq=9)
    assert MonitoringEvent.from_json(e.to_json(), "here") == e


def test_source_of_reads_the_header_from_pairs_and_spark_rows():
    assert audit_counts.source_of([("a", b"x"), ("kafka-archive-source", b"web-1")], "kafka-archive-source") == "web-1"
    assert audit_counts.source_of([{"key": "kafka-archive-source", "value": b"web-2"}], "kafka-archive-source") == "web-2"
    assert audit_counts.source_of(None, "kafka-archive-source") == audit_counts.UNKNOWN_SOURCE
    assert audit_counts.source_of([("kafka-archive-source", b"\xff")], "kafka-archive-source") == audit_counts.UNKNOWN_SOURCE


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 10 * MIN)), max_size=200))
def test_counting_and_reconciling_the_same_messages_is_always_ok(messages):
    counts: dict = {}
    expected: dict = {}
    for source, ts in messages:
        audit_counts.count_archived(counts, f"s{source}", ts, MIN)
        expected[(f"s{source}", audit_counts.window_start(ts, MIN))] = expected.get((f"s{source}", audit_counts.window_start(ts, MIN)), 0) + 1
    events = [event(source=s, start=w, count=n, seq=i) for i, ((s, w), n) in enumerate(expected.items())]
    archived = {("t", s, w): n for (s, w), n in counts.items()}
    vs = verdicts(events, archived, {"t": 11 * MIN})
    assert all(v.status == "OK" for v in vs)
    assert sum(v.archived for v in vs) == len(messages)


def test_reports_list_mismatches_first_in_every_format():
    vs = verdicts([event(start=0, count=5), event(start=MIN, count=5, seq=2)],
                  {("t", "s", 0): 5, ("t", "s", MIN): 4})
    rows = list(csv.DictReader(io.StringIO(reporting.to_csv(vs).decode())))
    assert [(r["status"], r["difference"], r["expected"], r["archived"]) for r in rows] == [
        ("MISSING", "-1", "5", "4"), ("OK", "0", "5", "5")]
    doc = json.loads(reporting.to_json({"group": "g"}, vs))
    first = dict(zip(doc["columns"], doc["verdicts"][0]))
    assert doc["totals"]["MISSING"] == 1 and first["window"] == "1970-01-01T00:01:00Z +60s"
    page = reporting.to_html({"group": "g"}, vs).decode()
    assert page.index("MISSING") < page.index(">OK<") and "<svg" in page
    alarm = Alarm.of(vs[0], "2026-01-01T00:00:00+00:00", "r1")
    summary = reporting.mismatch_summary("g", [alarm])
    assert "1 window(s) do not match" in summary and "MISSING 1: topic t, source s" in summary
    assert "[new, found 2026-01-01T00:00:00+00:00]" in summary


def test_chart_keeps_unaudited_sources_out_of_the_bars_and_marks_mismatches():
    vs = [Verdict("t", "s", 0, MIN, 5, 5, "OK"), Verdict("t", "unknown", 0, MIN, None, 100, "UNAUDITED"),
          Verdict("t", "s", MIN, MIN, 5, 4, "MISSING")]
    chart = reporting._chart(vs)
    # the audited bar of window 0 is 5 high on a scale of 100 (the unaudited bar), not 105
    assert "archived 5, unaudited 100" in chart and "fill='#bbb'" in chart
    assert chart.count("class='mismatch'") == 1 and "MISMATCH" in chart


def test_report_lists_alarms_with_their_acknowledgement():
    alarm = Alarm("t", "s", 0, MIN, "MISSING", 5, 4, "2026-01-01T00:00:00+00:00", "r1",
                  mailed_at="2026-01-01T00:00:01+00:00",
                  ack={"by": "ana", "at": "2026-01-02T00:00:00+00:00", "reason": "known outage"})
    vs = [Verdict("t", "s", 0, MIN, 5, 4, "MISSING")]
    page = reporting.to_html({"group": "g"}, vs, [alarm]).decode()
    assert "<tr class='acknowledged'><td>acknowledged</td><td>MISSING 1</td>" in page
    assert "by ana at 2026-01-02T00:00:00+00:00: known outage" in page
    doc = json.loads(reporting.to_json({"group": "g"}, vs, [alarm]))
    assert doc["alarms"][0]["state"] == "acknowledged" and doc["alarms"][0]["ack"]["by"] == "ana"


def test_html_report_of_many_windows_stays_bounded():
    rng = random.Random(1)
    vs = [Verdict("t", f"s{i % 7}", i * MIN, MIN, 3, rng.choice((2, 3)), "OK") for i in range(5000)]
    page = reporting.to_html({"group": "g"}, vs)
    assert page.count(b"<tr class=") == reporting.HTML_ROWS
    assert b"3000 more verdicts in report.csv" in page
