"""Committing a run: the one place where tokens advance.

Order, never changed: (1) check the manifest covers every planned slice and every file
is durable with its recorded size, (1b) for a table group, add each topic's files to its
Iceberg table (taking out the files a rewind replaces) in one snapshot naming the run
(commit.iceberg: a re-run finds it and adds nothing), so a token never covers what a
table's reader cannot see, (2) advance each topic's token by compare-and-swap against
the version the plan was made from, (3) mark the run committed in its folder
(`committed.json`, the run folders' truth a rebuild reads), (4) add the run's rows to
the catalog (by compare-and-swap; the rows the plan's rewind moved aside come out) and
record the entry's seq in `committed.json` with `in_catalog` (a rebuild from the run
folders replays them in the log's order, not by clocks), (5) clear the in-flight mark if
it names this run (never another's). From `in_catalog` on the run is final: Airflow
re-executing its commit (a Clear, a late attempt) returns the stored outcome and changes
nothing, whatever newer runs and rewinds did to tokens and tables since. A crash anywhere
leaves the plan in flight; the next run finishes it from its stored manifest (the job
does not run again) and finds tokens already advanced and the catalog already holding
this run, which count as done. (3) before (4): a rebuild that lists the log before it
scans the run folders sees every run the log has (catalog.rebuild), so a rebuild racing
a commit never drops it.

A token a person changed while the plan was in flight (deleted it, or a line, to rewind;
a rewind or accept-loss that raced the plan) is left as found, never overwritten: the
run's files of that topic still enter the catalog, as archived, and the next plan starts
from the token as it is, moving aside whatever it archives again, like any rewind. So
nothing is lost (a file stays accounted for even when Kafka no longer holds its
messages), nothing is archived twice, and the group never sticks on the old plan. A
token another run advanced meanwhile (two plans at once: the in-flight mark removed by
hand) is a lost race: TokenConflictError, as before, and a table group's table takes
the run's commit of that topic out again (commit.iceberg.Tables.withdraw_run). A token
naming a run that committed before this plan was made (Plan.catalog_seq) is an older
copy a person put back: left as found too. A run given up by hand (plan.runs) never
commits: GivenUpError. A slice the job could not archive (retention deleted its head
after planning, the topic was deleted) replaces nothing: the rows its rewind was to
archive again stay current, their files come back from `_superseded/`.
"""
from __future__ import annotations

import json
import logging
from datetime import datetime

from kafka_archive import catalog, layout, manifest as manifests
from kafka_archive.catalog.state import part_key
from kafka_archive.commit import iceberg
from kafka_archive.config import Config
from kafka_archive.errors import TerminalError
from kafka_archive.manifest import added_rows, not_archived, row_files
from kafka_archive.plan import inflight, losses, runs
from kafka_archive.plan.planning import Plan
from kafka_archive.storage import Storage
from kafka_archive.tokens import Token, TokenConflictError, TokenStore

log = logging.getLogger(__name__)


class ManifestMismatchError(TerminalError):
    pass


class GivenUpError(TerminalError):
    """The commit of a run that a person gave up (plan.runs._put_back_given_up)."""


def verify(plan: Plan, manifest: dict, size_of) -> dict[tuple[str, int], int]:
    """Check manifest against plan; return the end offset reached per (topic, partition)."""
    if manifest.get("run_id") != plan.run_id:
        raise ManifestMismatchError(f"manifest is for run {manifest.get('run_id')!r}, "
                                    f"plan for {plan.run_id!r}")
    written = {(e["topic"], e["partition"]): e for e in manifest["slices"]}
    vanished = {(t, p) for t, p in manifest.get("vanished", ())}
    lost = not_archived(manifest) - vanished
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
            # new partition, is written at) the slice's start, so the next plan sees the gap;
            # past what the archive still holds of a rewind (_keep_what_was_not_archived_again),
            # as for a rewind that found other messages in Kafka than the archive's
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
    for e in manifest.get("kept", ()):  # what a rewind kept of a compacted row
        problems += [f"{f['url']} (kept of a compacted row) is {size_of(f['url'])} bytes, "
                     f"manifest says {f['bytes']}" for f in row_files(e)
                     if size_of(f["url"]) != f["bytes"]]
    if problems:
        raise ManifestMismatchError(f"run {plan.run_id} cannot commit: " + "; ".join(problems))
    return ends


