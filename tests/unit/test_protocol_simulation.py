"""The protocol simulation (tests/support/sim, issue 41): random sequences of Airflow
runs, re-executed tasks, kills at every write, operators' actions and Kafka's retention,
on the real library, with the invariants checked after every step and liveness at the
end. A failure prints the sequence shrunk to its minimal form, to replay by seed."""

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor

from unittest.mock import patch

import pytest

from kafka_archive.archive import job
from kafka_archive.monitor import mailing
from kafka_archive.storage import Storage
from kafka_archive.tools import verify

from tests.support.sim import explore
from tests.support.sim.world import LAUNCH_FAILS, Violation, World

SEQUENCES = 2000  # issue 41: at least 2,000 in CI, in under 3 minutes (2 processes)
TABLE_SEQUENCES = 100  # of a table group's world: ~1 s each (pyiceberg's commits)
EVENT_SEQUENCES = 200  # of an event-time group's world (finalize, Asset events): ~0.1 s each
PARSED_SEQUENCES = 30  # of a parsed table group's world (dead-letter tables): ~0.8 s each
REGISTRY_SEQUENCES = 20  # of the same with Avro values through a registry: ~1.6 s each
AUDIT_SEQUENCES = 200  # of an audited group's world (producers, the audit DAG): ~0.17 s each
S3_SEQUENCES = 20  # of the files world on S3 (moto in process): ~3.5 s each, ~5 ms a call


def explored(sequences: int, shape: str = "files") -> list[str]:
    """Seeds 0..sequences-1 over two processes; the reports of those that failed."""
    workers = min(2, os.cpu_count() or 1)
    share = sequences // workers
    # spawned, not forked: the suite's process may hold threads by now
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        return [r for found in pool.map(explore.explore_many, range(0, sequences, share),
                                        [share] * workers, [shape] * workers) for r in found]


def test_no_sequence_breaks_an_invariant():
    reports = explored(SEQUENCES)
    assert not reports, "\n\n".join(reports[:3])


def test_no_sequence_breaks_an_invariant_of_a_table_group():
    """The same steps on Iceberg tables, with kills inside their commits and maintenance:
    also each table reads exactly the catalog's current files."""
    reports = explored(TABLE_SEQUENCES, "tables")
    assert not reports, "\n\n".join(reports[:3])


def test_no_sequence_breaks_an_invariant_of_an_event_time_group():
    """The same steps on files laid out by the events' time, with late events, each run's
    finalize (and Clears of it, killed at any write) feeding a downstream loader of the
    finalized hours' Asset events: every final hour announced, once as new, again only
    as replacing it, and what the loader holds is what the archive holds."""
    reports = explored(EVENT_SEQUENCES, "events")
    assert not reports, "\n\n".join(reports[:3])


def test_no_sequence_breaks_an_invariant_of_a_parsed_table_group():
    """The same steps on an event-time table group of typed columns, messages that are no
    JSON in each topic's dead-letter table, and new topics, some named like another's
    dead-letter table: each topic's two tables read exactly the catalog's current files,
    and a pair of colliding names holds one topic, never the group."""
    reports = explored(PARSED_SEQUENCES, "parsed")
    assert not reports, "\n\n".join(reports[:3])


def test_no_sequence_breaks_an_invariant_of_a_typed_table_group():
    """The parsed table group's steps with Avro values through a Schema Registry (three
    schema versions, one conflicting with another, an unknown schema id, values that are
    no Avro: sim.registry): also each row holds its own message's fields as its version
    wrote them, and each dead letter's reason is one its message's bytes explain."""
    reports = explored(REGISTRY_SEQUENCES, "registry")
    assert not reports, "\n\n".join(reports[:3])


def test_no_sequence_breaks_an_invariant_of_an_audited_group():
    """The same steps with audited producers (some killed before publishing their count),
    the audit DAG (killed at its writes and its mail; rescans) and archived files a
    person deletes: a finding mailed once, never a false EXCESS or MISSING, each verdict
    what producers counted against what the catalog holds, a rescan's finding cleared only
    by a rescan, and no mismatch left unmailed (sim.audit)."""
    reports = explored(AUDIT_SEQUENCES, "audit")
    assert not reports, "\n\n".join(reports[:3])


def test_no_sequence_breaks_an_invariant_on_s3():
    """The files world with its archive and tokens on S3 (moto's, in process): the s3://
    paths of Storage and the token store, whose versions are ETags (equal bytes, equal
    ETag), compare-and-swap by If-Match / If-None-Match, listings in pages."""
    reports = explored(S3_SEQUENCES, "s3")
    assert not reports, "\n\n".join(reports[:3])


# --- the defect classes the simulation found, as it printed them (red before their fix) --

COMMITTED_RUN_PLANNED_AGAIN = [  # Clear of a committed run's plan task (seed 0)
    ("produce", "u", 0, 9, False),
    ("run", "scheduled__2026-01-01T00:04:00+00:00", 0, 0, 0),
    ("task", "scheduled__2026-01-01T00:04:00+00:00", "commit", 0),
    ("task", "scheduled__2026-01-01T00:04:00+00:00", "plan", 0)]
COMMIT_CLEARED_ANOTHER_RUNS_MARK = [  # Clear of a committed run's commit (seed 9)
    ("produce", "t", 0, 4, False), ("produce", "t", 0, 3, False),
    ("run", "manual__x_1", 0, 0, 0),
    ("run", "scheduled__2026-01-01T00:15:00+00:00", 0, 0, 1),
    ("task", "manual__x_1", "commit", 0)]
RESTORED_TOKEN_TAKEN_FOR_A_LOST_RACE = [  # seed 19
    ("produce", "t", 1, 9, False), ("run", "r1", 0, 0, 0), ("run", "r2", 0, 0, 0),
    ("produce", "t", 0, 7, True), ("run", "r3", 0, 0, 0), ("run", "r4", 0, 0, 0),
    ("produce", "u", 0, 5, False), ("delete_token", "t"), ("run", "r5", 0, 5, 12),
    ("restore_token", "t", 3)]
REWIND_MET_RETENTION = [  # seed 273: the rewound rows were taken out, nothing replaced them
    ("produce", "u", 0, 2, False), ("run", "r1", 0, 0, 0), ("run", "r2", 0, 0, 0),
    ("delete_token", "u"), ("task", "r2", "plan", 0), ("retention", "u", 0, 4)]
COMMIT_CUT_SHORT_THEN_MARK_DELETED = [  # seed 87: tokens ahead of the catalog for good
    ("run", "r1", 0, 0, 0), ("produce", "u", 0, 2, False), ("produce", "t", 0, 3, False),
    ("clear_run", "r1", 5), ("remove_inflight",)]
RESUMED_PLAN_MOVED_ITS_OWN_FILE_ASIDE = [  # seed 274
    ("produce", "u", 0, 2, False), ("run", "r1", 0, 0, 0), ("delete_token", "u"),
    ("run", "r2", 9, 2, 0), ("remove_inflight",), ("run", "r3", 0, 0, 4)]
ABANDONED_PLANS_JOB_WROTE_FILES = [  # seed 157
    ("run", "r1", 0, 0, 0), ("produce", "t", 1, 6, False), ("task", "r1", "plan", 0),
    ("remove_inflight",), ("task", "r1", "job", 0), ("retention", "t", 1, 6)]
KILLED_ATTEMPTS_FILE_LEFT_AFTER_RETENTION = [  # seed 709
    ("produce", "t", 0, 5, True), ("produce", "t", 1, 2, False), ("produce", "u", 0, 1, False),
    ("run", "r1", 0, 5, 0), ("retention", "t", 1, 3)]


LINE_DELETED_AFTER_RETENTION = [  # seed 238: the unarchived offsets lost without a word
    ("produce", "u", 0, 1, False), ("run", "r1", 0, 0, 0), ("produce", "u", 0, 9, True),
    ("retention", "u", 0, 2), ("delete_line", "u", 0)]


REBUILD_AFTER_A_REWIND_MET_RETENTION = [  # seed 5353: the rebuild took the kept row out
    ("run", "r0", 0, 0, 0), ("produce", "u", 0, 4, False), ("run", "r1", 0, 0, 0),
    ("delete_line", "u", 0), ("task", "r0", "plan", 0), ("retention", "u", 0, 6),
    ("run", "r2", 0, 0, 0), ("rebuild", 0)]


TOKEN_DELETED_AFTER_A_KILLED_COMMIT = [  # seed 107: the re-executed commit wrote it back
    ("produce", "t", 0, 2, True), ("run", "r1", 0, 0, 7), ("delete_token", "t")]
TOKEN_DELETED_THEN_ITS_COMMIT_CLEARED = [  # red with the commit's "creating" record ignored
    ("produce", "t", 0, 5, False), ("run", "r1", 0, 0, 5), ("delete_token", "t"),
    ("task", "r1", "commit", 0)]
TOKEN_DELETED_WHILE_BEING_CREATED = [  # seed 197: killed before recording the creation
    ("produce", "t", 0, 4, False), ("run", "r1", 0, 0, 4), ("delete_token", "t")]

TOOLS_TOKEN_TAKEN_FOR_A_RUNS = [  # soak seed 1004511: a token accept-loss wrote (no run id)
    ("produce", "u", 0, 7, False), ("run", "manual__x_1", 0, 0, 0),
    ("produce", "t", 0, 4, False), ("run", "r1", 0, 0, 3), ("retention", "u", 0, 8),
    ("delete_token", "u"), ("remove_inflight",), ("accept_loss", "u")]

ABANDONED_COMMITS_FILE_LEFT_BY_A_RESTORE = [  # soak seed 1000656: read twice from the folder
    ("produce", "u", 0, 9, True), ("run", "r1", 0, 0, 0), ("run", "r2", 0, 0, 0),
    ("produce", "u", 0, 6, False), ("run", "r3", 0, 0, 3), ("remove_inflight",),
    ("restore_token", "u", 2)]

CUT_SHORT_RUNS_TOKEN_PUT_BACK_AFTER_OTHERS = [  # from the soak's seed 1000656, shrunk
    ("produce", "u", 0, 9, True), ("run", "r1", 0, 0, 0), ("run", "r2", 0, 0, 0),
    ("produce", "u", 0, 6, False), ("run", "r3", 0, 0, 3), ("remove_inflight",),
    ("restore_token", "u", 2), ("run", "r4", 0, 0, 0), ("restore_token", "u", 2)]


PLAN_GIVEN_UP_AFTER_ITS_REWIND_MOVED_FILES = [  # was OPEN_DEFECTS "file missing, stray file"
    ("produce", "u", 0, 9, False), ("run", "r1", 0, 0, 0), ("produce", "u", 0, 3, False),
    ("rewind", "u", 0, 0), ("run", "r2", 0, 1, 0), ("remove_inflight",),
    ("restore_token", "u", 1), ("produce", "u", 0, 2, False), ("run", "r3", 0, 0, 0)]

LINE_DELETED_ABOVE_A_REMEMBERED_SPOT = [  # was OPEN_DEFECTS "hole": the spot [4, 4) forgotten
    ("produce", "u", 0, 4, False), ("retention", "u", 0, 4), ("run", "r1", 0, 0, 0),
    ("produce", "u", 0, 3, False), ("retention", "u", 0, 2), ("delete_line", "u", 0),
    ("run", "r2", 0, 0, 0)]


KILLED_JOBS_FILE_LEFT_AFTER_ITS_TOPIC_WAS_DELETED = [  # seed 5252, red before: stray file
    ("add_partition", "u"), ("produce", "u", 1, 4, False), ("produce", "t", 0, 8, False),
    ("run", "r1", 0, 4, 0), ("delete_topic", "u")]


