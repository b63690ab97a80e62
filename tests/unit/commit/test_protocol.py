import pytest

from kafka_archive.commit.protocol import ManifestMismatchError, verify
from kafka_archive.plan.planning import Plan, Slice


def make_plan(*slices):
    return Plan(group="backup", run_id="r1", created_at="", bootstrap="b", generation=1,
                format={}, slices=tuple(slices), token_versions={}, base_offsets={})


def entry(start, end, records, gaps=(), cut=False, size=100):
    return {"topic": "t", "partition": 0, "start": start, "end": end, "records": records,
            "gaps": [list(g) for g in gaps], "cut": cut, "url": "s3://b/f", "bytes": size}


def check(plan, *entries, size=100):
    return verify(plan, {"run_id": "r1", "slices": list(entries)}, lambda url: size)


def test_complete_slice_and_kafka_gaps_verify():
    plan = make_plan(Slice("t", 0, 10, 20, 1000))
    assert check(plan, entry(10, 20, 10)) == {("t", 0): 20}
    assert check(plan, entry(10, 20, 8, gaps=[(12, 14)])) == {("t", 0): 20}
    assert check(plan, entry(10, 15, 5, cut=True)) == {("t", 0): 15}


@pytest.mark.parametrize("bad, reason", [
    (entry(10, 20, 9), "9 records"),                 # short, no gap recorded
    (entry(10, 15, 5), "without a max_bytes cut"),   # ends early, not cut
    (entry(11, 20, 9), "missing from the manifest"),  # wrong start
])
def test_incomplete_manifest_refuses_to_commit(bad, reason):
    with pytest.raises(ManifestMismatchError, match=reason):
        check(make_plan(Slice("t", 0, 10, 20, 1000)), bad)


def test_file_size_must_match_the_manifest():
    with pytest.raises(ManifestMismatchError, match="is 99 bytes, manifest says 100"):
        check(make_plan(Slice("t", 0, 0, 1, 1000)), entry(0, 1, 1), size=99)


def test_zero_length_slice_needs_no_file():
    assert check(make_plan(Slice("t", 0, 90, 90, 1000))) == {("t", 0): 90}


def test_partition_deleted_after_planning_commits_without_advancing():
    plan = make_plan(Slice("t", 0, 10, 20, 1000))
    assert verify(plan, {"run_id": "r1", "slices": [], "vanished": [["t", 0]]}, None) == {}


def test_slice_retention_deleted_after_planning_keeps_its_token_at_the_start():
    plan = make_plan(Slice("t", 0, 10, 20, 1000), Slice("u", 0, 0, 5, 1000))
    lost = {"kind": "retention_gap", "topic": "t", "partition": 0, "lost_from": 10,
            "lost_to": 14, "action": "failed", "detail": ""}
    manifest = {"run_id": "r1", "retention_lost": [lost],
                "slices": [{**entry(0, 5, 5), "topic": "u"}]}
    # the token line of t/0 is (re)written at the slice's start: a new partition gets one
    assert verify(plan, manifest, lambda url: 100) == {("t", 0): 10, ("u", 0): 5}