def commit(config: Config, plan: Plan, storage: Storage, tokens: TokenStore, now: datetime,
           tables: iceberg.Tables | None = None) -> dict:
    """tables: a table group's Iceberg tables (default: opened with the config's catalogs
    and the environment's S3 credentials)."""
    root = config.archive_root
    committed = layout.run_file(root, plan.group, plan.run_id, "committed.json")
    stored = runs.stored_outcome(storage, root, plan.group, plan.run_id)  # read once
    if runs.is_final(final := stored):
        # a committed run is final: Airflow re-executing its commit (a Clear, a late
        # attempt) finds the outcome stored and changes nothing; tokens and tables may
        # have moved on since (newer runs, rewinds) and must stay as they are
        log.warning("run %s was committed at %s: its outcome stands, nothing is changed",
                    plan.run_id, final["committed_at"])
        inflight.clear(storage, root, plan.group, plan.run_id)  # a crash left it marked
        return {**final, "repeated": True}
    if storage.size(layout.run_file(root, plan.group, plan.run_id, runs.GIVEN_UP)) is not None:
        raise GivenUpError(
            f"run {plan.run_id} of group {plan.group} was given up (its _inflight.json was "
            "deleted by hand) and undone by the plan after it: nothing is committed; the "
            "group's runs archive what it had planned")
    manifest = manifests.read(storage, root, plan.group, plan.run_id)
    if manifest is None:
        raise ManifestMismatchError(
            f"run {plan.run_id} cannot commit: no {manifests.url(root, plan.group, plan.run_id)}; "
            "the archive job did not finish, so nothing was committed")
    sizes = storage.sizes([f["url"] for e in added_rows(manifest) for f in row_files(e)])
    ends = verify(plan, manifest, sizes.get)
    _keep_what_was_not_archived_again(config, plan, manifest, storage, ends)
    # refused before any token moves; the entry it saw orders a rebuild from the runs
    seen = add_to_catalog(config, plan, manifest, storage, now, dry_run=True)
    snapshots = {}  # topic -> its table's snapshot of this run
    if config.group(plan.group).table is None:
        tables = None
    else:  # before the tokens: see the top
        tables = tables or iceberg.Tables(config)
        # committed.json stored: the tables took the run before it, and maintenance may
        # have expired that snapshot since (the run would go in again, read twice)
        snapshots = (stored.get("table_snapshots", {}) if stored is not None
                     else iceberg.commit_tables(tables, plan, manifest))
    left_as_found = (stored["tokens_left_as_found"] if stored is not None  # the step is done
                     else _advance_tokens(config, plan, storage, tokens, now, ends,
                                          lambda topic: tables.withdraw_run(
                                              plan, manifest, topic) if tables else None))
    summary = {"run_id": plan.run_id, "committed_at": now.isoformat(timespec="seconds"),
               "records": sum(e["records"] for e in manifest["slices"]),
               "quarantined": sum(e.get("quarantined", 0) for e in manifest["slices"]),
               "late": sum(e.get("late", 0) for e in manifest["slices"]),
               "files": sum(len(row_files(e)) for e in manifest["slices"]),
               "retention_lost": really_lost(config, plan, manifest, storage),
               "offsets_reused": manifest.get("offsets_reused", []),
               "tokens": {t: {str(p): o for (tt, p), o in ends.items() if tt == t}
                          for t in plan.topics() if t not in left_as_found},
               "tokens_left_as_found": left_as_found, "after_entry": seen,
               "by_topic": by_topic(plan, manifest, root), "table_snapshots": snapshots}
    if stored is None:  # a re-run keeps the first
        storage.put_bytes(committed, json.dumps(summary, indent=1).encode())
    entry = add_to_catalog(config, plan, manifest, storage, now)
    # final from here on; `entry`: the log's order, for a rebuild from the run folders
    # once the log is cleaned up (None: the catalog held the run already)
    first = summary if stored is None else stored
    storage.put_bytes(committed, json.dumps(
        {**first, "in_catalog": True, **({"entry": entry} if entry is not None else {})},
        indent=1).encode())
    inflight.clear(storage, root, plan.group, plan.run_id)
    for e in manifest["slices"]:
        if e.get("quarantined"):  # kept, never dropped: but someone must fix the parser
            log.warning("%s partition %d [%d, %d): %d messages quarantined, e.g. %s",
                        e["topic"], e["partition"], e["start"], e["end"], e["quarantined"],
                        "; ".join(f"offset {o}: {why}" for o, why in e.get("errors", ())[:3]))
    return summary