# the 60-minute soak of issue 41's third part (seeds 2,000,000-2,040,897), each shrunk: a
# given-up run's commit re-executed (Clear) after the next plan, and a cut-short commit
# whose token a person put back before deleting the mark
GIVEN_UP_RUNS_COMMIT_STICKS_THE_GROUP = [  # soak seed 2008705: stuck
    ("run", "scheduled__2026-01-01T00:00:00+00:00", 0, 0, 0), ("produce", "u", 0, 2, False),
    ("task", "scheduled__2026-01-01T00:00:00+00:00", "plan", 0),
    ("task", "scheduled__2026-01-01T00:00:00+00:00", "job", 0), ("remove_inflight",),
    ("run", "scheduled__2026-01-01T02:12:00+00:00", 0, 3, 0),
    ("task", "scheduled__2026-01-01T00:00:00+00:00", "commit", 0)]
CUT_SHORT_REWIND_TOKEN_PUT_BACK_THEN_MARK_DELETED = [  # soak seed 2011459: file disagrees
    ("produce", "u", 0, 1, False), ("run", "scheduled__2026-01-01T00:03:00+00:00", 0, 0, 0),
    ("run", "scheduled__2026-01-01T00:04:00+00:00", 0, 0, 0), ("produce", "u", 0, 4, False),
    ("clear_run", "scheduled__2026-01-01T00:04:00+00:00", 0), ("delete_line", "u", 0),
    ("run", "scheduled__2026-01-01T00:09:00+00:00", 0, 0, 3), ("restore_token", "u", 3),
    ("remove_inflight",)]
GIVEN_UP_RUNS_COMMIT_UNDOES_A_DELETE = [  # soak seed 2028335: delete undone (now: change undone)
    ("produce", "t", 0, 6, False), ("run", "scheduled__2026-01-01T00:03:00+00:00", 0, 0, 1),
    ("remove_inflight",), ("run", "manual__x_1", 0, 0, 0), ("delete_token", "t"),
    ("task", "scheduled__2026-01-01T00:03:00+00:00", "commit", 0)]


# found by the 60-minute soak on a5f7c0b (seeds 4,000,000-4,038,171)
DELETE_COPY_PUT_BACK_DELETE_AGAIN = [  # seed 4023932: the check, not the library, was wrong
    ("run", "r0", 0, 0, 0), ("produce", "u", 0, 7, False), ("run", "r1", 0, 0, 0),
    ("run", "r2", 0, 0, 0), ("delete_token", "u"), ("task", "r0", "plan", 0),
    ("restore_token", "u", 1), ("delete_token", "u"), ("run", "r3", 0, 0, 0)]
GIVEN_UP_RUNS_SPOTS_FORGOTTEN = [  # seed 4037115: "hole: t/1 ... [0, 4)", lost unsaid
    ("produce", "t", 1, 7, False), ("produce", "u", 0, 4, True), ("run", "r1", 0, 0, 6),
    ("retention", "t", 1, 4), ("remove_inflight",), ("delete_token", "t")]
GIVEN_UP_RUNS_SPOTS_THROUGH_A_REBUILD = [  # not found: the same, with the catalog rebuilt
    ("produce", "t", 1, 7, False), ("produce", "u", 0, 4, True), ("run", "r1", 0, 0, 6),  # from
    ("retention", "t", 1, 4), ("remove_inflight",), ("delete_token", "t"),  # the run folders
    ("run", "r2", 0, 0, 0), ("rebuild", 0)]  # (red without the rebuild reading given_up.json)
# found by the 60-minute soak on aeca02e (seeds 5,000,000-5,045,912), and the same
# class reasoned on from it: a copy of a given-up run's token put back
GIVEN_UP_RUNS_TOKEN_PUT_BACK_OVER_A_LATER_RUN = [  # seed 5038852: verify disagrees
    ("produce", "t", 1, 6, False), ("run", "scheduled__2026-01-01T00:13:00+00:00", 0, 0, 5),
    ("delete_token", "t"), ("remove_inflight",),
    ("run", "scheduled__2026-01-01T00:18:00+00:00", 0, 0, 0), ("restore_token", "t", 1)]
GIVEN_UP_RUNS_TOKEN_PUT_BACK_STICKS_THE_GROUP = [  # stuck: its commit refused, every run
    ("produce", "t", 1, 6, False), ("run", "s13", 0, 0, 5), ("delete_token", "t"),
    ("remove_inflight",), ("run", "x", 0, 0, 3), ("remove_inflight",), ("restore_token", "t", 1)]
# mails: found with the old rule put back (OLD_MAIL_RULES below), the sequences shrunk
FAILURE_MAILED_PER_RUN = [  # seed 3: the plan's run id in the failure's key
    ("run", "scheduled__2026-01-01T02:01:00+00:00", 0, 0, 0), ("kafka_down", True),
    ("run", "scheduled__2026-01-01T02:22:00+00:00", 0, 0, 0),
    ("clear_run", "scheduled__2026-01-01T02:01:00+00:00", 0)]
EARLIER_ATTEMPTS_FAILURE_RAISED_AGAIN = [  # seed 2843: no failure record removed first
    ("run", "r0", 0, 0, 0), ("produce", "u", 0, 8, False), ("task", "r0", "plan", 0),
    ("remove_inflight",), ("task", "r0", "job", 0), ("task", "r0", "plan", 0),
    ("run", "r25", 2, LAUNCH_FAILS, 0)]
HELD_TOPIC_NEVER_MAILED_AGAIN = [  # seed 483: a plan without anomalies forgot nothing
    ("produce", "u", 0, 1, False), ("run", "r1", 0, 0, 0), ("break_token", "u"),
    ("run", "r2", 0, 0, 0), ("delete_token", "u"), ("run", "r3", 0, 0, 0),
    ("break_token", "u"), ("run", "r4", 0, 0, 0)]
# issue 56, defect 11: a rewind to 0, then retention below the rewound line before the
# rewinding run: the archive still holds every offset, but the plan reported [0, 5) lost
# to retention (held out, mailed with the accept-loss remedy)
REWIND_THEN_RETENTION_NO_LOSS = [
    ("produce", "t", 0, 9, False, 0), ("run", "r1", 0, 0, 0), ("run", "r2", 0, 0, 0),
    ("rewind", "t", 0, 0), ("retention", "t", 0, 5), ("run", "r3", 0, 0, 0)]
# issue 56, defect 9: the commit's protocol finished, its task killed before the mail;
# the retry found the run committed ("repeated") and announced nothing: no mail, no
# Asset event, ever
COMMIT_KILLED_BEFORE_ITS_ANNOUNCEMENT = [
    ("produce", "t", 0, 3, False, 0), ("run", "r1", 0, 0, 16), ("task", "r1", "commit", 0)]
# found by the loss check's fix (seed 861): a rewind whose whole range the archive holds
# and Kafka deleted planned nothing, so its line stayed below Kafka's earliest for good
REWOUND_LINE_NEVER_CAUGHT_UP = [
    ("produce", "u", 0, 1, True, 0), ("run", "scheduled__2026-01-01T00:02:00+00:00", 0, 0, 0),
    ("rewind_time", "u", 0, 120), ("retention", "u", 0, 6)]
# found by the setting step (issue 56, config changes between runs), each red before its
# fix (tests/unit/plan/test_planning.py has each rule): with min_records 3 a transaction's
# marker alone pending waited for good (no message to date it: a lag of one for ever);
# with on_retention_gap: skip, a gap up to the log's end never moved the token
MIN_RECORDS_WAITING_ON_A_MARKER = [("setting", "min_records", 3), ("produce", "t", 0, 6, True, 0)]
SKIPPED_GAP_TO_THE_LOGS_END = [
    ("produce", "u", 0, 4, False, 0), ("retention", "u", 0, 5),
    ("run", "scheduled__2026-01-01T00:19:00+00:00", 0, 0, 0), ("produce", "u", 0, 3, True, 0),
    ("retention", "u", 0, 6), ("setting", "on_retention_gap", "skip")]
# found by the 60-minute soak on b07e460 (seed 2428): a stale job's failure names the plan
# in flight, which a later run replaced: the same incident got a new key and a new mail
STALE_JOB_MAILED_AGAIN = [
    ("produce", "u", 0, 8, False, 0), ("run", "scheduled__2026-01-01T00:01:00+00:00", 0, -1, 0),
    ("run", "manual__x_1", 0, 3, 0), ("remove_inflight",),
    ("run", "scheduled__2026-01-01T00:05:00+00:00", 0, 0, 2), ("task", "manual__x_1", "job", 0),
    ("remove_inflight",), ("run", "scheduled__2026-01-01T00:25:00+00:00", 0, 0, 4),
    ("race", "scheduled__2026-01-01T00:01:00+00:00", "job", 4, "rewind", "u", False, 0)]
# issue 56, the 60-minute soak (seed 404972): a person put back a copy of token t that a
# run given up since had written; the plan in flight took that for a run committing now
# (a race) and its commit failed TokenConflictError at every retry: the group stuck
GIVEN_UP_RUNS_TOKEN_COPY_PUT_BACK_UNDER_A_PLAN = [
    ("produce", "t", 0, 5, False, 0), ("produce", "u", 0, 9, True, 0),
    ("run", "scheduled__2026-01-01T00:06:00+00:00", 0, 0, 7), ("delete_token", "u"),
    ("delete_token", "t"), ("remove_inflight",),
    ("run", "scheduled__2026-01-01T00:12:00+00:00", 0, 0, 0),
    ("race", "scheduled__2026-01-01T00:13:00+00:00", "plan", 1, "rewind", "t", True, 8),
    ("restore_token", "t", 2)]
# issue 56, Kafka's log cleaner (seed 7 with its step): offsets 0-8 archived, the cleaner
# removes 0, 2 and 4, a person rewinds the partition: the rewind's file held 1, 3 and 5-8
# only, and the file it replaced, which held 0-8, was moved aside (now archive.earlier)
REWIND_OVER_A_COMPACTED_LOG = [
    ("produce", "t", 0, 9, False), ("run", "scheduled__2026-01-01T00:02:00+00:00", 0, 0, 0),
    ("compact_log", "t", 0, 6), ("delete_line", "t", 0)]
# found while building the above (seed 1134): a rewind planned as retention deleted the
# whole log; the earlier file gave the slice its head, so the job's retention check (a
# gap at the slice's start) saw none, and offsets [2, 4), never archived, were committed
# as a hole; the check now starts where only Kafka could give the offsets (job.kafka_from)
REWINDS_EARLIER_RECORDS_HID_A_LOSS = [
    ("run", "scheduled__2026-01-01T00:02:00+00:00", 0, 0, 0), ("produce", "u", 0, 2, False, 0),
    ("clear_run", "scheduled__2026-01-01T00:02:00+00:00", 3), ("produce", "u", 0, 2, False, 0),
    ("run", "scheduled__2026-01-01T00:11:00+00:00", 0, 0, 0),
    ("race", "scheduled__2026-01-01T00:14:00+00:00", "plan", 1, "retention", "u", True, 0)]
# issue 56, offsets reused (an unclean election as a step, seed 200): 0-2 archived, the
# tail cut to 0 and written again, the token deleted, the cleaner removed the new 0 and 2:
# the rewind moved the archived file aside and kept Kafka's other messages (the job's look
# came too late); now the plan compares the last replaced file with Kafka and holds it
REWIND_OVER_OFFSETS_REUSED = [
    ("produce", "u", 0, 3, False, 0), ("run", "scheduled__2026-01-01T00:03:00+00:00", 0, 0, 0),
    ("truncate", "u", 0, 5), ("produce", "u", 0, 7, False, 0), ("delete_token", "u"),
    ("compact_log", "u", 0, 2)]
