from dataclasses import replace

from kafka_archive.audit.checkpoint import Alarm
from kafka_archive.plan.inflight import InFlight
from kafka_archive.plan.losses import AcceptedLoss
from kafka_archive.monitor import page
from kafka_archive import catalog
from kafka_archive.monitor import overview as overview_module
from kafka_archive.monitor.overview import GroupOverview, TopicFreshness
from kafka_archive.monitor.status import PartitionStatus

PLAN = {"run_id": "r1", "created_at": "2026-01-01T00:00:00+00:00"}
MANIFEST = {"slices": [{"records": 10, "bytes": 3_000_000, "files": [{"url": "a"}]},
                       {"records": 0, "bytes": 0, "files": []}]}
COMMITTED = {"run_id": "r1", "committed_at": "2026-01-01T00:00:30+00:00"}


def run_summary(plan, manifest, committed):
    """A run as the catalog keeps it, as the page takes it."""
    return overview_module.run_summary(catalog.run_summary(plan, manifest, committed))


def test_a_run_summary_counts_its_manifest_and_times_plan_to_commit():
    run = run_summary(PLAN, MANIFEST, COMMITTED)
    assert (run.records, run.bytes, run.files, run.seconds) == (10, 3_000_000, 1, 30.0)
    assert run.mb_per_s == 0.1
    assert run_summary({}, MANIFEST, COMMITTED).mb_per_s is None  # no plan time: unknown


def overview(**changes) -> GroupOverview:
    parts = [PartitionStatus("backup", "t<x>", 0, 5, 0, 12, 7, 65_000, "2026-01-01T00:00:30+00:00",
                             "r1", 5, 1),
             PartitionStatus("backup", "t<x>", 1, 9, 0, 9, 0, 0, None, None, 9, 2)]
    alarms = [Alarm("t<x>", "app", 1_767_225_600_000, 60_000, "MISSING", 5, 3, "then", "a1", "m"),
              Alarm("t<x>", "app", 1_767_225_660_000, 60_000, "EXCESS", 5, 6, "then", "a1", "m",
                    {"by": "ana", "at": "now", "reason": "replayed"})]
    fields = dict(group="backup", at_ms=1_767_225_700_000, partitions=parts,
                  freshness=[TopicFreshness("t<x>", 7200.5, 3600)],
                  runs=[run_summary(PLAN, MANIFEST, COMMITTED)], audited=True, alarms=alarms,
                  accepted_losses=[AcceptedLoss("backup", "t<x>", 0, 0, 4, "ana", "then",
                                                "retention too short")])
    return GroupOverview(**(fields | changes))


def test_the_page_shows_lag_chart_runs_freshness_audit_and_loss():
    html = page.render(overview(), "/dags/kafka_archive_backup")
    assert "<svg id='lag-chart'" in html and "t&lt;x&gt; [0]" in html  # escaped everywhere
    assert "data-partition='0'><td class='l'>t&lt;x&gt;</td>" in html
    # each partition opens onto its files (the topic's name quoted in the link)
    assert "<a class='files' href='kafka_archive_backup/files/t%3Cx%3E/0'>0</a>" in html
    # 65 s of lag inside a 1 h SLA: green, not alarm-red
    assert "data-lag='7'>7</td><td class='ok'>1m05s</td>" in html and "data-lag='0'>0</td>" in html
    assert "<td class='mbps' data-mbps='0.1'>100 kB/s</td>" in html and "30 s" in html
    assert "PAST SLA" in html and "2h00m" in html and "http-equiv='refresh'" in html
    assert "<td class='l bad'>open</td><td class='l'>MISSING 2</td>" in html
    assert "acknowledged" in html and "ana now replayed" in html
    assert "<td>[0, 4)</td><td>4</td><td class='l'>ana</td>" in html and "retention too short" in html
    assert "http" not in html.replace("http://www.w3.org/2000/svg", "").replace(
        "http-equiv", "")  # nothing fetched


def test_empty_states_are_said():
    html = page.render(overview(partitions=[], freshness=[], runs=[], alarms=[], accepted_losses=[]),
                       "/dags/x")
    assert "no topic selected yet" in html and "no committed run yet" in html
    assert "no unresolved mismatch" in html and "Accepted losses" not in html
    assert "not audited" in page.render(overview(audited=False, alarms=[]), "/dags/x")


