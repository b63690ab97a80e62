"""The plan in flight as the audit sees it (plan.inflight.held_topics)."""

import json

from kafka_archive import layout
from kafka_archive.plan import inflight
from kafka_archive.storage import Storage


def test_a_plan_given_up_by_hand_holds_its_topics_until_the_next_plan_takes_it_back(tmp_path):
    """Its mark deleted by a person, its commit may have moved tokens the catalog does not
    hold yet: the audit must not judge its topics until the next plan put them back (the
    note then says given_up) or it committed."""
    storage, root = Storage(), f"file://{tmp_path}"
    plan_url = layout.run_file(root, "g", "r1", "plan.json")
    storage.put_bytes(plan_url, json.dumps({"token_versions": {"t": None, "u": "v1"}}).encode())
    assert inflight.held_topics(storage, root, "g") == frozenset()  # nothing marked yet
    inflight.mark(storage, root, "g", "r1", plan_url)
    assert inflight.held_topics(storage, root, "g") == {"t", "u"}
    storage.delete(layout.inflight_marker(root, "g"))  # a person gives the plan up
    assert inflight.held_topics(storage, root, "g") == {"t", "u"}
    inflight.note_given_up(storage, root, "g", inflight.last(storage, root, "g"))
    assert inflight.held_topics(storage, root, "g") == frozenset()
    inflight.mark(storage, root, "g", "r1", plan_url)  # or: planned again, and committed
    storage.delete(layout.inflight_marker(root, "g"))
    storage.put_bytes(layout.run_file(root, "g", "r1", "committed.json"), b"{}")
    assert inflight.held_topics(storage, root, "g") == frozenset()