# a new generation, then (seed 392) a line deleted after retention took 0-4: offset 4,
# archived by no generation, was lost unsaid (losses judged by the new generation only)
LINE_DELETED_UNDER_A_NEW_GENERATION = [
    ("produce", "u", 0, 4, False, 0), ("run", "scheduled__2026-01-01T00:02:00+00:00", 0, 0, 0),
    ("produce", "u", 0, 5, False, 0), ("retention", "u", 0, 5), ("delete_line", "u", 0),
    ("setting", "generation", 1)]
# (seed 635) the new generation begun at 9, then rewound to 0: verify called [6, 9) a hole,
# which the older generation holds
NEW_GENERATION_REWOUND_BELOW_ITS_START = [
    ("produce", "u", 0, 9, False, 0), ("run", "scheduled__2026-01-01T00:02:00+00:00", 0, 0, 0),
    ("run", "scheduled__2026-01-01T00:03:00+00:00", 0, 0, 0), ("setting", "generation", 1),
    ("produce", "u", 0, 2, False, 0), ("run", "scheduled__2026-01-01T00:20:00+00:00", 0, 0, 0),
    ("delete_line", "u", 0), ("run", "scheduled__2026-01-01T00:27:00+00:00", 0, 0, 0)]
# (seed 704) a job killed after its file, a new generation, retention took the slice: the
# retry's clean-up looked for the new generation's names and left the file a stray
KILLED_JOBS_FILE_LEFT_UNDER_A_NEW_GENERATION = [
    ("produce", "u", 0, 2, False, 0), ("run", "manual__x_1", 0, 5, 0),
    ("setting", "generation", 1), ("retention", "u", 0, 6)]
# (seed 3804) a job killed after its files, then an unclean election cut all the slice
# held: the retry wrote no file of it, and the first attempt's stayed, a stray
KILLED_JOBS_FILE_LEFT_AFTER_AN_UNCLEAN_ELECTION = [
    ("produce", "u", 0, 2, True, 0), ("produce", "t", 0, 3, False, 0),
    ("run", "scheduled__2026-01-01T00:20:00+00:00", 0, 6, 12), ("truncate", "t", 0, 8)]
# (seed 40172) start_from: latest, then a line deleted of a partition archived to 8: the
# next run began at Kafka's latest (13) and skipped [8, 13) without a word
LINE_DELETED_UNDER_START_FROM_LATEST = [
    ("produce", "u", 0, 7, False, 0), ("setting", "start_from", "latest"),
    ("run", "scheduled__2026-01-01T00:11:00+00:00", 0, 0, 0), ("produce", "u", 0, 1, False, 0),
    ("run", "scheduled__2026-01-01T00:14:00+00:00", 0, 0, 0), ("delete_line", "u", 0),
    ("produce", "u", 0, 5, False, 0)]
# (seed 41147, against the first version of that fix) start_from: latest, an unclean
# election below the archive's end: the mail's
# remedy (a new generation, the token deleted) judged the line at the old generation's
# end, beyond Kafka's latest offset, and held the topic for good
ELECTION_UNDER_START_FROM_LATEST = [
    ("produce", "t", 1, 9, False, 0), ("run", "scheduled__2026-01-01T00:01:00+00:00", 0, 0, 0),
    ("setting", "start_from", "latest"), ("truncate", "t", 1, 4)]
# (events seed 48211, with elections in the event-time world; the same in the files world)
# 0-3 archived, an election cut them all, new messages took 0-5 and the archive went on
# from 4, the log cleaner removed 0, 2 and 4, then the token was deleted. The plan's look
# compared only the last replaced file's tail (4-5: it agrees) and let the rewind go; the
# job found offset 1 differs in the first file and took nothing of the earlier files, so
# 4, archived and gone from Kafka, was lost. Now every replaced row's last message (3,
# where Kafka holds another) is compared, and the topic is held before anything moves.
REWIND_OVER_AN_ELECTION_THE_ARCHIVE_WENT_ON_PAST = [
    ("produce", "u", 0, 4, False, 0), ("run", "scheduled__2026-01-01T00:04:00+00:00", 0, 0, 0),
    ("truncate", "u", 0, 8), ("produce", "u", 0, 4, False, 0), ("produce", "u", 0, 2, True, 0),
    ("run", "scheduled__2026-01-01T00:21:00+00:00", 0, 0, 0), ("compact_log", "u", 0, 3),
    ("delete_token", "u")]
FOUND = {"committed run planned again": COMMITTED_RUN_PLANNED_AGAIN,
         "rewind over an election the archive went on past":
             REWIND_OVER_AN_ELECTION_THE_ARCHIVE_WENT_ON_PAST,
         "line deleted under start_from: latest": LINE_DELETED_UNDER_START_FROM_LATEST,
         "election under start_from: latest": ELECTION_UNDER_START_FROM_LATEST,
         "killed job's file left after an unclean election":
             KILLED_JOBS_FILE_LEFT_AFTER_AN_UNCLEAN_ELECTION,
         "rewind over offsets reused": REWIND_OVER_OFFSETS_REUSED,
         "line deleted under a new generation": LINE_DELETED_UNDER_A_NEW_GENERATION,
         "new generation rewound below its start": NEW_GENERATION_REWOUND_BELOW_ITS_START,
         "killed job's file left under a new generation":
             KILLED_JOBS_FILE_LEFT_UNDER_A_NEW_GENERATION,
         "rewind over a compacted log": REWIND_OVER_A_COMPACTED_LOG,
         "rewind's earlier records hid a retention loss": REWINDS_EARLIER_RECORDS_HID_A_LOSS,
         "given-up run's token copy put back under a plan":
         GIVEN_UP_RUNS_TOKEN_COPY_PUT_BACK_UNDER_A_PLAN,
         "stale job mailed again": STALE_JOB_MAILED_AGAIN,
         "min_records waiting on a marker": MIN_RECORDS_WAITING_ON_A_MARKER,
         "skipped gap to the log's end": SKIPPED_GAP_TO_THE_LOGS_END,
         "commit cleared another run's mark": COMMIT_CLEARED_ANOTHER_RUNS_MARK,
         "restored token taken for a lost race": RESTORED_TOKEN_TAKEN_FOR_A_LOST_RACE,
         "rewind met retention": REWIND_MET_RETENTION,
         "commit cut short, then its mark deleted": COMMIT_CUT_SHORT_THEN_MARK_DELETED,
         "resumed plan moved its own file aside": RESUMED_PLAN_MOVED_ITS_OWN_FILE_ASIDE,
         "abandoned plan's job wrote files": ABANDONED_PLANS_JOB_WROTE_FILES,
         "killed attempt's file left after retention": KILLED_ATTEMPTS_FILE_LEFT_AFTER_RETENTION,
         "line deleted after retention": LINE_DELETED_AFTER_RETENTION,
         "rebuild after a rewind met retention": REBUILD_AFTER_A_REWIND_MET_RETENTION,
         "token deleted after a killed commit": TOKEN_DELETED_AFTER_A_KILLED_COMMIT,
         "token deleted while being created": TOKEN_DELETED_WHILE_BEING_CREATED,
         "a tool's token taken for a run's": TOOLS_TOKEN_TAKEN_FOR_A_RUNS,
         "abandoned commit's file left by a restore": ABANDONED_COMMITS_FILE_LEFT_BY_A_RESTORE,
         "cut-short run's token put back after others":
             CUT_SHORT_RUNS_TOKEN_PUT_BACK_AFTER_OTHERS,
         "plan given up after its rewind moved files":
             PLAN_GIVEN_UP_AFTER_ITS_REWIND_MOVED_FILES,
         "line deleted above a remembered spot": LINE_DELETED_ABOVE_A_REMEMBERED_SPOT,
         "killed job's file left after its topic was deleted":
             KILLED_JOBS_FILE_LEFT_AFTER_ITS_TOPIC_WAS_DELETED,
         "given-up run's commit sticks the group": GIVEN_UP_RUNS_COMMIT_STICKS_THE_GROUP,
         "cut-short rewind, token put back, then mark deleted":
             CUT_SHORT_REWIND_TOKEN_PUT_BACK_THEN_MARK_DELETED,
         "given-up run's commit undoes a delete": GIVEN_UP_RUNS_COMMIT_UNDOES_A_DELETE,
         "token deleted, then its commit cleared": TOKEN_DELETED_THEN_ITS_COMMIT_CLEARED,
         "delete, copy put back, delete again": DELETE_COPY_PUT_BACK_DELETE_AGAIN,
         "given-up run's spots forgotten": GIVEN_UP_RUNS_SPOTS_FORGOTTEN,
         "given-up run's spots through a rebuild": GIVEN_UP_RUNS_SPOTS_THROUGH_A_REBUILD,
         "given-up run's token put back over a later run":
         GIVEN_UP_RUNS_TOKEN_PUT_BACK_OVER_A_LATER_RUN,
         "given-up run's token put back sticks the group":
         GIVEN_UP_RUNS_TOKEN_PUT_BACK_STICKS_THE_GROUP,
         "failure mailed per run": FAILURE_MAILED_PER_RUN,
         "earlier attempt's failure raised again": EARLIER_ATTEMPTS_FAILURE_RAISED_AGAIN,
         "held topic never mailed again": HELD_TOPIC_NEVER_MAILED_AGAIN,
         "rewind, then retention: no loss": REWIND_THEN_RETENTION_NO_LOSS,
         "commit killed before its announcement": COMMIT_KILLED_BEFORE_ITS_ANNOUNCEMENT,
         "rewound line never caught up": REWOUND_LINE_NEVER_CAUGHT_UP}


# in a table group's world (--shape tables seed 2, red with a committed run's commit not final)
COMMITTED_RUNS_COMMIT_ADDED_AGAIN_TO_ITS_TABLE = [
    ("run", "scheduled__2026-01-01T00:03:00+00:00", 0, 0, 0), ("produce", "t", 0, 6, True),
    ("run", "scheduled__2026-01-02T02:10:00+00:00", 0, 0, 0), ("produce", "t", 1, 3, False),
    ("clear_run", "scheduled__2026-01-01T00:03:00+00:00", 0), ("maintain", 4),
    ("task", "scheduled__2026-01-02T02:10:00+00:00", "commit", 0)]
GIVEN_UP_RUNS_TABLE_COMMIT_LEFT_IN_ITS_TABLE = [  # --shape tables seed 69: read beside the catalog
    ("produce", "t", 1, 5, False), ("run", "scheduled__2026-01-01T00:23:00+00:00", 0, 0, 8),
    ("remove_inflight",)]
# the 30-minute table-group soak of issue 41's third part, each shrunk: a given-up run's
# commit re-executed (Clear) after the next plan undid it, and a maintenance on a table
# whose current snapshot is of a run that never reached the catalog
GIVEN_UP_RUNS_COMMIT_RE_EXECUTED = [  # soak seed 3001230: table disagrees
    ("run", "scheduled__2026-01-01T00:04:00+00:00", 0, 0, 0), ("produce", "u", 0, 8, False),
    ("clear_run", "scheduled__2026-01-01T00:04:00+00:00", 0),
    ("run", "scheduled__2026-01-01T00:08:00+00:00", 5, 12, 1), ("remove_inflight",),
    ("run", "scheduled__2026-01-01T00:15:00+00:00", 7, 1, 0),
    ("task", "scheduled__2026-01-01T00:08:00+00:00", "commit", 0), ("delete_token", "u")]
