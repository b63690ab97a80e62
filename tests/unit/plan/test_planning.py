from dataclasses import replace

import pytest

from kafka_archive.config import FormatSpec, Group, Policy
from kafka_archive.errors import TerminalError, TransientError
from kafka_archive.plan.planning import (Anomaly, Caps, HeldTopicsError, PartitionState, Slice, decide,
                                         held, Observed, observe, only_topics)

GROUP = Group(name="backup", schedule=None, include=(".*",), exclude=("_.*",),
              start_from="earliest", on_retention_gap="fail", format=FormatSpec(),
              policy=Policy(max_records=100, max_bytes=10_000, min_records=1, max_delay_s=60),
              topic_policies=())
NOW_MS = 1_800_000_000_000


def never_asked(topic, partition, offset):
    raise AssertionError("the oldest message is only read when below min_records")


def plan(states, tokens, group=GROUP, oldest=never_asked):
    return decide(group, states, tokens, NOW_MS, oldest)


def test_token_to_latest_capped_by_max_records():
    slices, anomalies, waiting = plan([PartitionState("t", 0, 0, 500)], {"t": {0: 350}})
    assert slices == [Slice("t", 0, 350, 450, 10_000)]
    assert anomalies == [] and waiting == {}


def test_partition_without_token_starts_from_earliest_or_latest():
    states = [PartitionState("t", 0, 40, 90)]
    assert plan(states, {})[0] == [Slice("t", 0, 40, 90, 10_000)]
    latest = replace(GROUP, start_from="latest")
    # nothing to read yet, but the starting point is remembered in the token
    assert plan(states, {}, latest)[0] == [Slice("t", 0, 90, 90, 10_000)]


def test_nothing_pending_means_no_slice():
    assert plan([PartitionState("t", 0, 0, 7), PartitionState("t", 1, 0, 0)],
                {"t": {0: 7}})[0] == []


def test_retention_gap_is_recorded_and_skipped_or_held_by_config():
    states = [PartitionState("t", 3, 120, 200)]
    slices, anomalies, _ = plan(states, {"t": {3: 100}})
    assert slices == []  # held: the topic is left out of the run
    assert [(a.lost_from, a.lost_to, a.action) for a in anomalies] == [(100, 120, "failed")]
    assert "t partition 3: offsets [100, 120) (20 messages)" in anomalies[0].describe()
    assert anomalies[0].remedy("backup") == (
        'kafka-archive accept-loss --group backup --topic t --partition 3 --reason "..."')
    skip = replace(GROUP, on_retention_gap="skip")
    slices, anomalies, _ = plan(states, {"t": {3: 100}}, skip)
    assert slices == [Slice("t", 3, 120, 200, 10_000)] and anomalies[0].action == "skipped"
    assert held(anomalies) == []


def test_a_topic_with_an_anomaly_is_held_whole_and_the_others_go_on():
    states = [PartitionState("a", 0, 120, 200), PartitionState("a", 1, 0, 50),
              PartitionState("b", 0, 0, 30)]
    slices, anomalies, _ = plan(states, {"a": {0: 100, 1: 10}, "b": {0: 10}})
    assert slices == [Slice("b", 0, 10, 30, 10_000)]  # not even a's healthy partition 1
    assert [a.topic for a in held(anomalies)] == ["a"]
    message = str(HeldTopicsError("backup", "run-1", held(anomalies)))
    assert message.startswith("run run-1 of group backup left out topic(s) a; the other topics "
                              "were archived.")
    assert "kafka-archive accept-loss --group backup --topic a --partition 0" in message


def test_token_beyond_latest_offset_holds_the_topic_naming_the_partition():
    slices, anomalies, _ = plan([PartitionState("t", 0, 0, 50), PartitionState("u", 0, 0, 5)],
                                {"t": {0: 80}})
    assert slices == [Slice("u", 0, 0, 5, 10_000)]
    assert [(a.kind, a.action) for a in anomalies] == [("token_ahead", "failed")]
    assert anomalies[0].describe().startswith("t partition 0: token says 80 but Kafka's latest "
                                              "offset is 50")


def test_an_archive_beyond_kafkas_latest_offset_holds_the_topic_whatever_its_token():
    """A topic re-created (or truncated) holds other messages at the archived offsets:
    archiving them again (a deleted token, a token moved back) would replace the archived
    ones. Where the archive ends at or below Kafka's latest, a rewind goes on."""
    states = [PartitionState("t", 0, 0, 4), PartitionState("t", 1, 0, 50),
              PartitionState("u", 0, 0, 5)]
    archived = {"t": {0: 10, 1: 50}, "u": {0: 5}}
    for tokens in ({}, {"t": {0: 0, 1: 50}}):  # deleted, moved back by hand
        slices, anomalies, _ = decide(GROUP, states, tokens, NOW_MS, never_asked,
                                      archived=archived)
        assert [(a.kind, a.topic, a.partition, a.lost_from, a.lost_to)
                for a in held(anomalies)] == [("archive_ahead", "t", 0, 10, 4)]
        assert {s.topic for s in slices} <= {"u"}  # t held whole: not even partition 1
        assert "the archive holds offsets up to 9 but Kafka's latest offset is 4" in \
            anomalies[0].describe()
        assert "set a new `generation`" in anomalies[0].remedy("backup")
    reused = Anomaly("offsets_reused", "t", 0, 7, 8, "failed")
    assert reused.describe().startswith("t partition 0: Kafka holds another message at "
                                        "offset 7 than the archive does")
    assert "set a new `generation`" in reused.remedy("backup")
    slices, anomalies, _ = decide(GROUP, states[2:], {}, NOW_MS, never_asked, archived=archived)
    assert anomalies == [] and slices == [Slice("u", 0, 0, 5, 10_000)]  # a rewind goes on