def _keep_what_was_not_archived_again(config: Config, plan: Plan, manifest: dict,
                                      storage: Storage, ends: dict[tuple[str, int], int]) -> None:
    """A slice the job could not archive replaces nothing: the rows its rewind was to
    archive again stay current, their files come back from `_superseded/` (where the plan
    moved them), and its token goes to the end of what they hold, not back below it (that
    would call archived messages lost to retention). Idempotent."""
    missed = not_archived(manifest)
    if not missed or not any((s.topic, s.partition) in missed for s in plan.slices):
        return
    reused = {(a["topic"], a["partition"]): f"Kafka holds another message at offset "
              f"{a['lost_from']} than the archive" for a in manifest.get("offsets_reused", ())}
    cat = catalog.open_catalog(storage, config, plan.group, may_rebuild=True)
    for s in plan.slices:
        if (s.topic, s.partition) not in missed:
            continue
        position = s.start
        for row in sorted(cat.rows(s.topic, s.partition, plan.generation, end_after=s.start),
                          key=lambda r: r["start"]):
            if not s.start <= row["start"] < s.end:
                continue
            for f in row_files(row):
                aside = layout.superseded(config.archive_root, plan.run_id, f["url"])
                if storage.size(f["url"]) is None and storage.size(aside) is not None:
                    storage.move(aside, f["url"])
            if row["start"] <= position:
                position = max(position, row["end"])
        if (s.topic, s.partition) in ends:  # a lost head; a vanished topic's token stays
            ends[(s.topic, s.partition)] = max(ends[(s.topic, s.partition)], position)
            log.warning("%s partition %d: %s; [%d, %d) were not archived again, the token goes "
                        "to %d%s", s.topic, s.partition, reused.get((s.topic, s.partition),
                        f"retention deleted offsets from {s.start} on after this run was "
                        "planned"), s.start, s.end, position,
                        f" (the archive holds [{s.start}, {position}) still)"
                        if position > s.start else "")


def really_lost(config: Config, plan: Plan, manifest: dict, storage: Storage) -> list[dict]:
    """The job's retention losses (planning.Anomaly as dicts), each as the ranges of it
    that neither Kafka nor the archive holds (losses.lost_spans: the rows a rewind was to
    archive again are kept, and are no loss)."""
    late = manifest.get("retention_lost", ())
    if not late:
        return []
    cat = catalog.open_catalog(storage, config, plan.group, may_rebuild=True)
    return [{**a, "lost_from": start, "lost_to": end} for a in late
            for start, end in losses.lost_spans(cat, a["topic"], a["partition"], a["lost_from"],
                                                a["lost_to"])]