GIVEN_UP_RUNS_COMMIT_THEN_MAINTENANCE = [  # soak seed 3001746: a file read twice
    ("produce", "t", 0, 5, True), ("run", "scheduled__2026-01-01T02:12:00+00:00", 0, 0, 2),
    ("produce", "t", 0, 6, True), ("remove_inflight",), ("run", "manual__x_1", 0, 0, 0),
    ("run", "scheduled__2026-01-01T02:18:00+00:00", 0, 12, 6),
    ("task", "scheduled__2026-01-01T02:12:00+00:00", "commit", 0), ("maintain", 0)]
GIVEN_UP_RUNS_COMMIT_STICKS_THE_NEXT_PLAN = [  # soak seed 3002033: stuck
    ("produce", "u", 0, 9, False), ("produce", "t", 1, 7, False),
    ("run", "scheduled__2026-01-01T00:10:00+00:00", 0, 0, 4), ("remove_inflight",),
    ("run", "scheduled__2026-01-01T02:18:00+00:00", 0, 4, 0),
    ("task", "scheduled__2026-01-01T00:10:00+00:00", "commit", 0)]
MAINTENANCE_UNDER_A_GIVEN_UP_REWIND = [  # soak seed 3003203: the catalog's file deleted
    ("produce", "u", 0, 8, True), ("run", "scheduled__2026-01-01T00:08:00+00:00", 0, 0, 0),
    ("delete_token", "u"), ("run", "scheduled__2026-01-01T00:11:00+00:00", 4, 0, 6),
    ("remove_inflight",), ("maintain", 0)]
# issue 44: a compaction killed after its table's replace snapshot, before its catalog
# entry; then a person deletes the token. Were the plan made from the catalog (which still
# lists the compacted rows) its commit would add the re-archived rows beside the
# compacted file: it gives way to the lease, and the next compact task finishes first
COMPACTION_KILLED_THEN_A_REWIND = [
    ("produce", "t", 0, 5, False, 0), ("run", "scheduled__2026-01-01T00:05:00+00:00", 0, 0, 0),
    ("produce", "t", 0, 4, False, 0), ("run", "scheduled__2026-01-01T00:06:00+00:00", 0, 0, 0),
    ("compact", 2, 11), ("delete_token", "t"),
    ("run", "scheduled__2026-01-01T05:00:00+00:00", 0, 0, 0)]
# issue 56, defect 2: a compaction killed, then compaction turned off (compact_after:
# null); the compact task returned "skipped" before finishing the dead lease, every plan
# gave way to that lease, and no compaction ever came to finish it: the group stuck
COMPACTION_KILLED_THEN_TURNED_OFF = [
    ("produce", "t", 0, 5, False, 0), ("run", "scheduled__2026-01-01T00:05:00+00:00", 0, 0, 0),
    ("produce", "t", 0, 4, False, 0), ("run", "scheduled__2026-01-01T00:06:00+00:00", 0, 0, 0),
    ("compact", 2, 11), ("compaction_setting", False), ("produce", "t", 0, 3, False, 0),
    ("run", "scheduled__2026-01-01T05:00:00+00:00", 0, 0, 0)]
# issue 56, defect 4: maintenance took a table whose current snapshot is a compaction's
# for one not settled yet (it looked for the compaction's committed.json, which none
# writes): such a table kept every snapshot and the small files the compaction replaced
COMPACTED_TABLE_NEVER_MAINTAINED = [
    ("produce", "t", 0, 5, False, 0), ("run", "scheduled__2026-01-01T00:05:00+00:00", 0, 0, 0),
    ("produce", "t", 0, 4, False, 0), ("run", "scheduled__2026-01-01T00:06:00+00:00", 0, 0, 0),
    ("compact", 2, 0)]
# issue 56, defect 1: a compaction (another deployment's, or `airflow tasks test ...
# compact`) that ran whole between a rewind's plan reading the catalog and its mark: the
# plan listed the small files it had merged, and the rewind's rows were added beside the
# compacted file (each message twice in the table)
PLAN_RACING_A_COMPACTION = [
    ("produce", "t", 0, 8, False, 0), ("run", "scheduled__2026-01-01T00:02:00+00:00", 0, 0, 0),
    ("produce", "t", 0, 8, False, 0), ("run", "scheduled__2026-01-01T00:04:00+00:00", 0, 0, 0),
    ("time", 120), ("delete_token", "t"),
    ("race", "scheduled__2026-01-01T02:07:00+00:00", "plan", 3, "compact", "t")]
# issue 56, defect 6 (cost): a compact task with nothing to merge left a compaction.*
# folder behind (4 in 5 of them: ~35,000 a year)
COMPACTION_WITH_NOTHING_TO_MERGE = [("run", "scheduled__2026-01-01T00:03:00+00:00", 0, 0, 0)]
# issue 56, defect 3 (its last part), found by the race of two compactions (seed 46): a
# holder paused between its release's read and delete (its lease taken over meanwhile,
# the successor killed mid-compaction) deleted the successor's lease; nothing finished
# the successor's table commit, and the table read a file the catalog never named
RELEASE_AFTER_A_TAKEOVER = [
    ("produce", "t", 0, 5, False, 0), ("produce", "t", 1, 9, False, 0),
    ("run", "scheduled__2026-01-01T01:06:00+00:00", 0, 0, 0),
    ("run", "scheduled__2026-01-01T01:11:00+00:00", 0, 0, 0),
    ("race", "scheduled__2026-01-01T01:12:00+00:00", "compact", 2, "compact", "t", False, 12)]
# issue 56, the 60-minute soak (seed 402209): a damaged catalog snapshot, a deleted token
# line and compaction at every run: the table read the last compaction's file, the catalog
# the rows before it
DAMAGED_SNAPSHOT_UNDER_COMPACTIONS = [
    ("produce", "u", 0, 4, False, 0), ("run", "scheduled__2026-01-01T00:01:00+00:00", 0, 0, 0),
    ("produce", "u", 0, 6, False, 0), ("run", "scheduled__2026-01-01T00:03:00+00:00", 0, 0, 2),
    ("produce", "u", 0, 8, False, 0), ("produce", "u", 0, 8, False, 0),
    ("produce", "u", 0, 8, False, 0), ("produce", "u", 0, 7, False, 0), ("retention", "u", 0, 1),
    ("damage_catalog", 35), ("delete_line", "u", 0), ("compaction_setting", 0)]
# issue 56, the 60-minute soak (seed 504001): a commit killed after committed.json, its
# run rebuilt into the catalog, then its commit re-executed while maintenance expired the
# run's table snapshot: the commit found no snapshot naming the run and added its file again
COMMIT_ADDED_AGAIN_AFTER_ITS_SNAPSHOT_EXPIRED = [
    ("produce", "u", 0, 9, True, 0), ("run", "scheduled__2026-01-01T01:08:00+00:00", 0, 0, 11),
    ("run", "scheduled__2026-01-01T01:14:00+00:00", 0, 10, 10), ("remove_inflight",),
    ("run", "scheduled__2026-01-02T01:27:00+00:00", 0, 0, 0),
    ("race", "scheduled__2026-01-01T01:14:00+00:00", "commit", 1, "maintain", "u", False, 0)]
# issue 56, the 60-minute soak (seed 505649): a plan killed before it gave way to a dead
# compaction's lease; the next compaction finished the dead one (replacing the rows the
# plan read), and the plan's retry went ahead unchanged: the table kept the compacted file
PLAN_RETRIED_AFTER_IT_SHOULD_HAVE_GIVEN_WAY = [
    ("run", "scheduled__2026-01-01T00:01:00+00:00", 0, 0, 0), ("produce", "u", 0, 4, False, 0),
    ("run", "scheduled__2026-01-01T00:05:00+00:00", 5, 3, 1),
    ("task", "scheduled__2026-01-01T00:05:00+00:00", "plan", 0), ("produce", "u", 0, 3, False, 0),
    ("run", "scheduled__2026-01-01T02:14:00+00:00", 0, 0, 0),
    ("task", "scheduled__2026-01-01T00:01:00+00:00", "plan", 0), ("delete_token", "u"),
    ("run", "scheduled__2026-01-01T02:18:00+00:00", 0, 0, 0), ("compact", 3, 10),
    ("run", "scheduled__2026-01-01T05:26:00+00:00", 4, 0, 0)]
# issue 56, the 60-minute soak (seed 601845): a rewind to a row of a transaction marker
# only (no file to move aside), its plan racing a compaction that merged that row into
# the one before: the plan did not look for the compaction (it replaced no file), and
# its commit refused the overlap with the merged row at every retry
REWIND_TO_A_FILELESS_ROW_RACING_A_COMPACTION = [
    ("run", "scheduled__2026-01-01T00:00:00+00:00", 0, 0, 0), ("produce", "u", 0, 6, True, 0),
    ("clear_run", "scheduled__2026-01-01T00:00:00+00:00", 0),
    ("run", "scheduled__2026-01-01T02:14:00+00:00", 0, 0, 0), ("retention", "u", 0, 1),
    ("race", "scheduled__2026-01-01T02:24:00+00:00", "plan", 2, "compact", "u", True, 0)]
# issue 56, the 60-minute soak (seed 501747): a commit killed after committed.json and
# before the catalog, whose catalog the next plan rebuilt from the run folders (so it holds
# the run), and the mark deleted by hand: nobody was to finish the commit's record, and
# maintenance waited on the table for good (it asked the record, not the catalog)
COMMIT_REACHED_THE_CATALOG_BY_A_REBUILD_ONLY = [
    ("produce", "u", 0, 5, False, 0), ("run", "scheduled__2026-01-02T03:11:00+00:00", 0, 0, 3),
    ("clear_run", "scheduled__2026-01-02T03:11:00+00:00", 12), ("remove_inflight",)]
FOUND_IN_TABLES = {"damaged snapshot under compactions": DAMAGED_SNAPSHOT_UNDER_COMPACTIONS,
                   "rewind over an election the archive went on past":
                       REWIND_OVER_AN_ELECTION_THE_ARCHIVE_WENT_ON_PAST,
                   "rewind to a fileless row racing a compaction":
                   REWIND_TO_A_FILELESS_ROW_RACING_A_COMPACTION,
                   "plan retried after it should have given way":
                   PLAN_RETRIED_AFTER_IT_SHOULD_HAVE_GIVEN_WAY,
                   "commit added again after its snapshot expired":
                   COMMIT_ADDED_AGAIN_AFTER_ITS_SNAPSHOT_EXPIRED,
                   "committed run's commit added again to its table":
                   COMMITTED_RUNS_COMMIT_ADDED_AGAIN_TO_ITS_TABLE,
                   "given-up run's table commit left in its table":
                   GIVEN_UP_RUNS_TABLE_COMMIT_LEFT_IN_ITS_TABLE,
                   "given-up run's commit re-executed": GIVEN_UP_RUNS_COMMIT_RE_EXECUTED,
                   "given-up run's commit, then maintenance":
                   GIVEN_UP_RUNS_COMMIT_THEN_MAINTENANCE,
                   "given-up run's commit sticks the next plan":
                   GIVEN_UP_RUNS_COMMIT_STICKS_THE_NEXT_PLAN,
                   "maintenance under a given-up rewind": MAINTENANCE_UNDER_A_GIVEN_UP_REWIND,
                   "compaction killed, then a rewind": COMPACTION_KILLED_THEN_A_REWIND,
                   "compaction killed, then turned off": COMPACTION_KILLED_THEN_TURNED_OFF,
                   "compacted table never maintained": COMPACTED_TABLE_NEVER_MAINTAINED,
                   "plan racing a compaction": PLAN_RACING_A_COMPACTION,
                   "compaction with nothing to merge": COMPACTION_WITH_NOTHING_TO_MERGE,
                   "release after a takeover": RELEASE_AFTER_A_TAKEOVER,
                   "commit reached the catalog by a rebuild only":
                   COMMIT_REACHED_THE_CATALOG_BY_A_REBUILD_ONLY}