def test_min_records_waits_until_max_delay():
    few = replace(GROUP, policy=replace(GROUP.policy, min_records=10))
    state = [PartitionState("t", 0, 0, 3)]
    _, _, waiting = plan(state, {"t": {0: 0}}, few, oldest=lambda t, p, o: NOW_MS - 30_000)
    assert "3 pending < min_records 10" in waiting["t/0"]
    slices, _, waiting = plan(state, {"t": {0: 0}}, few, oldest=lambda t, p, o: NOW_MS - 61_000)
    assert slices == [Slice("t", 0, 0, 3, 10_000)] and waiting == {}


def test_pending_offsets_without_a_message_never_wait_for_min_records():
    """Found by the simulation's setting step (min_records 3, then 6 messages and a
    transaction's marker): the marker alone pending, with no message to date it, waited
    for good, and the partition showed a lag of one for ever."""
    few = replace(GROUP, policy=replace(GROUP.policy, min_records=3))
    slices, _, waiting = plan([PartitionState("t", 0, 0, 7)], {"t": {0: 6}}, few,
                              oldest=lambda t, p, o: None)
    assert slices == [Slice("t", 0, 6, 7, 10_000)] and waiting == {}


def test_a_skipped_retention_gap_up_to_the_logs_end_moves_the_token_past_it():
    """Found by the simulation's setting step (on_retention_gap: skip): retention deleted
    everything after the token, up to the log's end; nothing was pending from Kafka's
    earliest, so no slice moved the token, and every run found (and skipped) the gap."""
    skip = replace(GROUP, on_retention_gap="skip")
    slices, anomalies, _ = plan([PartitionState("t", 0, 8, 8)], {"t": {0: 4}}, skip)
    assert [(a.kind, a.lost_from, a.lost_to, a.action) for a in anomalies] == [
        ("retention_gap", 4, 8, "skipped")]
    assert slices == [Slice("t", 0, 8, 8, 10_000)]


def test_topic_policy_overrides_by_first_matching_regex():
    group = replace(GROUP, topic_policies=(("billing\\..*", replace(GROUP.policy, max_records=5)),))
    slices, _, _ = plan([PartitionState("billing.eu", 0, 0, 50), PartitionState("logs", 0, 0, 50)],
                        {}, group)
    assert [(s.topic, s.end) for s in slices] == [("billing.eu", 5), ("logs", 50)]


def test_caps_of_a_manual_run_replace_the_policy_limits():
    state = [PartitionState("t", 0, 0, 500)]
    assert decide(GROUP, state, {"t": {0: 0}}, NOW_MS, never_asked,
                  Caps(max_records=7, max_bytes=2048)) == ([Slice("t", 0, 0, 7, 2048)], [], {})
    # a cap above the policy's is allowed too; an unset cap keeps the policy's
    assert decide(GROUP, state, {"t": {0: 0}}, NOW_MS, never_asked,
                  Caps(max_records=300))[0] == [Slice("t", 0, 0, 300, 10_000)]


def test_topic_subset_keeps_only_those_topics_and_refuses_others():
    states = [PartitionState("a", 0, 0, 5), PartitionState("a", 1, 0, 5),
              PartitionState("b", 0, 0, 5)]
    observed = Observed(states, {"down": "no leader"})
    assert only_topics(observed, (), GROUP) == states
    assert only_topics(observed, ("a",), GROUP) == states[:2]
    assert only_topics(observed, ("a", "down"), GROUP) == states[:2]  # held by the plan, named
    with pytest.raises(TerminalError, match=r"group backup does not archive topic\(s\) nope"):
        only_topics(observed, ("a", "nope"), GROUP)


class OnePartitionWithoutLeader:
    """kafka-python's consumer behind brokers.LookupRetrying, as it answers when one
    partition has no leader: an offset look-up naming that partition fails, transient,
    once its retries are spent; or when Kafka is down: every look-up fails."""

    def __init__(self, offline=("b", 1), down=False):
        self.offline, self.down, self.asked = offline, down, []

    def topics(self):
        return {"a", "b", "c", "_internal"}

    def partitions_for_topic(self, topic):
        return {0, 1}

    def _offsets(self, tps, value):
        self.asked.append(sorted({tp.topic for tp in tps}))
        if self.down or any((tp.topic, tp.partition) == self.offline for tp in tps):
            raise TransientError("Kafka at b:9092: end_offsets: KafkaTimeoutError (simulated)")
        return {tp: value for tp in tps}

    def beginning_offsets(self, tps):
        return self._offsets(tps, 0)

    def end_offsets(self, tps):
        return self._offsets(tps, 4)


def test_a_partition_without_a_leader_makes_its_topic_unavailable_and_the_others_go_on():
    kafka = OnePartitionWithoutLeader()
    observed = observe(kafka, replace(GROUP, exclude=("_.*",)))
    assert sorted({s.topic for s in observed.states}) == ["a", "c"]
    assert list(observed.unavailable) == ["b"] and "KafkaTimeoutError" in observed.unavailable["b"]
    assert kafka.asked[0] == ["a", "b", "c"]  # one look-up for all while every topic answers
    assert observe(OnePartitionWithoutLeader(offline=None), GROUP).unavailable == {}
    # Kafka down: its own error, not every topic unavailable
    with pytest.raises(TransientError, match="KafkaTimeoutError"):
        observe(OnePartitionWithoutLeader(down=True), GROUP)
    anomaly = Anomaly("unavailable", "b", -1, 0, 0, "failed", "Kafka gives no offsets")
    assert "the next run archives the topic once Kafka serves" in anomaly.remedy("backup")