def _advance_tokens(config: Config, plan: Plan, storage: Storage, tokens: TokenStore,
                    now: datetime, ends: dict[tuple[str, int], int], withdraw) -> dict[str, str]:
    """Each topic's token by compare-and-swap; topic -> why its token was left as found.
    Tokens move in one attempt's token step only (once committed.json exists the step is
    done and its outcome stands: the caller does not call this). A token the plan saw
    absent is created by compare-and-swap too, which cannot tell this run's earlier
    attempt from a person who deleted what it created: so each creation is recorded
    before it is tried (`tokens.json`), and a
    later attempt that finds such a token absent leaves it so: a person deleted it, or the
    attempt was killed before it (either way, writing it now could undo a person's
    delete; left absent, the next plan archives the topic again, nothing is lost)."""
    record_url = layout.run_file(config.archive_root, plan.group, plan.run_id, "tokens.json")
    creating = (json.loads(storage.get_or_none(record_url) or b'{"creating": []}')["creating"]
                if None in plan.token_versions.values() else [])  # read only where it matters
    left_as_found, earlier = {}, set(creating)  # (recorded by an earlier attempt)
    if new := [t for t in plan.topics() if plan.token_versions[t] is None and t not in earlier]:
        # all at once (a first run of 60 new topics wrote this 60 times): a token recorded
        # here and then found absent by a later attempt is left absent, whichever topic
        # the kill came before, as the rule above says
        creating += new
        storage.put_bytes(record_url, json.dumps({"creating": creating}).encode())
    for topic in plan.topics():
        offsets = {int(p): o for p, o in plan.base_offsets[topic].items()}
        offsets.update({p: end for (t, p), end in ends.items() if t == topic})
        token = Token(group=plan.group, topic=topic, bootstrap=plan.bootstrap, offsets=offsets,
                      committed_at=now.isoformat(timespec="seconds"), run_id=plan.run_id)
        if topic in earlier and tokens.read(plan.group, topic).token is None:
            left_as_found[topic] = absent_again(plan, topic)
            log.warning("%s", left_as_found[topic])
            continue
        try:
            tokens.write(token, expected_version=plan.token_versions[topic])
        except TokenConflictError as conflict:
            current = tokens.read(plan.group, topic).token
            if current and current.run_id == plan.run_id and dict(current.offsets) == offsets:
                log.info("token %s/%s was already advanced by this run", plan.group, topic)
                continue
            # a token no run wrote (accept-loss, rewind: the tools write none) is a person's
            if (current and current.run_id is not None
                    and current.run_id not in (plan.run_id, plan.token_runs.get(topic))
                    and _committed_after(storage, config.archive_root, plan, current.run_id)):
                withdraw(topic)  # the table must not keep what no token covers
                raise  # another run committed the topic: this plan is stale
            left_as_found[topic] = changed_by_a_person(plan, topic, current, conflict)
            log.warning("%s", left_as_found[topic])
    return left_as_found


def absent_again(plan: Plan, topic: str) -> str:
    """Why a token this run was creating, found absent by a later attempt, stays absent."""
    return (f"token {plan.group}/{topic} did not exist when run {plan.run_id} was planned, an "
            "earlier attempt of its commit was creating it, and it is absent now: a person "
            "deleted it since, or that attempt was killed before it wrote it. It is left "
            f"absent (writing it could undo a person's delete): what the run archived of "
            f"{topic} is kept in the catalog, and the next run archives {topic} again from "
            "start_from, moving aside what it replaces")


def _committed_after(storage: Storage, root: str, plan: Plan, run_id: str) -> bool:
    """Whether run_id, which wrote a token under the plan, committed after the plan was
    made (a lost race: two plans at once), rather than before it (an older copy of the
    token put back by a person, which is left as found). A run not committed yet is
    committing now: a race; unless it was given up (it never commits: its token is a
    copy a person put back)."""
    if plan.catalog_seq is None:
        return True
    stored = storage.get_or_none(layout.run_file(root, plan.group, run_id, "committed.json"))
    if stored is None:
        return storage.size(layout.run_file(root, plan.group, run_id, runs.GIVEN_UP)) is None
    outcome = json.loads(stored)
    entry = outcome.get("entry", outcome.get("after_entry", -1) + 1)
    return entry > plan.catalog_seq


def _holds_rows_of(cat: catalog.Catalog, run: str, rows: list[dict]) -> bool:
    """Whether the catalog holds the run's rows already (its entry is older than the
    state's recent runs: backfills came between a crash and this re-run)."""
    first = next((r for r in rows if r["end"] > r["start"]), None)
    topic = first and cat.state.topics.get(first["topic"])
    summary = topic and topic.summaries.get(part_key(first["partition"], first["_generation"]))
    if not summary or summary.overlap(first["start"], first["end"]) is None:
        return False  # its offsets are in no current row: no row to read (a new commit)
    return any(
        r["_run"] == run and r["start"] == first["start"]
        for r in cat.rows(first["topic"], first["partition"], first["_generation"],
                          end_after=first["start"], start_before=first["start"] + 1))