def test_what_needs_a_person_comes_first_and_green_stays_green():
    html = page.render(overview(), "/dags/x")
    attention = html[html.index("<div id='attention'>"):html.index("Lag per topic")]
    assert "Needs a person (2)" in attention
    assert "audit: MISSING 2 in t&lt;x&gt; from app" in attention  # open; the acked one is not
    assert "t&lt;x&gt; is past its SLA: lag 2h00m &gt; 1h00m" in attention
    calm = page.render(overview(alarms=[], freshness=[TopicFreshness("t<x>", 10.0, 3600)]), "/x")
    assert "nothing needs a person" in calm


def test_a_hole_and_a_run_not_committed_are_flagged():
    part = PartitionStatus("backup", "t", 0, 195, 0, 195, 0, 0, None, "r1", 190, 2,
                           holes=((190, 195),))
    planned = InFlight("r2", "2026-01-01T00:00:00+00:00", ("t", "u"))
    html = page.render(overview(partitions=[part], alarms=[], freshness=[], in_flight=planned,
                                at_ms=1_767_225_600_000 + 30 * 60_000), "/x")
    assert "hole in t partition 0: offsets [190, 195) are in no file" in html
    assert "run r2</a> was planned 30m00s ago and has not committed (t, u); Airflow does " \
           "not know its state here" in html  # not asked (the CLI), or no such run
    assert "<tr data-run='r2' class='bad'>" in html


def in_flight_page(state, minutes, deadline_s=1800, failed_task=None):
    planned = InFlight("manual__1:2", "2026-01-01T00:00:00+00:00", ("t",))
    html = page.render(overview(alarms=[], freshness=[], in_flight=planned,
                                in_flight_state=state, deadline_s=deadline_s,
                                in_flight_failed_task=failed_task,
                                at_ms=1_767_225_600_000 + minutes * 60_000),
                       "/dags/kafka_archive_backup")
    return html[html.index("<div id='attention'"):html.index("Lag per topic")], html


def test_a_run_airflow_runs_within_its_deadline_needs_no_person():
    attention, html = in_flight_page("running", 3)
    assert "nothing needs a person" in attention
    assert ("<p id='in-flight' class='muted'><a class='run' href='/dags/kafka_archive_backup"
            "/runs/manual__1%3A2' target='_top'>run manual__1:2</a> is running in Airflow, "
            "planned 3m00s ago (t)</p>") in attention
    assert "<tr data-run='manual__1:2' class='running'>" in html
    assert "nothing needs a person" in in_flight_page("queued", 1)[0]


def test_a_failed_or_late_run_needs_a_person_with_a_link_to_it():
    attention, html = in_flight_page("failed", 3)
    assert "Needs a person (1)" in attention
    assert "href='/dags/kafka_archive_backup/runs/manual__1%3A2'" in attention
    assert "failed in Airflow, planned 3m00s ago, before its commit (t)" in attention
    assert "<tr data-run='manual__1:2' class='bad'>" in html
    late = in_flight_page("running", 31)[0]
    assert "Needs a person (1)" in late
    assert "is still running in Airflow, planned 31m00s ago: past the group's deadline " \
           "of 30m00s" in late
    assert "marked success in Airflow but never committed" in in_flight_page("success", 3)[0]
    logged = in_flight_page("failed", 3, failed_task=("archive", 2))[0]
    assert ("<a class='log' href='/dags/kafka_archive_backup/runs/manual__1%3A2/tasks/archive"
            "?try_number=2' target='_top'>the log of its failed task archive</a> says why"
            ) in logged


def test_a_committed_run_links_to_its_airflow_run():
    html = page.render(overview(), "/dags/kafka_archive_backup")
    assert ("<tr data-run='r1'><td class='l'><a href='/dags/kafka_archive_backup/runs/r1' "
            "target='_top'>r1</a></td>") in html


def test_many_partitions_show_one_row_per_topic_worst_first_and_partitions_in_a_drill_down():
    parts = [PartitionStatus("backup", f"topic-{t:03d}", p, 10, 0, 10 + t, t, t * 1000, None,
                             None, 10, 1) for t in range(100) for p in range(20)]
    html = page.render(overview(partitions=parts, freshness=[], alarms=[]), "/x")
    topics = html[html.index("<table id='topic-table'>"):]
    topics = topics[:topics.index("</table>")]
    assert topics.count("<tr data-topic=") == 100
    assert topics.index("topic-099") < topics.index("topic-098") < topics.index("topic-000")
    assert "data-lag='1980'>1980</td>" in topics  # 20 partitions x 99
    assert "<details><summary>every partition (2000)</summary>" in html
    assert "aria-label='lag in messages per topic'" in html


