"""Which alerts are mailed, and when: once per incident, again when it comes back.

The records live beside the group's runs (`layout.anomalies_mailed`, `layout.failures_mailed`)
so every task process, retry and later run sees what was mailed. `Mailings` decides and
keeps those records; a `send` function delivers (Airflow's SMTP notifier in
kafka_archive.airflow.alerting, a mailbox in the protocol simulation), so the rules the
simulation checks are the ones deployed.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Callable, Iterable

from kafka_archive import layout
from kafka_archive.monitor.alerts import (Message, data_lost, failure_due, failure_key,
                                          tokens_left_as_found, topics_held, unmailed)
from kafka_archive.plan.planning import Anomaly, Plan
from kafka_archive.storage import Storage

log = logging.getLogger(__name__)

SEEN_RUNS = 200  # runs kept in the failures-seen note: far more than run at once


@dataclass
class Mailings:
    """The mails of one group. link(run_id): the run's page in the UI."""
    storage: Storage
    archive_root: str
    group: str
    send: Callable[[Message], None]
    link: Callable[[str], str]

    def planned(self, plan: Plan, run_id: str, now: datetime) -> None:
        """A new plan's anomalies: ranges lost to retention (held or skipped) and topics
        held for other reasons. Each is mailed once, however many runs see it again, and
        again when it comes back after a plan without it. Only a plan made now (at `now`)
        counts: one re-executed unchanged (an earlier run's, in flight, or this run's own
        stored one, a Clear of its plan task) is an old observation: it mails nothing and
        forgets nothing (what it did not mail, the next new plan sees and mails)."""
        if plan.run_id != run_id or plan.created_at != now.isoformat(timespec="seconds"):
            return
        # also with none: what it no longer sees is over, and mailed again if it comes back
        self._anomalies(run_id, plan.anomalies, forget_unseen=True)

    def committed(self, plan: Plan, summary: dict, late: list[Anomaly]) -> None:
        """A run committed (not a committed run's commit again): the tokens a person
        changed while it was in flight (left as found); failures mailed before are over
        (the next one is mailed again); what the job found after the plan was made (`late`):
        ranges retention deleted (the next plan sees the same ranges: they are not mailed
        again), a rewind's slice where Kafka holds other messages than the archive."""
        if left := summary["tokens_left_as_found"]:
            self.send(tokens_left_as_found(self.group, plan.run_id, left, self.link(plan.run_id)))
        url = layout.failures_mailed(self.archive_root, self.group)
        if self.storage.get_or_none(url) is not None:
            self.storage.delete(url)
        if late:
            self._anomalies(plan.run_id, late, forget_unseen=False)

    def task_failed(self, task_id: str, run_ids: Iterable[str | None], error_class: str | None,
                    error: str, now_s: float, message: Callable[[str | None], Message]) -> bool:
        """A task's failure, mailed unless the same failure (task, error class and text,
        whichever runs meet it) was mailed since the last commit, less than a day ago.
        message(since): the mail, `since` naming the run that first failed this way when
        it is a daily reminder. Whether it was sent."""
        run_ids = tuple(run_ids)  # read twice: the key, then the run named in the record
        key = failure_key(task_id, error_class, error, run_ids)
        url = layout.failures_mailed(self.archive_root, self.group)
        try:
            mailed = json.loads(self.storage.get_or_none(url) or b"{}")
        except Exception:  # S3 may be what failed: the mail matters more than its dedup
            log.exception("could not read which failures were mailed; mailing this one")
            mailed = None
        if mailed is not None and not failure_due(mailed, key, now_s):
            log.warning("not mailed again: the same failure was mailed for run %s (daily "
                        "reminders until a run commits)", mailed[key]["run_id"])
            return False
        first = (mailed or {}).get(key, {}).get("first_run")
        run_id = next(r for r in run_ids if r)
        self.send(dataclasses.replace(message(first), about=(key,)))
        if mailed is not None:
            mailed[key] = {"run_id": run_id, "first_run": first or run_id, "mailed_at_s": now_s}
            try:
                self.storage.put_bytes(url, json.dumps(mailed, indent=1, sort_keys=True).encode())
            except Exception:
                log.exception("could not record the mailed failure; the next run mails it again")
        return True

    def note_failure_seen(self, run_id: str) -> None:
        """A failed task's own callback handled this run's failure (mailed, or not for a
        reason): the DAG's callback mails nothing more for it. The last SEEN_RUNS runs."""
        url = layout.failures_seen(self.archive_root, self.group)
        seen = [r for r in json.loads(self.storage.get_or_none(url) or b"[]") if r != run_id]
        self.storage.put_bytes(url, json.dumps((seen + [run_id])[-SEEN_RUNS:]).encode())

    def failure_seen(self, run_id: str) -> bool:
        url = layout.failures_seen(self.archive_root, self.group)
        return run_id in json.loads(self.storage.get_or_none(url) or b"[]")

    def _anomalies(self, run_id: str, anomalies: list[Anomaly], forget_unseen: bool) -> None:
        """forget_unseen: a plan sees every open anomaly, so one it no longer sees is over
        (mailed again if it comes back); a commit sees only its own."""
        state_url = layout.anomalies_mailed(self.archive_root, self.group)
        mailed = json.loads(self.storage.get_or_none(state_url) or b"{}")
        new, seen = unmailed(anomalies, mailed, run_id)
        still_open = seen if forget_unseen else {**mailed, **seen}
        link = self.link(run_id)
        for action in ("failed", "skipped"):
            lost = [a for a in new if a.kind == "retention_gap" and a.action == action]
            if lost:
                self.send(data_lost(self.group, run_id, lost, action == "failed", link))
        if others := [a for a in new if a.kind != "retention_gap"]:
            self.send(topics_held(self.group, run_id, others, link))
        for a in anomalies:
            if a not in new:
                log.warning("already mailed: %s", a.describe())
        if still_open != mailed:
            self.storage.put_bytes(state_url,
                                   json.dumps(still_open, indent=1, sort_keys=True).encode())
