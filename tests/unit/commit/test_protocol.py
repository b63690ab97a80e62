from datetime import datetime, timezone

import pytest

from kafka_archive import catalog, config, layout, manifest
from kafka_archive.commit.protocol import ManifestMismatchError, commit, verify
from kafka_archive.plan import inflight
from kafka_archive.plan.planning import Plan, Slice
from kafka_archive.storage import Storage
from kafka_archive.tokens import LocalTokenStore, Token, TokenConflictError


def make_plan(*slices):
    return Plan(group="backup", run_id="r1", created_at="", bootstrap="b", generation=1,
                format={}, slices=tuple(slices), token_versions={}, base_offsets={})


def entry(start, end, records, gaps=(), cut=False, size=100, url="s3://b/f"):
    return {"topic": "t", "partition": 0, "start": start, "end": end, "records": records,
            "gaps": [list(g) for g in gaps], "cut": cut, "url": url, "bytes": size}


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


# --- commit against tokens changed under the run ------------------------------------------

@pytest.fixture
def run(tmp_path):
    """A config on local files, tokens of topics t and u read at r0, and run r1's plan
    (t/0 [5, 8), u/0 [0, 3)) with its manifest and files, in flight."""
    path = tmp_path / "x.yaml"
    path.write_text(f"kafka: {{bootstrap_servers: 'b'}}\narchive_root: file://{tmp_path}/a\n"
                    f"token_root: {tmp_path}/t\n")
    cfg, storage, tokens = config.load(path), Storage(), LocalTokenStore(tmp_path / "t")
    versions = {"t": tokens.write(Token("backup", "t", "b", {0: 5}, run_id="r0"), None),
                "u": None}
    plan = Plan(group="backup", run_id="r1", created_at="2026-01-01T00:00:00+00:00",
                bootstrap="b", generation=1, format={}, token_versions=versions,
                slices=(Slice("t", 0, 5, 8, 1000), Slice("u", 0, 0, 3, 1000)),
                base_offsets={"t": {"0": 5}, "u": {}}, token_runs={"t": "r0", "u": None})
    rows = []
    for s in plan.slices:
        url = layout.data_file(cfg.archive_root, "backup", s.topic, s.partition, 1, s.start,
                               "sequencefile")
        storage.put_bytes(url, b"x" * 10)
        rows.append({**entry(s.start, s.end, 3, url=url, size=10), "topic": s.topic})
    plan_url = layout.run_file(cfg.archive_root, "backup", "r1", "plan.json")
    storage.put_bytes(plan_url, plan.to_json())
    inflight.mark(storage, cfg.archive_root, "backup", "r1", plan_url)
    manifest.write(storage, cfg.archive_root, {"run_id": "r1", "group": "backup", "slices": rows,
                                               "vanished": [], "retention_lost": []})
    return cfg, storage, tokens, plan


def commit_now(run, tokens=None):
    cfg, storage, own_tokens, plan = run
    return commit(cfg, plan, storage, tokens or own_tokens, datetime.now(timezone.utc))


def test_a_token_deleted_under_the_run_is_left_deleted_and_its_rows_kept(run):
    cfg, storage, tokens, _ = run
    tokens.delete("backup", "t")
    summary = commit_now(run)
    assert list(summary["tokens_left_as_found"]) == ["t"]
    assert "deleted while run r1 was in flight" in summary["tokens_left_as_found"]["t"]
    assert tokens.read("backup", "t").token is None
    assert tokens.read("backup", "u").token.offsets == {0: 3}
    held = catalog.open_catalog(storage, cfg, "backup").state.topics
    assert {name: t.summaries["0:1"].covered for name, t in held.items()} == {
        "t": [[5, 8]], "u": [[0, 3]]}  # nothing archived is dropped
    assert inflight.holding(storage, cfg.archive_root, "backup") is None


def test_a_token_edited_by_hand_is_left_as_found(run):
    cfg, storage, tokens, _ = run
    read = tokens.read("backup", "t")
    tokens.write(Token("backup", "t", "b", {0: 2}, run_id="r0"), read.version)  # a rewind
    assert list(commit_now(run)["tokens_left_as_found"]) == ["t"]
    assert tokens.read("backup", "t").token.offsets == {0: 2}


def test_a_token_another_run_advanced_is_a_lost_race(run):
    _, _, tokens, _ = run
    read = tokens.read("backup", "t")
    tokens.write(Token("backup", "t", "b", {0: 8}, run_id="r2"), read.version)
    with pytest.raises(TokenConflictError, match="changed under this run"):
        commit_now(run)


def test_a_commit_cut_short_after_a_token_finishes_on_the_next_try(run):
    cfg, storage, tokens, _ = run

    class DiesAfterFirstToken:
        def __init__(self):
            self.written = 0

        def __getattr__(self, name):
            return getattr(tokens, name)

        def write(self, token, expected_version):
            self.written += 1
            if self.written == 2:
                raise SystemExit("killed")
            return tokens.write(token, expected_version)

    with pytest.raises(SystemExit):  # killed creating u's token (the plan saw none)
        commit_now(run, DiesAfterFirstToken())
    summary = commit_now(run)
    # u may have been created and deleted by a person since: it stays absent (issue 41)
    assert list(summary["tokens_left_as_found"]) == ["u"]
    assert "earlier attempt of its commit was creating it" in summary["tokens_left_as_found"]["u"]
    assert tokens.read("backup", "t").token.offsets == {0: 8}
    assert tokens.read("backup", "u").token is None
    assert catalog.open_catalog(storage, cfg, "backup").state.has_run("r1")


def test_a_commit_run_again_after_many_later_entries_adds_nothing(run):
    """The catalog keeps only the last runs in its state; a commit re-run after more than
    that many backfills must still find its rows there (issue 31 §2.8)."""
    cfg, storage, tokens, _ = run
    commit_now(run)
    for n in range(25):
        catalog.append(storage, cfg, "backup", lambda cat, n=n: {
            "kind": "backfill", "run_id": f"b{n}", "at": "x", "run": {"run_id": f"b{n}"}})
    cat = catalog.open_catalog(storage, cfg, "backup")
    assert not cat.state.has_run("r1")
    commit_now(run)
    assert catalog.open_catalog(storage, cfg, "backup").state.seq == cat.state.seq
