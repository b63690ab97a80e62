from kafka_archive.archive.job import rows_for_empty_slices
from kafka_archive.commit.protocol import verify
from kafka_archive.plan.planning import Plan, Slice


def test_slice_without_any_record_still_gets_a_manifest_row_that_commits():
    # e.g. [41, 42) holds only a transaction commit marker: Spark returns no row for it
    marker_only, normal = Slice("t", 0, 41, 42, 1000), Slice("t", 1, 0, 2, 1000)
    written = [{"topic": "t", "partition": 1, "start": 0, "end": 2, "records": 2, "gaps": [],
                "cut": False, "url": "s3://b/f", "bytes": 10}]
    rows = written + rows_for_empty_slices([marker_only, normal], written)
    assert rows[1]["gaps"] == [[41, 42]] and rows[1]["url"] is None
    plan = Plan(group="backup", run_id="r", created_at="", bootstrap="b", generation=1,
                format={}, slices=(marker_only, normal), token_versions={}, base_offsets={})
    assert verify(plan, {"run_id": "r", "slices": rows}, lambda url: 10) == \
        {("t", 0): 42, ("t", 1): 2}
