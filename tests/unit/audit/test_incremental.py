"""The incremental audit on a local archive root: what it reads, how rewinds and backfills
change counts already folded in, and each mismatch's life (new, mailed, acknowledged, OK)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from kafka_archive import catalog, config, layout
from kafka_archive.audit import checkpoint, incremental
from kafka_archive.audit.checkpoint import Checkpoint
from kafka_archive.audit.reconcile import MonitoringEvent
from kafka_archive.errors import TerminalError, VersionConflict
from kafka_archive.storage import Storage
from tests.support.counting_storage import CountingStorage

MIN = 60_000
AT = "2026-01-01T00:00:00+00:00"


@pytest.fixture
def env(tmp_path):
    path = tmp_path / "kafka-archive.yaml"
    path.write_text(f"kafka: {{bootstrap_servers: 127.0.0.1:1}}\n"
                    f"archive_root: file://{tmp_path}/archive\n"
                    "audit: {window: 1m, grace: 0, retire_after: 30000d}\n")  # 1970 stays
    return Env(config.load(path))


class Env:
    def __init__(self, cfg):
        self.cfg, self.storage, self.offset = cfg, CountingStorage(), 0
        self.seq = 0

    def url(self, partition: int, first: int) -> str:
        return layout.data_file(self.cfg.archive_root, "backup", "t", partition, 1, first,
                                "sequencefile")

    def row(self, partition, start, end, window=0, n=None):
        return {"topic": "t", "partition": partition, "start": start, "end": end,
                "records": end - start, "url": self.url(partition, start), "bytes": 1,
                "audit": [["s", window, end - start if n is None else n]]}

    def run(self, run_id: str, at: str, rows, superseded=()):
        """A committed run as commit.protocol leaves it: its folder, its catalog entry
        (before committed.json)."""
        for name, doc in (("plan.json", {"run_id": run_id, "superseded": list(superseded)}),
                          ("manifest.json", {"slices": rows})):
            self.put(layout.run_file(self.cfg.archive_root, "backup", run_id, name), doc)
        folder = catalog.run_folder(self.cfg.archive_root, "backup", run_id)
        added = [catalog.catalog_row(r, folder, {}, layout.LayoutSpec(), self.cfg.archive_root,
                                     "backup") for r in rows]
        catalog.append(Storage(), self.cfg, "backup", lambda cat: {
            "kind": "commit", "run_id": run_id, "at": at, "add": added,
            "remove": [r for r in cat.rows() if r["url"] in superseded]})
        self.put(layout.run_file(self.cfg.archive_root, "backup", run_id, "committed.json"),
                 {"run_id": run_id, "committed_at": at})

    def events(self, *counts, window=0, producer="p1"):
        """One events file as ingest writes it: one event per count (0: a window's
        opening event)."""
        rows = []
        for n in counts:
            self.seq += 1
            rows.append([self.offset, *MonitoringEvent("s", "t", window, MIN, n, producer,
                                                       self.seq)])
            self.offset += 1
        self.put(layout.audit_events_file(self.cfg.archive_root, self.cfg.audit.topic, 0,
                                          rows[0][0]), {"events": rows, "bad": []})

    def put(self, url, doc):
        Storage.put_bytes(self.storage, url, json.dumps(doc).encode())

    def audit(self, run_id="a", through=100 * MIN, rescan=False):
        self.storage.reads = 0
        return incremental.audit(self.cfg, self.storage, "backup", run_id, AT, {"t": through},
                                 rescan)


def statuses(done):
    return {v.window_start_ms: (v.status, v.expected, v.archived) for v in done.every}


def test_sequence_ranges_count_each_event_once():
    ranges: list = []
    assert [checkpoint._claim(ranges, s) for s in (1, 3, 2, 2, 5, 4, 1)] == [
        True, True, True, False, True, True, False]
    assert ranges == [[1, 5]]


def test_an_audit_reads_only_what_was_committed_since_the_last(env):
    for i in range(20):
        env.run(f"r{i:02}", f"2026-01-01T00:{i:02}:00+00:00", [env.row(0, 10 * i, 10 * i + 10)])
    env.events(200)
    first = env.audit()
    assert statuses(first) == {0: ("OK", 200, 200)} and first.new_runs == 20
    assert env.storage.reads == 1 + 1 + 20  # checkpoint, events, a catalog entry per run

    env.run("r20", "2026-01-01T01:00:00+00:00", [env.row(0, 200, 205)])
    env.events(5)
    second = env.audit()
    assert statuses(second) == {0: ("OK", 205, 205)} and second.new_runs == 1
    assert env.storage.reads == 1 + 1 + 1
    assert second.judged and not second.recounted


def test_a_rewound_slice_rewritten_under_its_old_name_is_counted_once(env):
    env.run("r1", "2026-01-01T00:00:00+00:00", [env.row(0, 0, 10), env.row(0, 10, 20)])
    env.events(20)
    assert statuses(env.audit()) == {0: ("OK", 20, 20)}
    env.run("r2", "2026-01-01T01:00:00+00:00", [env.row(0, 10, 20)], superseded=[env.url(0, 10)])
    done = env.audit()  # the old row counted out, the new one in
    assert statuses(done) == {0: ("OK", 20, 20)} and not done.alarms
    assert not done.judged  # unchanged counts: the final verdict stands


def test_a_final_window_stays_judged_while_its_topic_is_rewound(env):
    env.run("r1", "2026-01-01T00:00:00+00:00", [env.row(0, 0, 10)])
    env.events(10)
    env.audit()
    assert statuses(env.audit(through=0)) == {0: ("OK", 10, 10)}  # not PENDING again


def test_a_mismatch_is_new_once_then_open_then_acknowledged_then_resolved(env):
    env.run("r1", "2026-01-01T00:00:00+00:00", [env.row(0, 1, 10)])
    env.events(10)
    [alarm] = env.audit().alarms
    assert (alarm.status, alarm.amount, alarm.state) == ("MISSING", 1, "new")
    assert env.audit().alarms[0].state == "new"  # not mailed yet: still new
    incremental.mark_mailed(env.storage, env.cfg, "backup", [alarm.key], AT)
    assert [a.state for a in env.audit().alarms] == ["open"]
    with pytest.raises(TerminalError, match="no mismatch of topic t, source s"):
        incremental.acknowledge(env.storage, env.cfg, "backup", "t", "s", 5 * MIN, "x", "ana", AT)
    acked = incremental.acknowledge(env.storage, env.cfg, "backup", "t", "s", 30_000,
                                    "offset 0 deleted by hand", "ana", AT)
    assert acked.ack == {"by": "ana", "at": AT, "reason": "offset 0 deleted by hand"}
    [listed] = incremental.alarms(env.storage, env.cfg, "backup")
    assert listed.state == "acknowledged" and env.audit().alarms[0].state == "acknowledged"
    # the missing message archived after all (a rewind): OK, and the alarm is gone
    env.run("r2", "2026-01-01T01:00:00+00:00", [env.row(0, 0, 10)], superseded=[env.url(0, 1)])
    done = env.audit()
    assert statuses(done) == {0: ("OK", 10, 10)} and not done.alarms
    assert [a.key for a in done.resolved] == [alarm.key]


def test_a_different_count_in_the_same_window_is_a_new_mismatch(env):
    env.run("r1", "2026-01-01T00:00:00+00:00", [env.row(0, 1, 10)])
    env.events(10)
    [alarm] = env.audit().alarms
    incremental.mark_mailed(env.storage, env.cfg, "backup", [alarm.key], AT)
    env.events(3)  # the producer reports three more it sent in that window
    [again] = env.audit().alarms
    assert (again.amount, again.state) == (4, "new")


def test_rescan_counts_again_and_keeps_acknowledgements(env):
    env.run("r1", "2026-01-01T00:00:00+00:00", [env.row(0, 0, 10, n=9)])
    env.events(10)
    [alarm] = env.audit().alarms
    incremental.acknowledge(env.storage, env.cfg, "backup", "t", "s", 0, "known", "ana", AT)
    done = env.audit(rescan=True)  # no archived files here: the rescan counts none
    assert statuses(done) == {0: ("MISSING", 10, 0)}
    assert [a.state for a in done.alarms] == ["new"]  # a different finding than acknowledged


def test_a_window_a_rescan_found_missing_stays_so_until_the_files_or_the_catalog_change(env):
    """The files are gone (none exist here) while the catalog still counts them: plain
    audits count by the catalog, and must neither resolve what the rescan found nor,
    alternating with rescans, make it a new incident each time."""
    env.run("r1", "2026-01-01T00:00:00+00:00", [env.row(0, 0, 10)])
    env.events(10)
    assert statuses(env.audit()) == {0: ("OK", 10, 10)}
    rescanned = env.audit(rescan=True)
    assert statuses(rescanned) == {0: ("MISSING", 10, 0)}
    [alarm] = rescanned.alarms
    after = env.audit()  # by the catalog's counts, unchanged since the rescan
    assert (after.resolved, [a.key for a in after.alarms]) == ([], [alarm.key])
    assert statuses(after)[0][0] == "MISSING"
    incremental.mark_mailed(env.storage, env.cfg, "backup", [alarm.key], AT)
    env.audit(rescan=True)
    assert [a.state for a in env.audit().alarms] == ["open"]  # mailed once, not again
    # issue 56, defect 8: one late message in the window (counted by its producer and
    # archived): the catalog's count changes, but the files still lack the 10 the rescan
    # found missing; a plain audit neither resolves the finding nor mails it again
    env.events(1)
    env.run("r3", "2026-01-01T02:00:00+00:00", [env.row(0, 10, 11)])
    done = env.audit()
    assert statuses(done) == {0: ("MISSING", 11, 1)} and done.resolved == []
    assert [(a.key, a.state) for a in done.alarms] == [(alarm.key, "open")]
    assert statuses(env.audit()) == {0: ("MISSING", 11, 1)}  # and stays so, unchanged


def test_a_rescan_that_cannot_judge_a_window_keeps_what_an_earlier_rescan_found(env):
    """The simulation's audit world (seed 202): a rescan found the files short, a second
    rescan ran while the topic was held by a plan in flight (every window PENDING), and
    the plain audit after judged the window by the catalog again: OK, resolved, though
    the files were still gone. A window judged before stays judged while it cannot be
    judged again."""
    env.run("r1", "2026-01-01T00:00:00+00:00", [env.row(0, 0, 10)])
    env.events(10)
    assert statuses(env.audit(rescan=True)) == {0: ("MISSING", 10, 0)}
    assert statuses(env.audit(rescan=True, through=None)) == {0: ("MISSING", 10, 0)}
    done = env.audit()
    assert statuses(done) == {0: ("MISSING", 10, 0)} and done.resolved == []


def test_a_late_count_of_a_window_a_rescan_found_short_keeps_the_finding(env):
    """The simulation's audit world (seed 189): the producer's count of the window grew
    (a late message, not archived yet) while the catalog's count stayed; the plain audit
    judged the window by the catalog again and dropped the rescan's finding, so once the
    late message was archived the window was OK, though the files still lacked one."""
    env.run("r1", "2026-01-01T00:00:00+00:00", [env.row(0, 0, 10)])
    env.events(10)
    assert statuses(env.audit(rescan=True)) == {0: ("MISSING", 10, 0)}
    env.events(1)  # counted by its producer, not archived yet
    assert statuses(env.audit()) == {0: ("MISSING", 11, 0)}
    env.run("r2", "2026-01-01T01:00:00+00:00", [env.row(0, 10, 11)])
    done = env.audit()  # archived now: the files hold it, not the 10 the rescan missed
    assert statuses(done) == {0: ("MISSING", 11, 1)} and done.resolved == []


def test_a_lost_race_reads_again_and_a_checkpoint_write_is_compare_and_swap(env):
    env.run("r1", "2026-01-01T00:00:00+00:00", [env.row(0, 0, 10)])
    env.events(10)
    env.audit()
    url = layout.audit_checkpoint(env.cfg.archive_root, "backup")
    data, version = env.storage.get_versioned(url)
    env.storage.put_if(url, data + b" ", version)
    with pytest.raises(VersionConflict):
        env.storage.put_if(url, data, version)  # version is stale now
    with pytest.raises(VersionConflict):
        env.storage.put_if(url, data, None)  # "create" when there is one
    calls = []

    def change(cp: Checkpoint):
        calls.append(cp.version)
        if len(calls) == 1:  # someone else writes between our read and our write
            Storage.put_bytes(env.storage, url, cp.to_json() + b"\n\n")
    incremental.update(env.storage, env.cfg, "backup", change)
    assert len(calls) == 2 and calls[0] != calls[1]


def test_a_producer_killed_mid_window_leaves_its_window_unaudited_not_excess(env):
    """Issue 56, defect 8: a producer opened window 0 and was killed before it published
    the window's count; its restart (another producer id, the same source) counted 4.
    Its 3 uncounted messages, one stamped by the broker in the next window, are no
    duplicates: UNAUDITED, no alarm. A producer that did publish its count keeps EXCESS."""
    env.run("r1", "2026-01-01T00:00:00+00:00",
            [env.row(0, 0, 6), env.row(1, 0, 1, window=MIN), env.row(2, 0, 3, window=2 * MIN)])
    env.events(0, producer="dead")
    env.events(0, 4, producer="restarted")
    env.events(0, 2, window=2 * MIN, producer="restarted")  # 3 archived: a real excess
    done = env.audit()
    assert statuses(done) == {0: ("UNAUDITED", 4, 6), MIN: ("UNAUDITED", 0, 1),
                              2 * MIN: ("EXCESS", 2, 3)}
    assert [a.window_start_ms for a in done.alarms] == [2 * MIN]
    # the first producer was alive after all: its count arrives late, and the window adds up
    env.events(2, producer="dead")
    assert statuses(env.audit())[0] == ("OK", 6, 6)


def test_checkpoint_round_trips(env):
    env.run("r1", "2026-01-01T00:00:00+00:00", [env.row(0, 1, 10)])
    env.events(10)
    env.audit()
    data, version = env.storage.get_versioned(layout.audit_checkpoint(env.cfg.archive_root, "backup"))
    cp = Checkpoint.from_json(data, version)
    assert cp.to_json() == data and cp.catalog_seq == 1 and cp.seen == {"p1": [[1, 1]]}
    env.events(0, producer="p2")  # an opening with no count yet
    env.audit()
    data, version = env.storage.get_versioned(layout.audit_checkpoint(env.cfg.archive_root, "backup"))
    cp = Checkpoint.from_json(data, version)
    assert cp.to_json() == data and cp.unclosed == {("t", "s", 0): ["p2"]}


def test_locate_names_the_partitions_and_offsets_of_a_window(env):
    env.run("r1", "2026-01-01T00:00:00+00:00", [env.row(0, 1, 10), env.row(1, 0, 5, window=MIN)])
    env.events(10)
    alarm, excess = env.audit().alarms  # window 0 MISSING 1; window MIN EXCESS 5
    assert (excess.status, excess.amount) == ("EXCESS", 5)
    assert incremental.locate(env.storage, env.cfg, "backup", [alarm]) == {alarm.key: [
        {"partition": 0, "start": 1, "end": 10, "messages": 9, "url": env.url(0, 1)}]}


def test_judged_windows_past_retire_after_leave_the_checkpoint_and_late_counts_are_ignored(env):
    env.cfg = replace(env.cfg, audit=replace(env.cfg.audit, retire_s=86_400))
    env.run("r1", "2026-01-01T00:00:00+00:00", [env.row(0, 0, 10), env.row(0, 10, 15, window=MIN)])
    env.events(10)
    env.events(4, window=MIN)  # one more archived than sent: EXCESS, an alarm, kept
    done = env.audit()
    assert statuses(done) == {0: ("OK", 10, 10), MIN: ("EXCESS", 4, 5)}
    data, version = env.storage.get_versioned(layout.audit_checkpoint(env.cfg.archive_root,
                                                                      "backup"))
    cp = Checkpoint.from_json(data, version)
    assert set(cp.windows) == {("t", "s", MIN)} and ("t", "s", 0) not in cp.expected
    assert cp.retired_before_ms == 1_767_225_600_000 - 86_400_000
    env.events(3)  # a late event for the retired window: not a new partial window
    assert statuses(env.audit()) == {MIN: ("EXCESS", 4, 5)}


def test_holes_next_to_a_windows_messages_are_named_as_verify_names_them(env):
    env.run("r1", "2026-01-01T00:00:00+00:00", [env.row(0, 0, 6), env.row(1, 0, 4)])
    env.run("r2", "2026-01-01T00:10:00+00:00", [env.row(0, 7, 10), env.row(1, 20, 24,
                                                                            window=5 * MIN)])
    env.events(14)  # one more than archived in window 0: MISSING 1
    [alarm] = [a for a in env.audit().alarms if a.window_start_ms == 0]
    located = incremental.locate(env.storage, env.cfg, "backup", [alarm])
    # each hole touches offsets holding window 0's messages: [0, 6) and [7, 10), [0, 4)
    assert incremental.holes(env.storage, env.cfg, "backup", [alarm], located) == {
        alarm.key: [(0, 6, 7), (1, 4, 20)]}


def test_entries_cleaned_up_since_the_checkpoint_are_recounted_not_skipped(env):
    """The catalog's cleanup deletes old log entries (issue 31 §4): an audit whose
    checkpoint is older than what is left recounts from the current rows instead of
    folding in only the entries still there."""
    env.run("r00", "2026-01-01T00:00:00+00:00", [env.row(0, 0, 10)])
    env.events(10)
    assert statuses(env.audit()) == {0: ("OK", 10, 10)}
    for i in range(1, 50):  # snapshots at 16, 32, 48: entries up to 32 are cleaned up
        env.run(f"r{i:02}", f"2026-01-01T00:{i:02}:00+00:00", [env.row(0, 10 * i, 10 * i + 10)])
    env.events(490)
    after = env.audit()
    assert after.recounted and statuses(after) == {0: ("OK", 500, 500)}


@pytest.mark.parametrize("send_fails", [False, True])
def test_an_audit_mail_is_recorded_before_it_is_sent(env, send_fails, monkeypatch):
    """Issue 56, defect 8: the mail of new mismatches is recorded as mailed before it is
    sent (a kill after sending cannot mail the same loss twice); a send that fails takes
    the record back, so the next audit mails it."""
    from kafka_archive.airflow import alerting, connections, tasks

    env.run("r1", "2026-01-01T00:00:00+00:00", [env.row(0, 0, 8)])
    env.events(10)
    done = env.audit()
    [alarm] = done.alarms
    seen_when_sent = []

    def send(alerts, message, context=None):
        seen_when_sent.append([a.state for a in env.audit().alarms])
        if send_fails:
            raise ConnectionRefusedError("smtp down")

    monkeypatch.setattr(connections, "load_config", lambda path=None: env.cfg)
    monkeypatch.setattr(connections, "storage", lambda conn_id=None: env.storage)
    monkeypatch.setattr(alerting, "send", send)
    outcome = {"group": "backup", "new": [vars(alarm)], "open": 1, "acknowledged": 0,
               "report": layout.audit_report(env.cfg.archive_root, "backup", "a", "report.html")}
    if send_fails:
        with pytest.raises(ConnectionRefusedError):
            tasks.audit_alert(outcome, "http://airflow/run")
    else:
        tasks.audit_alert(outcome, "http://airflow/run")
    assert seen_when_sent == [["open"]]  # recorded before the mail went out
    assert [a.state for a in env.audit().alarms] == (["new"] if send_fails else ["open"])
