"""The audit in the simulation's world (--shape audit): audited producers that publish
their counts to the monitoring topic (audit.producer.AuditedProducer's events, a
producer killed before its count included), the audit DAG's real task bodies (ingest,
reconcile, mail: airflow.tasks), killed at a write or at the mail, rescans, and archived
files a person deletes. Checked against what the world knows was sent and archived:

- a finding (window, kind, amount) is mailed at most once;
- no EXCESS (the archive never holds a message twice, so more archived than counted is
  a producer's uncounted messages: UNAUDITED);
- each judged window's expected count is what producers published, its verdict what
  the catalog's rows hold (OK: all of it; MISSING: less, and what is missing is out of
  Kafka's reach: retention or a token moved past it);
- a window a rescan found short of files is never OK again while its files are short;
- at the end, no mismatch is left unmailed.
"""

from __future__ import annotations

import json
from collections import Counter
from unittest.mock import patch

from kafka_archive import catalog, layout
from kafka_archive.airflow import alerting, tasks
from kafka_archive.audit import incremental
from kafka_archive.audit.reconcile import MonitoringEvent
from kafka_archive.archive.archived_files import read_archived
from kafka_archive.formats import audit_counts
from kafka_archive.formats.records import fingerprint
from kafka_archive.manifest import row_files

WINDOW_MS = 60_000
GROUP = "audited"
SECTION = f"audit: {{groups: [{GROUP}], window: 60s, grace: 60s}}\n"
SOURCES = ("p1", "p2")