# in an event-time group's world (--shape events), each red before its fix
EARLIER_ATTEMPTS_FILE_LEFT_IN_AN_HOUR = [  # seed 1362: the job killed, then retention
    ("produce", "t", 0, 2, True, 0), ("produce", "u", 0, 1, False, 0),
    ("run", "manual__x_1", 0, 5, 6), ("retention", "u", 0, 3)]
GIVEN_UP_PLANS_FILE_LEFT_IN_AN_HOUR = [  # seed 336: the in-flight mark deleted by hand
    ("produce", "u", 0, 2, False, 90), ("produce", "t", 1, 8, False, 10),
    ("run", "scheduled__2026-01-01T00:05:00+00:00", 12, 3, 0),
    ("run", "scheduled__2026-01-01T00:08:00+00:00", 3, 5, 0),
    ("remove_inflight",), ("retention", "t", 1, 6)]
FINALIZED_HOUR_NEVER_ANNOUNCED = [  # seed 2628: finalize killed after its catalog entry
    ("produce", "u", 0, 1, False, 0), ("produce", "t", 1, 6, True, 90),
    ("run", "scheduled__2026-01-01T00:14:00+00:00", 0, 0, 8),
    ("finalize", "scheduled__2026-01-01T00:14:00+00:00", 4)]
REBUILD_FORGOT_A_FINALIZED_HOUR = [  # seed 510: a rebuild inside finalize's own append
    ("run", "scheduled__2026-01-01T00:00:00+00:00", 0, 0, 0), ("produce", "u", 0, 2, False, 0),
    ("run", "scheduled__2026-01-01T00:04:00+00:00", 0, 0, 0),
    ("run", "scheduled__2026-01-01T00:05:00+00:00", 0, 0, 0),
    ("finalize", "scheduled__2026-01-01T00:04:00+00:00", 0),
    ("finalize", "scheduled__2026-01-01T00:00:00+00:00", 0), ("produce", "u", 0, 9, True, 90),
    ("run", "scheduled__2026-01-01T00:10:00+00:00", 0, 0, 0), ("produce", "u", 0, 6, True, 0),
    ("produce", "u", 0, 4, False, 0), ("run", "scheduled__2026-01-01T00:15:00+00:00", 0, 0, 0),
    ("produce", "u", 0, 4, False, 0), ("run", "scheduled__2026-01-01T00:19:00+00:00", 0, 0, 0),
    ("run", "scheduled__2026-01-01T00:20:00+00:00", 0, 0, 0),
    ("run", "scheduled__2026-01-01T00:21:00+00:00", 0, 0, 0), ("produce", "t", 1, 6, True, 90),
    ("damage_catalog", 17), ("finalize", "scheduled__2026-01-01T00:05:00+00:00", 0)]
# found by the 60-minute soak of 06064ca (--shape all), red there
GIVEN_UP_RUNS_ROWS_BACK_BY_A_REBUILD = [  # seed 8000910: its files gone, its rows current
    ("produce", "t", 0, 3, False, 0), ("run", "scheduled__2026-01-01T00:03:00+00:00", 0, 0, 0),
    ("produce", "u", 0, 5, True, 10), ("run", "scheduled__2026-01-01T00:13:00+00:00", 0, 0, 4),
    ("remove_inflight",), ("delete_token", "u"),
    ("run", "scheduled__2026-01-01T00:20:00+00:00", 0, LAUNCH_FAILS, 0), ("rebuild", 8),
    ("retention", "u", 0, 6)]
HOUR_FINALIZED_UNDER_A_PLAN_IN_FLIGHT = [  # seed 8004658: its job wrote into it after
    ("run", "scheduled__2026-01-01T00:04:00+00:00", 0, 0, 0), ("produce", "t", 1, 7, False, 90),
    ("run", "scheduled__2026-01-01T00:08:00+00:00", 0, 4, 0), ("produce", "t", 0, 5, False, 0),
    ("run", "scheduled__2026-01-01T00:15:00+00:00", 0, 0, 0),
    ("task", "scheduled__2026-01-01T00:15:00+00:00", "plan", 0), ("retention", "t", 0, 5),
    ("finalize", "scheduled__2026-01-01T00:04:00+00:00", 0),
    ("clear_run", "scheduled__2026-01-01T00:15:00+00:00", 0)]
# issue 56, defect 6 (cost): a rewind of both partitions of an event-time topic listed
# the topic's whole tree once per partition (the same answer, asked twice)
REWIND_OF_A_TOPIC_LISTED_PER_PARTITION = [
    ("produce", "t", 0, 3, False, 0), ("produce", "t", 1, 3, False, 0), ("run", "r1", 0, 0, 0),
    ("rewind_time", "t", None, 120), ("run", "r2", 0, 0, 0)]
# issue 56, the 60-minute soak (seed 304134): a final hour's rewind re-archived it in one
# file where it had two; the commit re-opened it, and finalize, waiting on a partition never
# archived (then on a topic deleted), never finalized it again: its event stood unreplaced
FINAL_HOUR_REWOUND_NEVER_ANNOUNCED_AGAIN = [
    ("produce", "t", 1, 2, False, 90), ("run", "scheduled__2026-01-01T00:06:00+00:00", 0, 7, 1),
    ("clear_run", "scheduled__2026-01-01T00:06:00+00:00", 0), ("produce", "t", 1, 1, False, 90),
    ("run", "scheduled__2026-01-01T00:13:00+00:00", 0, 0, 0), ("delete_token", "t"),
    ("run", "scheduled__2026-01-01T00:15:00+00:00", 0, 4, 0), ("produce", "t", 0, 8, False, 0),
    ("run", "scheduled__2026-01-01T00:17:00+00:00", 0, 0, 0), ("delete_topic", "t")]
# issue 56, Kafka's log cleaner in an event-time world (seed 160): a job killed after its
# files, then the cleaner removed the first message of an hour's file, and the job's retry
# named that hour's file by its new first message: the first attempt's file stayed in the
# tree beside it, read by the folders' readers
RETRIED_JOB_AFTER_THE_LOG_CLEANER = [
    ("produce", "t", 0, 5, False, 0), ("produce", "t", 1, 3, False, 90),
    ("run", "scheduled__2026-01-01T00:22:00+00:00", 0, 7, 0), ("compact_log", "t", 1, 2)]
# (seed 43198) start_from: latest began u/0 past an aborted transaction's offsets; back
# at earliest, a deleted line's rewind, capped at 6 records, left [6, 10) between its
# file and the old ones: verify called it a hole, though the token (6) is below it
CAPPED_REWIND_BELOW_WHERE_LATEST_BEGAN = [
    ("setting", "start_from", "latest"), ("abort", "u", 0, 9),
    ("run", "scheduled__2026-01-01T00:08:00+00:00", 0, 0, 0), ("setting", "start_from", "earliest"),
    ("produce", "u", 0, 3, False, 0), ("run", "scheduled__2026-01-01T00:52:00+00:00", 0, 0, 0),
    ("delete_line", "u", 0), ("run", "scheduled__2026-01-01T00:59:00+00:00", 0, 0, 0)]
# (the soak's seed 804141; the checks' own model) the log cleaner removed offset 6, archived
# (late), before an election cut it: the check did not count the removed message among the
# messages the offset held, and called the archived one wrong bytes
ELECTION_OVER_A_MESSAGE_THE_CLEANER_REMOVED = [
    ("produce", "t", 1, 9, False, 90), ("run", "scheduled__2026-01-01T00:06:00+00:00", 0, 0, 0),
    ("run", "scheduled__2026-01-01T00:07:00+00:00", 0, 0, 0), ("compact_log", "t", 1, 5),
    ("truncate", "t", 1, 4), ("produce", "t", 1, 9, True, 0)]
FOUND_IN_EVENTS = {"rewind of a topic listed per partition": REWIND_OF_A_TOPIC_LISTED_PER_PARTITION,
                   "election over a message the cleaner removed":
                       ELECTION_OVER_A_MESSAGE_THE_CLEANER_REMOVED,
                   "rewind over an election the archive went on past":
                       REWIND_OVER_AN_ELECTION_THE_ARCHIVE_WENT_ON_PAST,
                   "capped rewind below where latest began": CAPPED_REWIND_BELOW_WHERE_LATEST_BEGAN,
                   "retried job after the log cleaner": RETRIED_JOB_AFTER_THE_LOG_CLEANER,
                   "final hour rewound, never announced again":
                   FINAL_HOUR_REWOUND_NEVER_ANNOUNCED_AGAIN,
                   "given-up run's rows back by a rebuild": GIVEN_UP_RUNS_ROWS_BACK_BY_A_REBUILD,
                   "hour finalized under a plan in flight": HOUR_FINALIZED_UNDER_A_PLAN_IN_FLIGHT,
                   "earlier attempt's file left in an hour": EARLIER_ATTEMPTS_FILE_LEFT_IN_AN_HOUR,
                   "given-up plan's file left in an hour": GIVEN_UP_PLANS_FILE_LEFT_IN_AN_HOUR,
                   "finalized hour never announced": FINALIZED_HOUR_NEVER_ANNOUNCED,
                   "rebuild forgot a finalized hour": REBUILD_FORGOT_A_FINALIZED_HOUR}


# in a parsed table group's world (--shape parsed seed 25, and the run after it): X_dlq
# archived, then topic X appears; X_dlq was held and X's dead letters went into X_dlq's
# table: every commit of the group failed ("does not fit table sim.v_dlq")
DEAD_LETTER_TABLE_NAME_TAKEN_BY_AN_ARCHIVED_TOPIC = [
    ("create_topic", "v_dlq", 2), ("produce", "v_dlq", 0, 2, False, 0),
    ("run", "scheduled__2026-01-01T00:18:00+00:00", 0, 0, 0), ("create_topic", "v", 1),
    ("produce", "v", 0, 5, False, 0), ("run", "scheduled__2026-01-01T00:30:00+00:00", 0, 0, 0)]


# the soak's (seed 8002051): topic t archived (a dead letter in t_dlq's table), deleted from
# Kafka, then a topic t_dlq: the pair was not seen, and t_dlq would write t's dead letters' table
DEAD_LETTER_TABLE_OF_A_DELETED_TOPIC = [
    ("produce", "t", 1, 4, False, 0), ("run", "scheduled__2026-01-01T00:16:00+00:00", 0, 0, 0),
    ("delete_topic", "t"), ("create_topic", "t_dlq", 1)]
# the third soak, seed 10004703: topic t planned, deleted before its job, its slice recorded
# as lost: the catalog knew t (a loss, no row, no table), and the name rule held t_dlq as
# t's dead-letter table for good
DEAD_LETTER_NAME_HELD_FOR_A_TOPIC_NEVER_ARCHIVED = [
    ("create_topic", "t_dlq", 2), ("produce", "t_dlq", 1, 5, False, 0),
    ("produce", "t", 0, 1, False, 0), ("run", "scheduled__2026-01-01T00:19:00+00:00", 7, -1, 0),
    ("delete_topic", "t")]