def test_the_all_groups_page_shows_each_groups_state():
    from kafka_archive.monitor.overview import Glance

    run = InFlight("manual__1", "2026-01-01T00:00:00+00:00", ("t",))
    html = page.index([Glance("backup", 3, 12, 40, "2026-01-01T00:00:30+00:00", None, 0),
                       Glance("partitioned", 1, 3, 9, None, run, None)],
                      {"backup": "kafka_archive_backup", "partitioned": "kafka_archive_partitioned"})
    assert ("<tr data-group='backup'><td class='l'><a href='dag/kafka_archive_backup'>backup</a>"
            "</td><td class='l ok'>ok</td><td class='l'>2026-01-01T00:00:30+00:00</td>"
            "<td>3</td><td>12</td><td>40</td>") in html
    assert ("<td class='l bad'>run manual__1 not committed, its state in Airflow unknown</td>"
            "<td class='l'>never</td>") in html
    assert "not audited" in html


def test_the_all_groups_page_asks_airflow_about_the_run_in_flight():
    """A run Airflow runs within the group's deadline needs no one; past it, failed, or
    ended without its commit, it does; so does an unreachable Connect server."""
    from kafka_archive.monitor.overview import Glance

    run = InFlight("r1", "2026-01-01T00:00:00+00:00", ("t",))
    minute = 1767225600000 + 60_000  # a minute after it was planned
    base = Glance("g", 1, 1, 1, "2026-01-01T00:00:00+00:00", run, None, deadline_s=300,
                  at_ms=minute)
    states = {state: page.glance_state(replace(base, in_flight_state=state))
              for state in ("running", "queued", "failed", "success", None)}
    assert states["running"] == ("ok", "ok; run r1 running in Airflow")
    assert states["queued"] == ("ok", "ok; run r1 queued in Airflow")
    assert states["failed"] == ("bad", "run r1 failed in Airflow")
    assert states["success"] == ("bad", "run r1 ended in Airflow without its commit")
    assert states[None] == ("bad", "run r1 not committed, its state in Airflow unknown")
    late = replace(base, in_flight_state="running", at_ms=minute + 300_000)
    assert page.glance_state(late) == ("bad", "run r1 running past its deadline")
    never = replace(base, last_commit=None, in_flight_state="running")
    assert page.glance_state(never) == ("warn", "never archived; run r1 running in Airflow")
    down = replace(base, in_flight=None, connect_problem="127.0.0.1:15002 (connection c): "
                   "[Errno 111] Connection refused")
    assert page.glance_state(down) == ("bad", "Spark Connect server unreachable: 127.0.0.1:"
                                       "15002 (connection c): [Errno 111] Connection refused")


def test_a_group_that_never_archived_or_matches_no_topic_is_not_ok():
    from kafka_archive.monitor.overview import Glance

    never = Glance("new", 0, 0, 0, None, None, None, selected_topics=2, selected_partitions=9)
    empty = Glance("typo", 0, 0, 0, None, None, None, selected_topics=0, selected_partitions=0)
    html = page.index([never, empty], {"new": "d1", "typo": "d2"})
    assert ("<td class='l warn'>never archived</td><td class='l'>never</td>"
            "<td>0 of 2</td><td>0 of 9</td>") in html
    assert "<td class='l warn'>no topic matched</td>" in html
    down = page.index([Glance("new", 0, 0, 0, None, None, None)], {"new": "d1"},
                      kafka_problem="KafkaTimeoutError: no broker")
    assert "Kafka could not be asked (KafkaTimeoutError: no broker)" in down
    assert "<td class='l warn'>never archived</td>" in down


class Metadata:
    """Kafka's metadata as kafka-python's consumer answers it."""

    def __init__(self, topics: dict[str, int]):
        self.partitions = topics

    def topics(self):
        return set(self.partitions)

    def partitions_for_topic(self, topic):
        return set(range(self.partitions[topic]))


def test_the_glance_counts_what_each_group_selects_in_kafka(tmp_path):
    from tests.support.local_config import local_config

    cfg = local_config(tmp_path, """\
        orders: {topics: {include: ["orders-.*"], exclude: [".*-dlq"]}}
        typo: {topics: {include: ["ordres-.*"]}}
        """)
    seen = {g.group: g for g in overview_module.glance(
        cfg, overview_module.Storage(),
        Metadata({"orders-eu": 4, "orders-us": 5, "orders-dlq": 3, "other": 1}))}
    assert (seen["orders"].selected_topics, seen["orders"].selected_partitions) == (2, 9)
    assert (seen["typo"].selected_topics, seen["typo"].selected_partitions) == (0, 0)
    assert seen["orders"].last_commit is None and seen["orders"].topics == 0
    assert overview_module.glance(cfg, overview_module.Storage())[0].selected_topics is None

