"""Alert messages: each names group, topics, partitions, offsets and figures, links the run
in the Airflow UI, and escapes what it quotes."""

from test_freshness import NOW_MS, fresh

from kafka_archive.audit.checkpoint import Alarm
from kafka_archive.monitor import alerts
from kafka_archive.monitor.freshness import past_sla
from kafka_archive.plan.planning import Anomaly, Plan, Slice

LINK = "http://airflow.example:8080/dags/kafka_archive_backup/runs/manual__2026"


def plan(run_id="manual__2026", slices=(Slice("orders", 0, 10, 30, 1 << 20),
                                        Slice("orders", 3, 0, 5, 1 << 20),
                                        Slice("clicks", 1, 7, 8, 1 << 20))):
    return Plan(group="backup", run_id=run_id, created_at="2026-01-01T00:00:00+00:00",
                bootstrap="b:9092", generation=1, format={}, slices=tuple(slices),
                token_versions={}, base_offsets={})


def test_run_link_quotes_the_run_id_for_the_airflow_ui():
    assert (alerts.run_link("http://af:8080/", "kafka_archive_backup",
                            "manual__2026-01-01T00:00:00+00:00")
            == "http://af:8080/dags/kafka_archive_backup/runs/"
               "manual__2026-01-01T00%3A00%3A00%2B00%3A00")


def test_task_failure_names_task_error_planned_slices_and_links():
    message = alerts.task_failed("backup", "manual__2026", "archive", 3,
                                 "AirflowException: spark-submit exited 1", None, plan(), LINK,
                                 LINK + "/tasks/archive?try_number=3")
    assert message.subject == "[kafka-archive] backup: task archive failed in run manual__2026"
    for expected in ("archive", "backup", "manual__2026", "spark-submit exited 1",
                     "<td>orders</td><td>0</td><td>[10, 30)</td><td>20</td>",
                     "<td>orders</td><td>3</td><td>[0, 5)</td><td>5</td>",
                     "<td>clicks</td><td>1</td><td>[7, 8)</td><td>1</td>",
                     "3 slices, 26 offsets", f'href="{LINK}"', "tasks/archive?try_number=3"):
        assert expected in message.html, expected


def test_task_failure_without_plan_says_nothing_moved_and_classifies_the_error():
    message = alerts.task_failed("backup", "r1", "plan", 1, "MalformedTokenError: x", True,
                                 None, LINK, None)
    assert "No plan was made" in message.html
    assert "terminal: retrying will not help" in message.html


def test_task_failure_of_a_reexecuted_plan_says_whose_plan_it_is():
    message = alerts.task_failed("backup", "r2", "commit", 1, "e", False, plan(run_id="r1"),
                                 LINK, None)
    assert "re-executes the plan of run r1" in message.html
    assert "transient" in message.html


def test_quoted_text_is_escaped():
    message = alerts.task_failed("backup", "r", "plan", 1, "<script>alert(1)</script>", None,
                                 None, LINK, None)
    assert "<script>" not in message.html and "&lt;script&gt;" in message.html


def test_data_lost_names_each_range_and_the_total():
    lost = [Anomaly("retention_gap", "billing.events", 2, 5, 105, "failed"),
            Anomaly("retention_gap", "billing.events", 0, 40, 41, "failed")]
    message = alerts.data_lost("backup", "r7", lost, True, LINK)
    assert message.subject == ("[kafka-archive] backup: 101 messages lost to retention in "
                               "billing.events")
    assert "<td>billing.events</td><td>0</td><td>[40, 41)</td><td>1</td>" in message.html
    assert "<td>billing.events</td><td>2</td><td>[5, 105)</td><td>100</td>" in message.html
    assert message.html.index("[40, 41)") < message.html.index("[5, 105)")  # by partition
    assert "left out of the archive, run after run, until the loss is accepted" in message.html
    assert ("<pre>kafka-archive accept-loss --group backup --topic billing.events --partition 2 "
            "--reason &quot;...&quot;</pre>") in message.html
    skipped = alerts.data_lost("backup", "r7", lost[:1] + [
        Anomaly("retention_gap", "orders", 1, 0, 3, "skipped")], False, LINK)
    assert "in 2 topics" in skipped.subject
    assert "went on from the earliest retained offset" in skipped.html


def test_topics_held_names_each_problem_and_its_remedy():
    found = [Anomaly("token_ahead", "orders", 1, 80, 50, "failed"),
             Anomaly("malformed_token", "clicks", -1, 3, 3, "failed",
                     "malformed token /t/backup/clicks.token, line 3: bad offset")]
    message = alerts.topics_held("backup", "r7", found, LINK)
    assert message.subject == ("[kafka-archive] backup: 2 topics left out of the archive "
                               "(malformed token, token ahead)")
    assert "clicks: malformed token /t/backup/clicks.token, line 3: bad offset" in message.html
    assert "orders partition 1: token says 80 but Kafka&#x27;s latest offset is 50" in message.html
    assert "fix or delete the token backup/orders" in message.html
    assert "re-created, set a new `generation` in the config first" in message.html
    assert "until a person acts." in message.html
    offline = alerts.topics_held("backup", "r7", found + [
        Anomaly("unavailable", "views", -1, 0, 0, "failed", "Kafka gives no offsets")], LINK)
    assert "until Kafka serves it again" in offline.html
    assert "the next run archives the topic once Kafka serves its every partition" in offline.html