# the 60-minute soak of all shapes, seed 14000943: a compaction killed inside its second
# table's replace (its record written), a day later the orphan sweep took the compacted
# files no snapshot read yet; the next compaction, finishing the record, found them gone
COMPACTIONS_FILES_SWEPT_BEFORE_IT_FINISHED = [
    ("produce", "t", 1, 4, False, 0), ("produce", "t", 1, 5, True, 0),
    ("run", "scheduled__2026-01-01T00:02:00+00:00", 0, 0, 0),
    ("run", "scheduled__2026-01-01T00:06:00+00:00", 0, 0, 0), ("compact", 3, 10),
    ("maintain", 9)]
# issue 56, found by the 60-minute soak (seed 305435): maintenance committed to a
# dead-letter table between a commit's creation of it and the commit's setting of its
# name mapping; the lost compare-and-swap escaped as pyiceberg's CommitFailedException
# (unclassified: no retry) instead of being read again and set again
TABLE_PROPERTY_RACING_MAINTENANCE = [
    ("produce", "u", 0, 7, False, 0), ("run", "scheduled__2026-01-01T02:08:00+00:00", 0, 0, 2),
    ("race", "scheduled__2026-01-01T02:09:00+00:00", "plan", 4, "compact", "u", False, 0),
    ("race", "scheduled__2026-01-01T02:09:00+00:00", "commit", 5, "maintain", "t", False, 11)]
# issue 56, the 60-minute soak (seed 505851): a person deleted the in-flight mark, then the
# run's commit went ahead while the orphan sweep ran: the sweep, seeing no run in flight,
# deleted the run's dead-letter file, and the commit then put it in the table
COMMITS_FILE_SWEPT_AFTER_ITS_MARK_WAS_DELETED = [
    ("produce", "u", 0, 4, False, 0), ("run", "scheduled__2026-01-01T01:11:00+00:00", 0, -1, 0),
    ("task", "scheduled__2026-01-01T01:11:00+00:00", "job", 0),
    ("race", "scheduled__2026-01-01T04:17:00+00:00", "plan", 2, "compact", "t", False, 0),
    ("remove_inflight",),
    ("race", "scheduled__2026-01-01T04:17:00+00:00", "commit", 6, "maintain", "t", False, 0)]
# in an audited group's world (--shape audit), each red before its fix
AUDIT_JUDGED_A_COMMIT_CUT_SHORT = [  # seed 10: tokens moved, the catalog not yet: MISSING
    ("send", "p1", "t", 1, 6, False), ("run", "scheduled__2026-01-01T00:13:00+00:00", 0, 0, 0),
    ("send", "p2", "t", 1, 3, False), ("run", "scheduled__2026-01-01T00:27:00+00:00", 0, 0, 2),
    ("audit", "scheduled__2026-01-01T00:29:00+00:00", 0, False)]
RESCAN_FINDING_LOST_TO_A_PENDING_RESCAN = [  # seed 202: then judged OK by the catalog
    ("send", "p1", "u", 0, 5, False), ("run", "scheduled__2026-01-01T00:08:00+00:00", 0, 0, 0),
    ("delete_file", "u"), ("send", "p2", "u", 0, 7, False),
    ("audit", "scheduled__2026-01-01T00:22:00+00:00", 0, True),
    ("run", "scheduled__2026-01-01T00:23:00+00:00", 0, 1, 0),
    ("audit", "scheduled__2026-01-01T00:25:00+00:00", 0, True)]
RESCAN_FINDING_LOST_TO_A_LATE_COUNT = [  # seed 189 (with storage faults drawn): the plain
    # audit judged the window by the catalog again once only the producers' count grew
    ("send", "p1", "u", 0, 7, False, 0), ("run", "scheduled__2026-01-01T00:01:00+00:00", 0, 0, 0),
    ("run", "scheduled__2026-01-01T00:02:00+00:00", 0, 0, 0), ("delete_file", "u"),
    ("torn", "scheduled__2026-01-01T00:01:00+00:00", "job", 6), ("remove_inflight",),
    ("clear_run", "scheduled__2026-01-01T00:02:00+00:00", 0),
    ("task", "scheduled__2026-01-01T00:01:00+00:00", "commit", 0),
    ("send", "p2", "t", 0, 6, False, 0), ("produce", "t", 0, 3, True, 0), ("retention", "u", 0, 3),
    ("run", "scheduled__2026-01-01T00:11:00+00:00", 0, 0, 0), ("break_token", "t"),
    ("run", "scheduled__2026-01-01T00:13:00+00:00", 0, 0, 0), ("send", "p1", "t", 1, 3, False, 0),
    ("run", "scheduled__2026-01-01T00:15:00+00:00", 0, 0, 0),
    ("audit", "scheduled__2026-01-01T00:16:00+00:00", 0, True), ("produce", "t", 1, 6, False, 0),
    ("send", "p1", "u", 0, 2, False, 0), ("send", "p1", "u", 0, 1, False, 19),
    ("audit", "scheduled__2026-01-01T00:28:00+00:00", 0, False)]
AUDIT_JUDGED_THE_TOPIC_OF_A_PLAN_GIVEN_UP_BY_HAND = [  # seed 23: MISSING though the next
    # plan puts back what its commit moved (the mark deleted by hand, the note not yet
    # taken up): the audit waits on its topics as on a plan in flight
    ("send", "p2", "u", 0, 7, False, 0), ("retention", "u", 0, 5),
    ("send", "p2", "t", 1, 8, False, 0), ("run", "scheduled__2026-01-01T00:11:00+00:00", 0, 0, 1),
    ("task", "scheduled__2026-01-01T00:11:00+00:00", "commit", 7), ("remove_inflight",),
    ("audit", "scheduled__2026-01-01T00:16:00+00:00", 0, False)]
ANNOUNCEMENT_RECORD_LANDED_BUT_FAILED = [  # seed 372: the record that the Asset events go
    # out landed and was reported failed: the task failed (so its events never went out)
    # and every retry found them recorded as sent
    ("send", "p1", "t", 1, 8, False, 0), ("produce", "u", 0, 8, False, 0),
    ("run", "scheduled__2026-01-01T00:04:00+00:00", 0, 0, 0),
    ("run", "scheduled__2026-01-01T00:08:00+00:00", 0, 4, 0),
    ("run", "scheduled__2026-01-01T00:10:00+00:00", 0, 1, 0),
    ("task", "scheduled__2026-01-01T00:10:00+00:00", "job", 0),
    ("storage_fault", "scheduled__2026-01-01T00:10:00+00:00", "commit", 8, "lands"),
    ("task", "scheduled__2026-01-01T00:10:00+00:00", "commit", 0)]
# (seed 180) a transaction left open, then an audited producer's message behind it: the
# partition was caught up to its last stable offset, so the audit took the topic as
# archived up to now and judged the window MISSING
AUDIT_JUDGED_A_WINDOW_AN_OPEN_TRANSACTION_HOLDS_BACK = [
    ("transaction", "u", 0, 4), ("send", "p1", "u", 0, 1, False, 0), ("time", 5),
    ("audit", "scheduled__2026-01-01T00:22:00+00:00", 0, False)]
# (the 60-minute soak, seed 601676) the same behind retention: the token below Kafka's
# earliest offset, which is the last stable offset, counted as lagging with nothing to
# read, so as archived up to now
AUDIT_JUDGED_A_WINDOW_HELD_BACK_BEHIND_RETENTION = [
    ("produce", "u", 0, 6, False, 0), ("transaction", "u", 0, 6),
    ("race", "scheduled__2026-01-01T00:21:00+00:00", "plan", 4, "retention", "u", False, 6),
    ("send", "p1", "u", 0, 9, False, 0), ("run", "scheduled__2026-01-01T00:28:00+00:00", 0, 0, 0),
    ("audit", "scheduled__2026-01-01T00:29:00+00:00", 0, False)]
# (the 30-minute soak, seed 702000) the same behind an aborted transaction: the token
# below the last stable offset with only aborted offsets between, counted as lagging with
# nothing to read, so as archived up to now
AUDIT_JUDGED_A_WINDOW_HELD_BACK_BEHIND_AN_ABORTED_TRANSACTION = [
    ("abort", "u", 0, 9), ("run", "scheduled__2026-01-01T00:08:00+00:00", 0, 0, 0),
    ("transaction", "u", 0, 9), ("send", "p1", "u", 0, 8, False, 0),
    ("audit", "scheduled__2026-01-01T00:16:00+00:00", 0, False),
    ("audit", "scheduled__2026-01-01T00:17:00+00:00", 0, False)]
# (audit seeds 64, 78, 86 and 157, with generations turned on in the audit world) a new
# generation with the token deleted, the remedy a held topic's mail names, archives again
# what Kafka still holds; both generations' rows stay current, and the audit counted a
# message each holds twice: a false EXCESS, mailed
AUDIT_COUNTS_A_MESSAGE_TWO_GENERATIONS_HOLD_TWICE = [
    ("send", "p2", "t", 1, 1, False, 0), ("run", "scheduled__2026-01-01T00:16:00+00:00", 0, 0, 0),
    ("setting", "generation", 1), ("delete_token", "t")]
# (seed 124) the same where a person deleted the older generation's file: the run that
# archives the messages again cannot compare them with it, yet the catalog still names
# it, so they counted twice
AUDIT_COUNTS_A_MESSAGE_TWICE_BESIDE_A_DELETED_FILE = [
    ("send", "p2", "u", 0, 4, False, 0), ("run", "scheduled__2026-01-01T00:06:00+00:00", 0, 0, 5),
    ("setting", "generation", 1), ("run", "scheduled__2026-01-01T00:15:00+00:00", 0, 0, 0),
    ("delete_file", "u")]
# an unclean election cut two archived messages and others took their offsets; a new
# generation with the token deleted archives the partition again: its first two messages
# are the older generation's, the next two are not (none was red: it guards the job's
# comparison, which a mutant that takes every overlap as the same message breaks)
ELECTION_THEN_A_NEW_GENERATION = [
    ("send", "p1", "u", 0, 4, False, 0), ("run", "scheduled__2026-01-01T00:06:00+00:00", 0, 0, 0),
    ("truncate", "u", 0, 2), ("send", "p2", "u", 0, 3, False, 0), ("setting", "generation", 1),
    ("delete_token", "u"), ("run", "scheduled__2026-01-01T00:15:00+00:00", 0, 0, 0),
    ("audit", "scheduled__2026-01-01T00:29:00+00:00", 0, False)]


def test_the_audit_finds_an_elections_other_message_beside_an_older_generations(tmp_path):
    result = explore.run_steps(ELECTION_THEN_A_NEW_GENERATION, tmp_path / "world", shape="audit")
    assert result.violation is None, explore.report(result)
    audited = [line for line in result.trace if "audit scheduled__2026-01-01T00:29" in line]
    assert audited and "'OK': 2" in audited[0] and "'MISSING': 0" in audited[0]


FOUND_IN_AUDITS = {"audit judged a commit cut short": AUDIT_JUDGED_A_COMMIT_CUT_SHORT,
                   "audit judged a window held back behind an aborted transaction":
                       AUDIT_JUDGED_A_WINDOW_HELD_BACK_BEHIND_AN_ABORTED_TRANSACTION,
                   "audit judged a window held back behind retention":
                       AUDIT_JUDGED_A_WINDOW_HELD_BACK_BEHIND_RETENTION,
                   "audit judged a window an open transaction holds back":
                       AUDIT_JUDGED_A_WINDOW_AN_OPEN_TRANSACTION_HOLDS_BACK,
                   "audit judged the topic of a plan given up by hand":
                   AUDIT_JUDGED_THE_TOPIC_OF_A_PLAN_GIVEN_UP_BY_HAND,
                   "announcement record landed but failed": ANNOUNCEMENT_RECORD_LANDED_BUT_FAILED,
                   "rescan's finding lost to a pending rescan":
                   RESCAN_FINDING_LOST_TO_A_PENDING_RESCAN,
                   "rescan's finding lost to a late count": RESCAN_FINDING_LOST_TO_A_LATE_COUNT,
                   "audit counts a message two generations hold twice":
                   AUDIT_COUNTS_A_MESSAGE_TWO_GENERATIONS_HOLD_TWICE,
                   "audit counts a message twice beside a deleted file":
                   AUDIT_COUNTS_A_MESSAGE_TWICE_BESIDE_A_DELETED_FILE}


