"""Committing a run: the one place where tokens advance.

Order, never changed: (1) check the manifest covers every planned slice and every file
is durable with its recorded size, (2) advance each topic's token by compare-and-swap
against the version the plan was made from, (3) mark the run committed, (4) clear the
in-flight mark. A crash anywhere leaves the plan in flight; re-running it rewrites the
same files and finds tokens already advanced by this run, which count as done.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime

from kafka_archive import layout
from kafka_archive.commit.current import row_files
from kafka_archive.config import Config
from kafka_archive.errors import TerminalError
from kafka_archive.plan.planning import Plan
from kafka_archive.storage import Storage
from kafka_archive.tokens import Token, TokenConflictError, TokenStore

log = logging.getLogger(__name__)


class ManifestMismatchError(TerminalError):
    pass


def verify(plan: Plan, manifest: dict, size_of) -> dict[tuple[str, int], int]:
    """Check manifest against plan; return the end offset reached per (topic, partition)."""
    if manifest.get("run_id") != plan.run_id:
        raise ManifestMismatchError(f"manifest is for run {manifest.get('run_id')!r}, "
                                    f"plan for {plan.run_id!r}")
    written = {(e["topic"], e["partition"]): e for e in manifest["slices"]}
    vanished = {(t, p) for t, p in manifest.get("vanished", ())}
    lost = {(a["topic"], a["partition"]) for a in manifest.get("retention_lost", ())}
    problems, ends = [], {}
    for s in plan.slices:
        if s.start == s.end:  # only sets a token (start_from: latest): nothing to write
            ends[(s.topic, s.partition)] = s.end
            continue
        if (s.topic, s.partition) in vanished:  # deleted from Kafka: its token stays put
            log.warning("%s partition %d was deleted from Kafka after planning; offsets "
                        "[%d, %d) were not archived", s.topic, s.partition, s.start, s.end)
            continue
        if (s.topic, s.partition) in lost:
            # retention deleted its head after planning: the token line stays at (or, for a
            # new partition, is written at) the slice's start, so the next plan sees the gap
            log.warning("%s partition %d: retention deleted offsets from %d on after this run "
                        "was planned; [%d, %d) were not archived, the token stays at %d",
                        s.topic, s.partition, s.start, s.start, s.end, s.start)
            ends[(s.topic, s.partition)] = s.start
            continue
        where = f"{s.topic} partition {s.partition} [{s.start}, {s.end})"
        e = written.get((s.topic, s.partition))
        if e is None or e["start"] != s.start:
            problems.append(f"{where}: missing from the manifest")
            continue
        gaps = sum(b - a for a, b in e["gaps"])
        files = row_files(e)
        if not s.start <= e["end"] <= s.end or (e["end"] < s.end and not e["cut"]):
            problems.append(f"{where}: manifest ends at {e['end']} without a max_bytes cut")
        elif e["records"] + gaps != e["end"] - s.start:
            problems.append(f"{where}: {e['records']} records + {gaps} offsets Kafka lacks "
                            f"!= {e['end'] - s.start} offsets covered")
        elif sum(f["records"] for f in files) != e["records"]:
            problems.append(f"{where}: its files hold {sum(f['records'] for f in files)} "
                            f"records, the manifest row says {e['records']}")
        elif wrong := [f"{f['url']} is {size_of(f['url'])} bytes, manifest says {f['bytes']}"
                       for f in files if size_of(f["url"]) != f["bytes"]]:
            problems.append(f"{where}: " + "; ".join(wrong))
        else:
            ends[(s.topic, s.partition)] = e["end"]
    if problems:
        raise ManifestMismatchError(f"run {plan.run_id} cannot commit: " + "; ".join(problems))
    return ends


def commit(config: Config, plan: Plan, storage: Storage, tokens: TokenStore, now: datetime) -> dict:
    root = config.archive_root
    manifest_url = layout.run_file(root, plan.group, plan.run_id, "manifest.json")
    manifest = storage.get_or_none(manifest_url)
    if manifest is None:
        raise ManifestMismatchError(f"run {plan.run_id} cannot commit: no {manifest_url}; the "
                                    "archive job did not finish, so nothing was committed")
    manifest = json.loads(manifest)
    ends = verify(plan, manifest, storage.size)
    for topic in plan.topics():
        offsets = {int(p): o for p, o in plan.base_offsets[topic].items()}
        offsets.update({p: end for (t, p), end in ends.items() if t == topic})
        token = Token(group=plan.group, topic=topic, bootstrap=plan.bootstrap, offsets=offsets,
                      committed_at=now.isoformat(timespec="seconds"), run_id=plan.run_id)
        try:
            tokens.write(token, expected_version=plan.token_versions[topic])
        except TokenConflictError:
            current = tokens.read(plan.group, topic).token
            if not (current and current.run_id == plan.run_id and dict(current.offsets) == offsets):
                raise
            log.info("token %s/%s was already advanced by this run", plan.group, topic)
    summary = {"run_id": plan.run_id, "committed_at": now.isoformat(timespec="seconds"),
               "records": sum(e["records"] for e in manifest["slices"]),
               "quarantined": sum(e.get("quarantined", 0) for e in manifest["slices"]),
               "late": sum(e.get("late", 0) for e in manifest["slices"]),
               "files": sum(len(row_files(e)) for e in manifest["slices"]),
               "retention_lost": manifest.get("retention_lost", []),
               "tokens": {t: {str(p): o for (tt, p), o in ends.items() if tt == t}
                          for t in plan.topics()}}
    storage.put_bytes(layout.run_file(root, plan.group, plan.run_id, "committed.json"),
                      json.dumps(summary, indent=1).encode())
    storage.delete(layout.inflight_marker(root, plan.group))
    for e in manifest["slices"]:
        if e.get("quarantined"):  # kept, never dropped: but someone must fix the parser
            log.warning("%s partition %d [%d, %d): %d messages quarantined, e.g. %s",
                        e["topic"], e["partition"], e["start"], e["end"], e["quarantined"],
                        "; ".join(f"offset {o}: {why}" for o, why in e.get("errors", ())[:3]))
    return summary