def test_the_audit_tab_lists_every_audited_groups_mismatches():
    alarms = overview().alarms
    html = page.audit_page({"backup": alarms, "partitioned": []}, ["backup", "partitioned"])
    assert "<h2>group backup</h2>" in html and "MISSING 2" in html
    assert "<h2>group partitioned</h2>\n<p class='ok' id='audit-ok'>no unresolved mismatch</p>" in html


def test_a_page_that_cannot_be_shown_says_what_failed_escaped():
    html = page.unavailable("TransientError: cannot list s3://b/<root>/: SlowDown")
    assert "cannot show this page: TransientError: cannot list s3://b/&lt;root&gt;/: SlowDown" in html


def test_a_group_whose_catalog_cannot_be_read_shows_why_and_hides_no_other(tmp_path):
    """A reader never rebuilds a catalog (issue 31 §4): the all-groups page names the
    damage in that group's row, and the other groups show as ever (b: never archived)."""
    from kafka_archive import layout
    from kafka_archive.storage import Storage
    from tests.support.local_config import local_config

    cfg = local_config(tmp_path, "a: {}\nb: {}\n")
    Storage().put_bytes(layout.run_file(cfg.archive_root, "a", "r1", "committed.json"), b"{}")
    glances = overview_module.glance(cfg, Storage())
    assert [(g.group, bool(g.problem)) for g in glances] == [("a", True), ("b", False)]
    html = page.index(glances, {"a": "kafka_archive_a", "b": "kafka_archive_b"})
    assert ("<td class='l bad'>catalog of group a: it has none, though runs were committed "
            "(archived before catalogs existed, or its folder was deleted)") in html
    assert "or `kafka-archive catalog --group a --rebuild` now</td>" in html
    assert "<a href='dag/kafka_archive_b'>b</a></td><td class='l warn'>never archived</td>" in html


def test_a_partitions_files_page_shows_each_file_and_the_command_that_prints_it(tmp_path):
    """On what a real run archived (the simulation's world: the real plan, job and
    commit on a local root): each current file's URL, and the command shown prints its
    records when a person runs it."""
    import shlex
    import subprocess
    import sys
    from pathlib import Path

    from kafka_archive.storage import Storage
    from tests.support.sim.world import World

    world = World(tmp_path / "world")
    world.step(("produce", "t", 0, 3, False))
    world.step(("run", "scheduled__2026-01-01T00:00:00+00:00", 0, 0, 0))
    world.close()
    found = overview_module.partition_files(world.config, "backup", Storage(), "t", 0)
    [file] = found.files
    assert (file.start, file.end, file.records, found.table) == (0, 3, 3, None)
    assert file.run == "scheduled__2026-01-01T00_00_00_00_00"  # its run's folder
    html = page.files_page(found, "kafka_archive_backup")
    assert f"<code class='url'>{file.url}</code>" in html
    assert "href='/kafka-archive/dag/kafka_archive_backup'" in html
    command = page.cat_command(file.url)
    assert f"<code class='cat'>{command}</code>" in html
    shown = subprocess.run([str(Path(sys.executable).parent / "kafka-archive"),
                            *shlex.split(command)[1:], "--format", "raw"],
                           capture_output=True, text=True, check=True).stdout
    assert shown.splitlines() == [f"t/0/{o}" for o in range(3)]


def test_a_table_groups_files_page_names_its_table_and_a_query():
    from kafka_archive.monitor.overview import ArchivedFile, PartitionFiles

    html = page.files_page(PartitionFiles("tables", "orders.v1", 2, [
        ArchivedFile("s3://b/x.parquet", 0, 5, 5, 900, "r1")], "local.sim.orders.v1"), "d")
    assert "<code id='table'>local.sim.orders.v1</code>" in html
    assert ("<code id='query'>SELECT * FROM local.sim.`orders.v1` WHERE kafka.partition = 2 "
            "ORDER BY kafka.offset LIMIT 100</code>") in html
    assert "kafka-archive cat --limit 100 s3://b/x.parquet" in html