def test_each_anomaly_is_mailed_once_until_it_is_gone():
    gap = Anomaly("retention_gap", "a", 0, 5, 20, "failed")
    ahead = Anomaly("token_ahead", "b", 0, 9, 3, "failed")
    new, mailed = alerts.unmailed([gap], {}, "r1")
    assert new == [gap] and mailed == {gap.key(): "r1"}
    new, mailed = alerts.unmailed([gap, ahead], mailed, "r2")  # the gap again, seen by a retry
    assert new == [ahead] and mailed == {gap.key(): "r1", ahead.key(): "r2"}
    new, mailed = alerts.unmailed([ahead], mailed, "r3")  # the gap was accepted: forgotten
    assert new == [] and mailed == {ahead.key(): "r2"}
    assert alerts.unmailed([gap], mailed, "r4")[0] == [gap]  # a new gap at that spot: mailed


def test_deadline_missed_names_run_deadline_and_what_is_in_flight():
    message = alerts.deadline_missed("backup", "scheduled__2026", 1800, "2026-01-01T00:00:00Z",
                                     "2026-01-01T00:30:00Z", "running", plan(),
                                     "The plan in flight is run manual__2026's", LINK)
    assert message.subject == ("[kafka-archive] backup: run scheduled__2026 not finished within "
                               "30m 0s (1800 s) of being queued")
    for expected in ("2026-01-01T00:00:00Z", "2026-01-01T00:30:00Z", "running",
                     "<td>orders</td><td>0</td><td>[10, 30)</td>", "26 offsets", LINK):
        assert expected in message.html, expected


def test_freshness_mail_lists_each_lagging_topic_with_its_figures():
    lagging = past_sla([fresh("orders", 0, 5, 20, -60, -960), fresh("orders", 2, 0, 4, -5,
                                                                     oldest_pending_s=-1200),
                        fresh("clicks", 1, 100, 250, 0, -7300)],
                       lambda t: 600, NOW_MS)
    message = alerts.freshness_past_sla("backup", "r9", lagging, NOW_MS, LINK)
    assert message.subject == ("[kafka-archive] backup: archive freshness past SLA for "
                               "clicks, orders")
    html = message.html
    assert "clicks: lag 2h 1m (7300 s), SLA 10m 0s (600 s), 150 messages waiting" in html
    assert "orders: lag 20m 0s (1200 s), SLA 10m 0s (600 s), 19 messages waiting" in html
    assert ("<td>0</td><td>5</td><td>20</td><td>15</td><td>2027-01-15T07:59:00+00:00</td>"
            "<td>2027-01-15T07:44:00+00:00</td><td>15m 0s (900 s)</td>") in html
    assert "<td>2</td><td>0</td><td>4</td><td>4</td>" in html and "<td>-</td>" in html
    assert html.index("<td>2</td><td>0</td><td>4</td>") < html.index("<td>0</td><td>5</td>")
    assert LINK in html


def test_span_is_readable_and_exact():
    assert alerts._span(45) == "45s"
    assert alerts._span(900) == "15m 0s (900 s)"
    assert alerts._span(7260) == "2h 1m (7260 s)"
    assert alerts._span(None) == "unknown"


def test_long_tables_are_cut_and_counted():
    many = plan(slices=[Slice("t", p, 0, 1, 1) for p in range(alerts.MAX_ROWS + 7)])
    message = alerts.task_failed("backup", "r", "archive", 1, "e", None, many, LINK, None)
    assert "... and 7 more" in message.html
    assert message.html.count("<td>t</td>") == alerts.MAX_ROWS


def test_deadline_missed_by_a_run_still_queued_says_it_waits():
    message = alerts.deadline_missed("backup", "r2", 60, "t0", "t1", "queued", None,
                                     "No plan is in flight", LINK)
    assert "It has not started" in message.html and "No plan is in flight" in message.html
    running = alerts.deadline_missed("backup", "r2", 60, "t0", "t1", "running", None, "", LINK)
    assert "It has not started" not in running.html