class AuditModel:
    def __init__(self, world):
        self.world = world
        self.sent: Counter = Counter()       # (topic, source, window) -> messages sent
        self.published: Counter = Counter()  # -> the count its producers published
        self.incarnation: dict[str, int] = {}  # source -> its producer (a kill: the next)
        self.seq: Counter = Counter()          # producer id -> its last event's seq
        self.mailed: Counter = Counter()       # (window key, status, amount) -> mails
        self.rescan_short: set = set()         # windows a rescan found short of files
        self.deleted_files: set[str] = set()   # archived files a person deleted
        # url -> (its size, the messages its file held: fingerprint and window key), read
        # again when its size changed (a rewind's file of the same name), kept when deleted
        self.in_file: dict[str, tuple[int, list[tuple]]] = {}
        self.killed_at_mail = False            # a kill between the record and the send
        # messages stamped minutes before the ones sent before them: the audit judges a
        # window by the first unarchived message's time (plus the grace), so one this late
        # behind others counts as MISSING until its run archives it (then resolved)
        self.late: set[tuple[str, int, int]] = set()

    @property
    def monitoring(self):
        [partition] = self.world.kafka.internal[self.world.config.audit.topic]
        return partition

    # --- steps ---------------------------------------------------------------------------

    def send(self, out, source: str, topic: str, partition: int, count: int, dies: bool,
             late_minutes: int = 0):
        """An audited producer sends count messages: the window's opening event, the
        messages (its source in their header), then their count, unless it is killed
        before publishing it (the source's next producer is a new one). late_minutes: the
        messages' timestamps are that old (a send retried, a buffer flushed late)."""
        kafka = self.world.kafka
        if topic in kafka.deleted or partition >= len(kafka.topics[topic]):
            return
        now_ms = self.world._now_ms() - late_minutes * 60_000
        window = now_ms - now_ms % WINDOW_MS
        producer = f"{source}/{self.incarnation.get(source, 1)}"
        self._publish(source, topic, window, 0, producer)
        p = kafka.topics[topic][partition]
        if late_minutes:
            self.late |= {(topic, partition, o) for o in range(p.end, p.end + count)}
        p.append(count, now_ms, False, source=source)
        self.sent[(topic, source, window)] += count
        if dies:
            self.incarnation[source] = self.incarnation.get(source, 1) + 1
            out.add(f"producer {producer} killed before it published its count of {count}")
            return
        self._publish(source, topic, window, count, producer)
        self.published[(topic, source, window)] += count

    def _publish(self, source, topic, window, count, producer) -> None:
        self.seq[producer] += 1
        event = MonitoringEvent(source, topic, window, WINDOW_MS, count, producer,
                                self.seq[producer])
        self.monitoring.append(1, self.world._now_ms(), False, value=event.to_json())

    def audit(self, out, run_id: str, rescan: bool) -> dict | None:
        """The audit DAG's run (airflow.dags.audit_dag): ingest, reconcile, and mail the
        new mismatches; the outcome (None: killed, as the caller's Crash says)."""
        w = self.world
        new: list[dict] = []

        def send(alerts_config, message, context=None):  # alerting.send: the mail
            w.faults.tick("the audit mail")
            for a in new:
                finding = ((a["topic"], a["source"], a["window_start_ms"]), a["status"],
                           a["expected"], a["archived"])
                self.mailed[finding] += 1
                if self.mailed[finding] > 1:
                    raise _violation("audit mailed twice", f"{a['status']} of topic "
                                      f"{a['topic']} source {a['source']} window "
                                      f"{a['window_start_ms']} was mailed again")

        with w._in_airflow(), patch.object(alerting, "send", send):
            tasks.audit_ingest(run_id)
            outcome = tasks.audit_reconcile(w.group, run_id, rescan=rescan)
            new += outcome["new"]
            if new:
                try:
                    tasks.audit_alert(outcome, f"audit run {run_id}", None)
                except BaseException:
                    self.killed_at_mail = True  # recorded, maybe never sent: as designed
                    raise
        out.add(f"audit {run_id}{' (rescan)' if rescan else ''}: {outcome['totals']}, "
                f"{len(new)} mailed")
        return outcome

    def delete_file(self, out, topic: str) -> None:
        """A person (or a bucket's lifecycle rule) deletes the topic's newest archived
        file: the catalog still names it; only a rescan sees it gone. (Not while a run is
        in flight: its job's files are not archived yet, and its commit refuses them
        missing, naming them.)"""
        if self.world.in_flight() or self.world.abandoned:
            return
        rows = [r for r in _rows(self.world) if r["topic"] == topic]
        files = [f["url"] for r in rows for f in row_files(r)
                 if self.world.plain.size(f["url"]) is not None]
        if not files:
            return
        url = max(files)
        partition = next(r["partition"] for r in rows for f in row_files(r) if f["url"] == url)
        self.world.destroyed.setdefault((topic, partition), set()).update(
            message[0] for message, _ in self._messages(topic, url))
        self.world.plain.delete(url)
        self.deleted_files.add(url)
        out.add(f"deleted {url.rsplit('/', 3)[-3:]}")

    # --- what the world knows ------------------------------------------------------------

    def gone(self, url: str) -> bool:
        """A file a person deleted and no run wrote again."""
        return url in self.deleted_files and self.world.plain.size(url) is None

    def check(self, run_id: str, rescan: bool) -> None:
        """The windows the audit run judged (its report.json's verdicts; the others keep
        a verdict checked when it was judged)."""
        w = self.world
        report = json.loads(w.plain.get_bytes(layout.audit_report(
            w.config.archive_root, w.group, run_id, "report.json")))
        windows = incremental.load(w.plain, w.config, w.group).windows
        held, in_files = self._archived()
        for status, _, topic, source, start, _, _, expected, archived in report["verdicts"]:
            if status in ("PENDING", "UNAUDITED"):
                continue
            key = (topic, source, start)
            by_files = len(windows.get(key, ())) > 4  # judged by a rescan, kept since
            where = f"topic {topic} source {source} window {start}"
            if status == "EXCESS":
                raise _violation("false excess", f"{where}: EXCESS ({archived} archived, "
                                  f"{expected} counted), though the archive holds each message "
                                  f"once and producers sent {self.sent[key]}")
            if expected != self.published[key]:
                raise _violation("audit counts", f"{where}: expected {expected}, producers "
                                  f"published {self.published[key]}")
            files = in_files.get(key, 0)
            if rescan:
                short = files < expected
                if (status == "OK") == short:
                    raise _violation("audit wrong", f"{where}: a rescan judged it {status}, "
                                      f"its files hold {files} of {expected}")
                self.rescan_short.discard(key)
                if short:
                    self.rescan_short.add(key)
                continue
            if key in self.rescan_short and status == "OK" and files < expected:
                raise _violation("falsely resolved", f"{where}: judged OK, though its files "
                                 f"hold {files} of {expected} (a rescan found them short; "
                                 "only a rescan may clear that)")
            if by_files:  # by the files as they were at that rescan: checked then
                continue
            count = held.get(key, 0)
            if (status == "OK") != (count == expected):
                raise _violation("audit wrong", f"{where}: judged {status}, the catalog's "
                                  f"rows hold {count} of {expected}")
            if status == "MISSING" and (reachable := self._reachable_missing(key)):
                raise _violation("false missing", f"{where}: judged MISSING, though offsets "
                                 f"{reachable} are still in Kafka (no loss was accepted): "
                                 "the archive can still get them")

    def unmailed(self) -> list:
        """The mismatches no mail announced, after the final audit."""
        w = self.world
        alarms = incremental.alarms(w.plain, w.config, w.group)
        return [a for a in alarms if a.state == "new" or (
            a.mailed_at and not self.killed_at_mail and not any(
                f[0] == a.key for f in self.mailed))]

    def _archived(self) -> tuple[Counter, Counter]:
        """Per (topic, source, window): the messages the catalog's current rows hold (a
        message that rows of several generations hold, once; an unclean election's other
        message at an offset, besides), and those of them whose file is still there (in
        any of those rows). Read from the files: an election's cut message is one only
        the archive knows."""
        held, there = {}, set()
        for row in _rows(self.world):
            gaps = [(a, b) for a, b in row.get("gaps", ())]
            present = not any(self.gone(f["url"]) for f in row_files(row))
            for f in row_files(row):
                for (offset, *identity), key in self._messages(row["topic"], f["url"]):
                    if row["start"] <= offset < row["end"] and not any(
                            a <= offset < b for a, b in gaps):
                        message = (row["topic"], row["partition"], offset, *identity)
                        held[message] = key
                        if present:
                            there.add(message)
        return (Counter(held.values()),
                Counter(key for message, key in held.items() if message in there))

    def _messages(self, topic: str, url: str) -> list[tuple]:
        """The messages of an archived file: (fingerprint, (topic, source, window))."""
        plain, size = self.world.plain, self.world.plain.size(url)
        if size is None and url not in self.in_file:  # moved aside by a rewind in flight
            root = self.world.config.archive_root
            url = next(u for u, _ in plain.list(layout.join(root, "_superseded"))
                       if u.endswith("/" + url[len(root.rstrip("/")) + 1:]))
            size = plain.size(url)
        if size is not None and self.in_file.get(url, (None,))[0] != size:
            header = self.world.config.audit.source_header
            self.in_file[url] = (size, [
                (tuple(fingerprint(r.offset, r.key, r.value, r.timestamp_ms)),
                 (topic, audit_counts.source_of(r.headers, header),
                  r.timestamp_ms - r.timestamp_ms % WINDOW_MS))
                for r in read_archived(plain, url)])
        return self.in_file[url][1]

    def _reachable_missing(self, key) -> list[tuple[int, int]]:
        """(partition, offset) of the window's messages that no current row holds and that
        are not lost: Kafka still has them, no loss of them was accepted (the window should
        not have been judged yet)."""
        topic, source, start = key
        w = self.world
        cat = catalog.open_catalog(w.plain, w.config, w.group, may_rebuild=True)
        held = {(r["partition"], o) for r in cat.rows() if r["topic"] == topic
                for o in range(r["start"], r["end"])}
        accepted = {(a["partition"], o) for a in cat.state.accepted if a["topic"] == topic
                    for o in range(a["lost_from"], a["lost_to"])}
        found = []
        for partition, p in enumerate(w.kafka.topics[topic]):
            found += [(partition, o) for o, src in p.sources.items()
                      if src == source and start <= p.created_ms[o] < start + WINDOW_MS
                      and (partition, o) not in held | accepted and o in p.messages
                      and o not in w.unarchivable.get((topic, partition), ())
                      and (topic, partition, o) not in self.late]
        return found


def _rows(world) -> list[dict]:
    cat = catalog.open_catalog(world.plain, world.config, world.group, may_rebuild=True)
    return cat.rows()


def _violation(kind: str, message: str):
    from tests.support.sim.world import Violation  # (world imports this module)
    return Violation(kind, message)
