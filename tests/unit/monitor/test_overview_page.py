from kafka_archive.audit.checkpoint import Alarm
from kafka_archive.commit.losses import AcceptedLoss
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
    assert "data-lag='7'>7</td><td>1m05s</td>" in html and "data-lag='0'>0</td>" in html
    assert "<td class='mbps'>0.1</td>" in html and "30 s" in html
    assert "PAST SLA" in html and "2h00m" in html
    assert "<td class='l bad'>open</td><td class='l'>MISSING 2</td>" in html
    assert "acknowledged" in html and "ana now replayed" in html
    assert "<td>[0, 4)</td><td>4</td><td class='l'>ana</td>" in html and "retention too short" in html
    assert "http" not in html.replace("http://www.w3.org/2000/svg", "")  # nothing fetched


def test_empty_states_are_said():
    html = page.render(overview(partitions=[], freshness=[], runs=[], alarms=[], accepted_losses=[]),
                       "/dags/x")
    assert "no topic selected yet" in html and "no committed run yet" in html
    assert "no unresolved mismatch" in html and "Accepted losses" not in html
    assert "not audited" in page.render(overview(audited=False, alarms=[]), "/dags/x")