def test_audit_mismatch_says_what_where_what_to_do_and_links_that_open():
    new = [Alarm("<t>", "s", 1_700_000_040_000, 60_000, "MISSING", 11, 5, "now", "r"),
           Alarm("<t>", "s", 1_700_000_100_000, 60_000, "MISSING", 6, 4, "now", "r"),
           Alarm("u", "s", 1_700_000_040_000, 60_000, "EXCESS", 5, 8, "now", "r")]
    located = {new[0].key: [{"partition": 0, "start": 8, "end": 20, "messages": 5,
                             "url": "s3://b/backup/<t>/partition=0/1_0_00000000000000000008.seq"}]}
    message = alerts.audit_mismatch("backup", new, located,
                                    "http://af/dags/kafka_archive_audit/runs/r",
                                    "http://127.0.0.1:9000/b/report.html?X-Amz-Signature=abc",
                                    604800, 1, 2)
    assert message.subject == ("[kafka-archive] audit of group backup: 2 window(s) MISSING, "
                               "1 EXCESS in 2 topics")
    html = message.html
    assert "8 message(s) missing</b> in 2 window(s)" in html and "3 in excess</b>" in html
    assert "MISSING 6: topic &lt;t&gt;, source s" in html
    assert "<td>0 [8, 20): 5</td>" in html and "none archived" in html
    assert ("kafka-archive audit ack --group backup --topic &lt;t&gt; --source s --window "
            "2023-11-14T22:14:00+00:00 --reason &quot;...&quot;") in html
    assert "kafka-archive cat s3://b/backup/&lt;t&gt;/partition=0/" in html
    assert "kafka-archive audit --group backup --rescan" in html
    assert 'href="http://af/dags/kafka_archive_audit/runs/r"' in html
    assert 'href="http://127.0.0.1:9000/b/report.html?X-Amz-Signature=abc"' in html
    assert "valid 168h 0m (604800 s), until " in html
    assert "1 mismatch(es) mailed before and still open, 2 acknowledged" in html
    local = alerts.audit_mismatch("backup", new[:1], {}, "http://af/x", "file:///a/report.html",
                                  604800, 0, 0)
    assert 'href="file:///a/report.html"' in local.html and "presigned" not in local.html


def test_the_same_failure_in_consecutive_runs_is_one_key_and_mailed_daily():
    first = alerts.failure_key("commit", "ManifestMismatchError",
                               "run old-run cannot commit: f is None bytes", ["manual__1"])
    again = alerts.failure_key("commit", "ManifestMismatchError",
                               "run old-run cannot commit: f is None bytes", ["manual__2"])
    assert first == again  # the plan re-executed is old-run's in both runs
    other = alerts.failure_key("plan", "ConfigError", "manual__2: bad key x", ["manual__2"])
    assert other != first and "<run>" in other  # the failing run's own id is taken out
    mailed = {first: {"run_id": "manual__1", "first_run": "manual__1", "mailed_at_s": 1000.0}}
    assert alerts.failure_due({}, first, 1000.0)
    assert not alerts.failure_due(mailed, first, 1000.0 + alerts.REMIND_AFTER_S - 1)
    assert alerts.failure_due(mailed, first, 1000.0 + alerts.REMIND_AFTER_S)
    assert alerts.failure_due(mailed, other, 1001.0)
    # the soak's seed 2428: a stale job's error names the plan in flight, which a later
    # run replaced; the same incident, mailed once
    stale = [alerts.failure_key("job", "PlanNotInFlight", f"run manual__x_1 is not the plan in "
                                f"flight (run {flight} is): its job writes nothing",
                                ["manual__x_1"])
             for flight in ("scheduled__2026-01-01T00:05:00+00:00",
                            "scheduled__2026-01-01T00_25_00_00_00")]
    assert stale[0] == stale[1] and "<run> is)" in stale[0]


def test_a_failure_mail_says_what_to_do_and_whether_it_is_a_reminder():
    message = alerts.task_failed("backup", "r9", "commit", 1, "ManifestMismatchError: x", True,
                                 None, LINK, None, "ManifestMismatchError", since="r1")
    assert message.subject.endswith("failed in run r9 (failing since r1)")
    assert "delete the run&#x27;s manifest.json" in message.html
    assert "daily reminder" in message.html
    fresh = alerts.task_failed("backup", "r1", "plan", 1, "TransientError: x", False, None,
                               LINK, None, "TransientError")
    assert "the next run tries again" in fresh.html and "not mailed again" in fresh.html


def test_a_failure_is_one_key_whichever_runs_and_plans_meet_it():
    """Issue 41: each run's own plan failing the same way was a new key (the plan's run id
    and its folder name stayed in the text), so a persistent failure was mailed each run."""
    def key(run_id):
        folder = run_id.replace(":", "_").replace("+", "_")
        return alerts.failure_key(
            "commit", "ManifestMismatchError", f"run {run_id} cannot commit: no s3://b/a/_runs/"
            f"backup/{folder}/manifest.json; the archive job did not finish", [run_id, run_id])
    assert key("scheduled__2026-01-01T00:15:00+00:00") == key("scheduled__2026-01-01T00:30:00+00:00")
    assert "<run>/manifest.json" in key("manual__x:1")