# issue 56, Kafka's log cleaner in a parsed table's world (seed 3230): a rewind over
# offsets the cleaner removed since they were archived; a parsed table keeps no message
# bytes, so its rewind copies the rows of the files it replaces (archive.earlier)
PARSED_REWIND_OVER_A_COMPACTED_LOG = [
    ("produce", "u", 0, 7, False, 0), ("run", "scheduled__2026-01-01T00:46:00+00:00", 0, 0, 0),
    ("compact_log", "u", 0, 5),
    ("race", "scheduled__2026-01-02T00:59:00+00:00", "plan", 2, "accept_loss", "u", True, 9)]


FOUND_IN_PARSED = {"table property set racing maintenance": TABLE_PROPERTY_RACING_MAINTENANCE,
                   "rewind over a compacted log": PARSED_REWIND_OVER_A_COMPACTED_LOG,
                   "commit's file swept after its mark was deleted":
                   COMMITS_FILE_SWEPT_AFTER_ITS_MARK_WAS_DELETED,
                   "compaction's files swept before it finished":
                   COMPACTIONS_FILES_SWEPT_BEFORE_IT_FINISHED,
                   "dead-letter table name taken by an archived topic":
                   DEAD_LETTER_TABLE_NAME_TAKEN_BY_AN_ARCHIVED_TOPIC,
                   "dead-letter table of a deleted topic": DEAD_LETTER_TABLE_OF_A_DELETED_TOPIC,
                   "dead-letter name held for a topic never archived":
                   DEAD_LETTER_NAME_HELD_FOR_A_TOPIC_NEVER_ARCHIVED}

# in the S3 world (--shape s3): the 60-minute soak of fc28959's library, seed 802127, red
# with the simulation's own read of the mark inside the task's storage faults (a 503 the
# task never met made the world think its announced commit had failed)
FOUND_IN_S3 = {"a storage fault on the simulation's own read": [
    ("produce", "u", 0, 8, False, 0), ("run", "scheduled__2026-01-01T00:04:00+00:00", 0, 0, 10),
    ("storage_fault", "scheduled__2026-01-01T00:04:00+00:00", "commit", 18, "error"),
    ("race", "scheduled__2026-01-01T00:04:00+00:00", "commit", 8, "rewind", "u", False, 0)]}

# every kept sequence, in the world it was found in (red before its fix)
KEPT = [(shape, name, steps) for shape, found in (
    ("files", FOUND), ("tables", FOUND_IN_TABLES), ("events", FOUND_IN_EVENTS),
    ("parsed", FOUND_IN_PARSED), ("audit", FOUND_IN_AUDITS), ("s3", FOUND_IN_S3))
    for name, steps in found.items()]


@pytest.mark.parametrize("shape, steps", [(shape, steps) for shape, _, steps in KEPT],
                         ids=[f"{shape}: {name}" for shape, name, _ in KEPT])
def test_a_found_sequence_now_keeps_every_invariant(shape, steps, tmp_path):
    result = explore.run_steps(steps, tmp_path / "world", shape=shape)
    assert result.violation is None, explore.report(result)


def test_the_table_check_finds_the_old_name_rule(tmp_path):
    """With the rule before (X_dlq held whichever came first), the found sequence sticks
    the group again (its offset 3 is no JSON: a dead letter)."""
    from kafka_archive.plan import runs

    names_taken = runs._names_taken
    with patch.object(runs, "_names_taken", lambda group, topics, archived:
                      names_taken(group, topics, set())):
        result = explore.run_steps(DEAD_LETTER_TABLE_NAME_TAKEN_BY_AN_ARCHIVED_TOPIC,
                                   tmp_path / "world", shape="parsed")
    assert result.violation is not None and result.violation.kind == "stuck", \
        explore.report(result)
    assert "does not fit table sim.v_dlq" in str(result.violation)


def test_the_table_check_finds_a_plan_that_ignores_the_compaction_lease(tmp_path):
    """With a plan that marks itself and goes on whatever the compaction lease says, the
    found sequence sticks the group: the rewind's commit added its rows beside the
    compacted file, and the killed compaction can never be finished."""
    from kafka_archive.plan import inflight, runs

    def mark_only(storage, config, group, run_id, plan_url, read_at=None):
        inflight.mark(storage, config.archive_root, group.name, run_id, plan_url)

    _sticks_the_table_group(patch.object(runs, "_mark", mark_only), COMPACTION_KILLED_THEN_A_REWIND,
                            "changed in the catalog after the compaction's tables did", tmp_path)


def test_the_table_check_finds_a_plan_that_ignores_a_compaction_done_while_it_planned(tmp_path):
    """With the mark's check of the lease only (not of the catalog's log since the plan
    read it), the race's rewind adds its rows beside the compacted file."""
    from kafka_archive.plan import runs

    real = runs._give_way_if_moved
    with patch.object(runs, "_give_way_if_moved", lambda storage, config, group, run_id,
                      plan_url, read_at, **kw: real(storage, config, group, run_id, plan_url,
                                                    None, **kw)):
        result = explore.run_steps(PLAN_RACING_A_COMPACTION, tmp_path / "world", shape="tables")
    assert result.violation is not None and result.violation.kind == "table disagrees", \
        explore.report(result)
    assert "compaction.sim1/" in str(result.violation)


def test_the_loss_check_finds_a_loss_reported_for_what_the_archive_holds(tmp_path):
    """With the line below Kafka's earliest offset taken as the loss's start (the rule
    before), the rewind's run reports offsets the archive holds as lost."""
    from kafka_archive.plan import losses

    with patch.object(losses, "lost_spans", lambda cat, t, p, token, earliest: [(token, earliest)]):
        result = explore.run_steps(REWIND_THEN_RETENTION_NO_LOSS, tmp_path / "world")
    assert result.violation is not None and result.violation.kind == "false loss", \
        explore.report(result)
    assert "[0, 5) are in the archive" in str(result.violation)


# retention deletes partition u/0's head while its first run is planned: the commit must
# still write the partition's line (at the slice's start), or the next run starts it anew
RETENTION_DURING_A_NEW_PARTITIONS_FIRST_RUN = [
    ("produce", "u", 0, 9, False, 0),
    ("race", "scheduled__2026-01-01T00:11:00+00:00", "plan", 3, "accept_loss", "u", True, 0),
    ("retention", "u", 0, 1)]


def test_the_decided_check_finds_a_commit_that_leaves_a_lost_heads_partition_out(tmp_path):
    """With a slice whose head retention deleted during the job left out of the token's
    lines (a `continue` without its end), the commit leaves the new partition undecided."""
    from kafka_archive.commit import protocol

    real = protocol.verify

    def forgetting_lost_heads(plan, manifest, size_of):
        lost = {(a["topic"], a["partition"]) for a in manifest.get("retention_lost", ())}
        return {k: v for k, v in real(plan, manifest, size_of).items() if k not in lost}

    with patch.object(protocol, "verify", forgetting_lost_heads):
        result = explore.run_steps(RETENTION_DURING_A_NEW_PARTITIONS_FIRST_RUN, tmp_path / "world")
    assert result.violation is not None and result.violation.kind == "undecided", \
        explore.report(result)
    assert "without deciding partition 0" in str(result.violation)
    assert explore.run_steps(RETENTION_DURING_A_NEW_PARTITIONS_FIRST_RUN,
                             tmp_path / "again").violation is None


def test_the_announcement_check_finds_a_retried_commit_that_announces_nothing(tmp_path):
    """With the rule before (a commit found committed announces nothing: as if its outbox
    said all was sent), the retry of a commit killed before its mail succeeds unannounced."""
    from tests.support.sim import world

    real = world.SimStorage.get_or_none

    def announced_already(storage, url):
        return b'{"mail": true, "events": true}' if url.endswith("/announced.json") \
            else real(storage, url)

    with patch.object(world.SimStorage, "get_or_none", announced_already):
        result = explore.run_steps(COMMIT_KILLED_BEFORE_ITS_ANNOUNCEMENT, tmp_path / "world")
    assert result.violation is not None and result.violation.kind == "unannounced", \
        explore.report(result)


def test_the_liveness_check_finds_maintenance_that_never_settles_a_compaction(tmp_path):
    """With the rule before (a compaction's snapshot settled only by a committed.json none
    writes), a compacted table is never maintained: the drain's maintenance check says so."""
    from kafka_archive.commit import table_maintenance
    from kafka_archive.commit.iceberg import RUN_ID
    from kafka_archive.plan import runs

    def old_rule(table, storage, config, group, topic):
        table.refresh()
        run_id = table.current_snapshot().summary.get(RUN_ID)
        return run_id is None or runs.is_final(runs.stored_outcome(
            storage, config.archive_root, group, run_id))

    _sticks_the_table_group(patch.object(table_maintenance, "settled", old_rule),
                            COMPACTED_TABLE_NEVER_MAINTAINED,
                            "maintenance with nothing in flight waits for table", tmp_path)


def test_the_lease_check_finds_a_release_of_a_lease_taken_over_meanwhile(tmp_path):
    """With the release before (read the lease, then delete it if it names us), the
    successor's lease is deleted (and its half-done compaction never finished: the table
    check found that first, before the lease check)."""
    from kafka_archive.catalog import lease

    def read_then_delete(storage, url, token, version):
        if (lease.parsed(storage.get_or_none(url)) or {}).get("token") == token:
            storage.delete(url)

    with patch.object(lease, "_release", read_then_delete):
        result = explore.run_steps(RELEASE_AFTER_A_TAKEOVER, tmp_path / "world", shape="tables")
    assert result.violation is not None and result.violation.kind == "lease", \
        explore.report(result)
    assert "was deleted by" in str(result.violation)


def _sticks_the_table_group(old_rule, steps: list[tuple], saying: str, tmp_path) -> None:
    """With the old rule patched in, the kept sequence sticks the table group, so saying."""
    with old_rule:
        result = explore.run_steps(steps, tmp_path / "world", shape="tables")
    assert result.violation is not None and result.violation.kind == "stuck", \
        explore.report(result)
    assert saying in str(result.violation)


def _failure_key_with_run_ids(task_id, error_class, error, run_ids):
    return f"{task_id} {error_class} {sorted(r for r in run_ids if r)} {error}"


def _launched_keeping_earlier_records(storage, plan_url, launch, launch_failed=Exception):
    real = storage.delete
    storage.delete = lambda url: None if url == job.failure_url(plan_url) else real(url)
    try:
        _LAUNCHED(storage, plan_url, launch, launch_failed)
    finally:
        del storage.delete


def _planned_only_with_anomalies(self, plan, run_id, now):
    if plan.anomalies:
        _PLANNED(self, plan, run_id, now)


_LAUNCHED, _PLANNED = job.launched, mailing.Mailings.planned
# the mail rules as they were before issue 41, each with what the simulation found with it
OLD_MAIL_RULES = {
    "failure mailed per run": (
        lambda: patch.object(mailing, "failure_key", _failure_key_with_run_ids),
        FAILURE_MAILED_PER_RUN, "mail"),
    "earlier attempt's failure raised again": (
        lambda: patch.object(job, "launched", _launched_keeping_earlier_records),
        EARLIER_ATTEMPTS_FAILURE_RAISED_AGAIN, "wrong cause"),
    "held topic never mailed again": (
        lambda: patch.object(mailing.Mailings, "planned", _planned_only_with_anomalies),
        HELD_TOPIC_NEVER_MAILED_AGAIN, "mail"),
}