def by_topic(plan: Plan, manifest: dict, root: str) -> dict[str, dict]:
    """Per topic of the run: records, files and bytes it added, files it replaced (a rewind)."""
    found = {}
    for topic in plan.topics():
        rows = [e for e in manifest["slices"] if e["topic"] == topic]
        inside = layout.table_location(root, plan.group, topic) + "/"  # the topic's folder
        found[topic] = {"records": sum(e["records"] for e in rows),
                        "files": sum(len(row_files(e)) for e in rows),
                        "bytes": sum(e.get("bytes") or 0 for e in rows),
                        "replaced": sum(url.startswith(inside) for url in plan.superseded)}
    return found


def changed_by_a_person(plan: Plan, topic: str, current: Token | None,
                        conflict: TokenConflictError) -> str:
    """Why a token changed under a run by a person's hand (deleted, a line deleted or
    edited, a rewind or an accepted loss that raced the plan) is left as found."""
    ranges = ", ".join(f"{s.partition}: [{s.start}, {s.end})" for s in plan.slices
                       if s.topic == topic and s.end > s.start) or "none"
    now = "deleted" if current is None else "changed (version " + str(conflict.found) + ")"
    return (f"token {plan.group}/{topic} was {now} while run {plan.run_id} was in flight, "
            f"so the run left it as found: what the run archived of {topic} (partition: "
            f"offsets {ranges}) is kept in the catalog like any archived file, and the next "
            f"run archives {topic} from the token as it is now, moving aside the files it "
            "archives again (as for any rewind)")


def add_to_catalog(config: Config, plan: Plan, manifest: dict, storage: Storage,
                   now: datetime, dry_run: bool = False) -> int | None:
    """The run's rows into the catalog; out go the current rows starting inside a slice
    (the rows a rewind's plan archives again, whose files it moved aside). Nothing when
    the catalog holds this run already (a commit re-run after a crash). The seq of the
    entry added (None: none). dry_run: only check that the catalog takes the entry
    (catalog.OverlapError if a row's offsets are in a current file already), writing
    nothing, and return the seq of the newest entry seen: the commit does so before any
    token moves, so a refusal leaves the run as it was."""
    root, group = config.archive_root, plan.group
    run = catalog.run_folder(root, group, plan.run_id)
    plan_dict = json.loads(plan.to_json())
    spec = config.group(group).layout
    rows = [catalog.catalog_row(e, run, plan_dict, spec, root, group)
            for e in added_rows(manifest)]
    committed = {"run_id": plan.run_id, "committed_at": now.isoformat(timespec="seconds")}

    def entry(cat: catalog.Catalog) -> dict | None:
        if cat.state.has_run(plan.run_id) or _holds_rows_of(cat, run, rows):
            return None
        removed, missed = [], not_archived(manifest)
        for s in plan.slices:  # the rows the plan archives again (rewinds.supersede)
            if (s.topic, s.partition) in missed:
                continue  # nothing replaces them: they stay (see _keep_what_was_...)
            topic = cat.state.topics.get(s.topic)
            summary = topic and topic.summaries.get(part_key(s.partition, plan.generation))
            if summary and summary.end is not None and summary.end > s.start:
                removed += [r for r in cat.rows(s.topic, s.partition, plan.generation,
                                                end_after=s.start)
                            if s.start <= r["start"] < s.end]
        for cut in plan.cuts:  # a compacted row the job kept a part of (as a row of its own)
            if (cut["topic"], cut["partition"]) not in missed:
                removed += [r for r in cat.rows(cut["topic"], cut["partition"], cut["generation"],
                                                end_after=cut["below"])
                            if r["start"] == cut["row"]["start"]]
        return {"kind": "commit", "run_id": plan.run_id, "at": committed["committed_at"],
                "run": catalog.run_summary(plan_dict, manifest, committed),
                "add": rows, "remove": removed, **catalog.plan_marks(plan_dict)}

    if dry_run:
        cat = catalog.open_catalog(storage, config, group, may_rebuild=True)
        seen = cat.state.seq
        if (found := entry(cat)) is not None:
            cat.state.apply({**found, "seq": seen + 1}, check=True)
        return seen
    return catalog.append(storage, config, group, entry).appended