@pytest.mark.parametrize("rule", OLD_MAIL_RULES, ids=OLD_MAIL_RULES.keys())
def test_the_mail_checks_find_each_old_rule(rule, tmp_path):
    """With the old rule put back, its sequence breaks the mail invariant it broke when
    the simulation found it (and keeps every invariant with today's: FOUND)."""
    old_rule, steps, kind = OLD_MAIL_RULES[rule]
    with old_rule():
        result = explore.run_steps(steps, tmp_path / "world")
    assert result.violation is not None and result.violation.kind == kind, explore.report(result)


def test_the_checks_can_fail(tmp_path):
    """The invariants see a lost file: one deleted by hand from under the catalog."""
    world = World(tmp_path / "world")
    world.step(("produce", "t", 0, 3, False))
    world.step(("run", "r1", 0, 0, 0))
    world.check()
    [url] = [f"file://{p}" for p in (tmp_path / "world" / "archive" / "backup").rglob("*.seq")]
    (tmp_path / "world" / "archive" / "backup" / url.split("/backup/", 1)[1]).unlink()
    with pytest.raises(Violation, match="file missing"):
        world.check()
    # and verify, reading the files, says so too (invariant 5)
    report = verify.verify_group(world.config, "backup", Storage(), world.tokens, files=True)
    assert [e.message for e in report.errors()] == [f"{url}: unreadable: cannot read archived "
                                                    f"file {url}: it is not there"]


def test_the_s3_world_finds_a_listing_that_reads_one_page(tmp_path):
    """Its listings come in pages of a few keys: a client that read only the first page
    of each would leave files and tokens unseen, and the invariants say so."""
    import itertools

    import botocore.paginate

    every_page = botocore.paginate.PageIterator.__iter__
    with patch.object(botocore.paginate.PageIterator, "__iter__",
                      lambda pages: itertools.islice(every_page(pages), 1)):
        assert _first_violation(tmp_path, "s3", seeds=8) is not None


def test_the_change_check_finds_a_commit_that_overwrites_a_persons_rewind(tmp_path):
    """An S3 compare-and-swap without its If-Match: a commit planned before a person's
    rewind or delete writes its token over that change."""
    from kafka_archive import storage

    def unconditional(client, url, data, expected_version, content_type=""):
        bucket, key = storage.split_s3_url(url)
        return client.put_object(Bucket=bucket, Key=key, Body=data)["ETag"]
    with patch.object(storage, "s3_compare_and_swap", unconditional):
        found = explore.run_steps(TOKEN_DELETED_UNDER_A_STALLED_JOB, tmp_path / "world",
                                  shape="s3")
    assert found.violation and found.violation.kind == "change undone", found.violation


# (seed 19, the unconditional write above) a run whose job fails to launch, its token deleted
TOKEN_DELETED_UNDER_A_STALLED_JOB = [
    ("race", "scheduled__2026-01-01T00:10:00+00:00", "commit", 7, "rewind", "t", False, 0),
    ("produce", "t", 0, 7, False, 0), ("clear_run", "scheduled__2026-01-01T00:10:00+00:00", 0),
    ("run", "scheduled__2026-01-01T00:21:00+00:00", 0, -1, 0), ("delete_token", "t")]


def _first_violation(tmp_path, shape: str, seeds: int):
    """The first of seeds 0..seeds-1 whose sequence breaks an invariant, or None."""
    return next((r for seed in range(seeds) if (r := explore.explore(
        seed, tmp_path / "world", shape=shape)).violation), None)


def test_the_table_check_can_fail(tmp_path):
    """A table group's world sees a table that no longer reads a file the catalog names
    current (taken out of the table behind the archive's back)."""
    from kafka_archive.commit import iceberg

    world = World(tmp_path / "world", "tables")
    world.step(("produce", "t", 0, 3, False))
    world.step(("run", "r1", 0, 0, 0))
    world.check()
    table = world.tables.table("tables", "t")
    [current] = [task.file.file_path for task in table.scan().plan_files()]
    iceberg.commit_run(table, "by-hand", add=[], remove=[current])
    with pytest.raises(Violation, match="table disagrees"):
        world.check()


REPLAY_SEQUENCES = 300  # ~10 s: a replay's sequence is a handful of steps


def test_no_replay_sequence_breaks_its_invariants():
    """Issue 41 §4: a replay into a target that refuses some messages, killed at any
    progress write or delivery, the setting fixed, run again: the target always holds a
    prefix of the sequence, and all of it once the setting is fixed."""
    reports = explore.explore_replays(0, REPLAY_SEQUENCES)
    assert not reports, "\n\n".join(reports[:3])


def test_the_replay_check_can_fail():
    """Without the check before each send (the refusal learnt from delivery reports
    only, as before issue 41), messages after a refused one land: a gap."""
    from unittest.mock import patch

    from kafka_archive.archive import replay_job

    with patch.object(replay_job, "refused_by", lambda *args: None):
        reports = explore.explore_replays(0, 60)
    assert any("not a prefix" in r.splitlines()[0] for r in reports), reports[:1]


def test_each_planted_mutant_still_finds_its_code():
    """A mutant whose text the library no longer has plants nothing, and its score says
    nothing: each must be in its file exactly once (mutants.Mutant.old)."""
    from tests.support.sim import mutants

    for mutant in mutants.MUTANTS:
        text = (mutants.LIBRARY / "kafka_archive" / mutant.path).read_text()
        assert text.count(mutant.old) == 1, (mutant.name, mutant.path, text.count(mutant.old))


def test_a_partition_without_a_leader_holds_its_topic_and_the_others_go_on(tmp_path):
    """One partition offline (issue 56): its topic is held, mailed once, and archived once
    Kafka serves it again; the group's other topics are archived meanwhile."""
    world = World(tmp_path / "world")
    for step in [("produce", "t", 0, 3, False, 0), ("produce", "u", 0, 2, False, 0),
                 ("offline", "u", 0, True), ("run", "scheduled__2026-01-01T00:05:00+00:00", 0, 0, 0),
                 ("produce", "t", 0, 1, False, 0),
                 ("run", "scheduled__2026-01-01T00:10:00+00:00", 0, 0, 0)]:
        world.step(step)
    assert world._token("t").offsets == {0: 4} and world._token("u") is None
    [mail] = world.mailbox  # once, though both runs held it
    assert mail.about == ("unavailable u -1 0",) and "u left out" in mail.subject
    assert "u: Kafka gives no offsets of this topic (a partition without a leader?)" in mail.html
    assert "once Kafka serves its every partition again" in mail.html
    world.step(("offline", "u", 0, False))
    world.step(("run", "scheduled__2026-01-01T00:15:00+00:00", 0, 0, 0))
    assert world._token("u").offsets == {0: 2}
    world.check(final=True)






@pytest.mark.parametrize("shape", ["files", "events", "tables", "parsed"])
def test_a_found_rewind_over_an_election_is_held_naming_the_reused_offset(tmp_path, shape):
    result = explore.run_steps(REWIND_OVER_AN_ELECTION_THE_ARCHIVE_WENT_ON_PAST,
                               tmp_path / "world", shape=shape)
    held = [line for line in result.trace if "HeldTopicsError" in line]
    assert held and "Kafka holds another message at offset 3 than the archive does" in held[0]


# the 47-minute soak of 9e3b5c1 (s3 seed 902376): a rewind's plan in flight, then an
# unclean election cut the whole partition and new messages took its offsets; the plan
# re-executed archived Kafka's new messages over the replaced rows, and an archived
# message was in no current row
REWIND_IN_FLIGHT_ACROSS_AN_ELECTION = [
    ("produce", "u", 0, 3, False, 0), ("run", "scheduled__2026-01-01T00:05:00+00:00", 0, 0, 0),
    ("delete_token", "u"), ("storage_fault", "scheduled__2026-01-01T00:15:00+00:00", "plan", 6,
                            "lands"),
    ("truncate", "u", 0, 7), ("produce", "u", 0, 2, False, 0)]
# the same, Kafka written past the archived end after the election: only the replaced
# row's last message tells (the job read Kafka's messages at every offset, and archived
# them over the archived ones)
REWIND_IN_FLIGHT_ACROSS_AN_ELECTION_WRITTEN_PAST = REWIND_IN_FLIGHT_ACROSS_AN_ELECTION[:-1] + [
    ("produce", "u", 0, 5, False, 0)]
# the 47-minute soak's parsed seed 900854: after start_from: latest, a rewind capped by
# max_records and a token restored from two versions back, verify called the offset of a
# transaction's marker below the token, which no slice covered, a hole
MARKER_BELOW_A_RESTORED_TOKEN = [
    ("run", "scheduled__2026-01-01T00:00:00+00:00", 0, 0, 0), ("produce", "t", 0, 6, True, 0),
    ("setting", "start_from", "latest"), ("clear_run", "scheduled__2026-01-01T00:00:00+00:00", 0),
    ("race", "scheduled__2026-01-01T00:08:00+00:00", "plan", 3, "compact", "t", True, 0),
    ("run", "scheduled__2026-01-01T01:14:00+00:00", 0, 0, 0), ("restore_token", "t", 2)]


@pytest.mark.parametrize("shape", ["s3", "files", "tables"])
def test_a_rewind_in_flight_across_an_election_finds_the_other_messages(tmp_path, shape):
    """The job's look finds Kafka's other messages: the slice archives nothing, the rows
    it was to replace stay current, and the topic is held (mailed) for a new generation."""
    result = explore.run_steps(REWIND_IN_FLIGHT_ACROSS_AN_ELECTION, tmp_path / "world",
                               shape=shape)
    assert result.violation is None, explore.report(result)
    world = World(tmp_path / "again", shape)
    try:
        for step in REWIND_IN_FLIGHT_ACROSS_AN_ELECTION + [
                ("run", "scheduled__2026-01-01T00:20:00+00:00", 0, 0, 0)]:
            world.step(step)
        [mail] = [m for m in world.mailbox if m.about == ("offsets_reused u 0 1",)]
        assert "u partition 0: Kafka holds another message at offset 1" in mail.html
        assert world._token("u").offsets == {0: 3}  # the end of the rows kept, not Kafka's 2
        world.check(final=True)
    finally:
        world.close()  # (the s3 world's in-process S3 answers every client until then)


@pytest.mark.parametrize("shape", ["s3", "files", "tables", "events", "parsed", "registry"])
def test_a_rewind_in_flight_across_an_election_written_past_finds_the_other_messages(
        tmp_path, shape):
    """Also a parsed table's job (the 60-minute soak's registry seed 1002110: its rows
    keep fields, and the job archived Kafka's other messages over them)."""
    result = explore.run_steps(REWIND_IN_FLIGHT_ACROSS_AN_ELECTION_WRITTEN_PAST,
                               tmp_path / "world", shape=shape)
    assert result.violation is None, explore.report(result)
    assert "job: archived 0 messages" in "\n".join(result.trace)


def test_verify_finds_no_hole_at_a_marker_below_a_restored_token(tmp_path):
    """verify asks Kafka about offsets no file holds that nothing recorded explains."""
    result = explore.run_steps(MARKER_BELOW_A_RESTORED_TOKEN, tmp_path / "world", shape="parsed")
    assert result.violation is None, explore.report(result)
