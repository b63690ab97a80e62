"""Starting a run: resume the plan still in flight, or make, store and mark a new one.

A plan is written before any data moves. While `_inflight.json` names it, every run
re-executes that same plan, so files are rewritten byte for byte and no offset is
planned twice. Only commit clears the mark.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from datetime import datetime, timezone

from kafka_archive import catalog, layout, manifest as manifests
from kafka_archive.catalog import store
from kafka_archive.catalog.state import State, part_key
from kafka_archive.manifest import row_files
from kafka_archive.plan import losses
from kafka_archive.config import Config, Group
from kafka_archive.errors import TerminalError, TransientError
from kafka_archive.plan import inflight, planning, rewinds
from kafka_archive.plan.planning import Anomaly, Caps, Plan
from kafka_archive.storage import Storage
from kafka_archive.tokens import MalformedTokenError, TokenStore, Versioned

log = logging.getLogger(__name__)


def start(config: Config, group_name: str, run_id: str, storage: Storage, tokens: TokenStore,
          consumer, now: datetime, dry_run: bool = False, topics: tuple[str, ...] = (),
          caps: Caps = Caps(), tables=None, first_reused=None) -> Plan:
    """topics (empty: all of the group) and caps come from a manual run's params;
    tables (commit.iceberg.Tables), a table group's: a parsed table's columns come from
    it (without it: the declared ones), and a given-up run's commit is taken out of it.
    first_reused(storage, consumer, slice): archive.earlier's look at the files a rewind
    replaces (the archive stage reads archived files; the caller hands it down)."""
    group = config.group(group_name)
    if (own := _planned_before(storage, config, group.name, run_id)) is not None:
        return own
    plan = inflight.plan(storage, config.archive_root, group.name)
    if plan is not None:
        log.warning("run %s failed before commit; re-executing its plan unchanged%s", plan.run_id,
                    " (this run's topics and caps do not apply)" if topics or caps != Caps() else "")
        if not dry_run:
            if manifests.read(storage, config.archive_root, group.name, plan.run_id) is None:
                # not archived yet: the attempt that marked it may have died before giving
                # way, and a compaction may have replaced the rows it read since
                _give_way_if_moved(storage, config, group, plan.run_id, _plan_url(config, plan),
                                   _read_at(plan), moved_aside=True)
            _move_aside(storage, config, plan)
        return plan

    observed = planning.observe(consumer, group)
    states = planning.only_topics(observed, topics, group)
    offline = [Anomaly("unavailable", t, -1, 0, 0, "failed",
                       f"Kafka gives no offsets of this topic (a partition without a leader?): "
                       f"{why}") for t, why in sorted(observed.unavailable.items())
               if not topics or t in topics]
    with_tokens = set() if topics else set(tokens.topics(group.name))
    reads, unreadable = _read_tokens(tokens, group.name,
                                     sorted({s.topic for s in states} | with_tokens))
    _refuse_other_clusters(config, group.name, reads)
    states = [s for s in states if s.topic in reads]  # an unreadable token holds its topic
    cat = catalog.open_catalog(storage, config, group.name, may_rebuild=True)
    listings: dict = {}  # the plan's listings of data folders (unlisted), while nothing moves
    taken = _names_taken(group, {s.topic for s in states}, cat.state.with_rows())
    states = [s for s in states if s.topic not in {a.topic for a in taken}]
    offsets = {t: dict(r.token.offsets) if r.token else {} for t, r in reads.items()}
    if not dry_run:
        cat = _put_back_given_up(storage, config, group, run_id, tokens, cat, tables, listings)
    cut, stale = _cut_short(storage, config, group.name, reads, cat)
    if not dry_run and cut:
        log.warning("run %s advanced tokens but its commit never finished (its in-flight "
                    "mark was deleted): re-executing its plan unchanged", cut.run_id)
        _mark(storage, config, group, cut.run_id,
              layout.run_file(config.archive_root, group.name, cut.run_id, "plan.json"))
        _move_aside(storage, config, cut)
        return cut
    for topic in stale:  # its lines claim what no current row holds: archived again
        archived = losses.archived_through(cat, topic, config.generation)
        offsets[topic] = {p: min(o, archived[p]) for p, o in offsets[topic].items()
                          if p in archived}
        log.warning("token %s/%s names run %s, which never reached the catalog and was planned "
                    "before runs that did (a copy of the token put back by hand): its lines "
                    "count only as far as the catalog holds, %s", group.name, topic,
                    reads[topic].token.run_id, offsets[topic])
    judged, lost_spans = _judged(cat, config, states, offsets)
    slices, anomalies, waiting = planning.decide(
        group, states, judged, int(now.timestamp() * 1000),
        planning.oldest_pending_reader(consumer), caps,
        {t: rewinds.rows_through(cat, t, config.generation) for t in {s.topic for s in states}})
    anomalies = [split for a in anomalies for split in _split_by_archive(a, lost_spans)]
    slices += _lines_caught_up(group, offsets, judged, slices, anomalies)
    anomalies = (unreadable + taken + offline
                 + _vanished(group, consumer, reads, {s.topic for s in states} | {
                     a.topic for a in offline}) + anomalies)
    slices, superseded, cuts = rewinds.supersede(cat, config, slices)
    if reused := [a for s in slices if s.earlier and first_reused is not None
                  if (a := rewinds.offsets_reused(first_reused(storage, consumer, s), s))
                  is not None]:
        anomalies += reused  # held: nothing of the topic moves aside
        out = {a.topic for a in reused}
        slices = [s for s in slices if s.topic not in out]
        superseded = [url for s in slices for url in s.earlier]
        cuts = [c for c in cuts if c["topic"] not in out]
    slices = rewinds.held_elsewhere(cat, config, slices)
    if anomalies and not dry_run:
        # recorded even when every topic is held: the lost range must not be forgotten
        storage.put_bytes(layout.run_file(config.archive_root, group.name, run_id, "anomalies.json"),
                          json.dumps([a.__dict__ for a in anomalies], indent=1).encode())
        for a in anomalies:
            if a.kind == "retention_gap" and a.action == "skipped":
                losses.record(storage, config, losses.AcceptedLoss(
                    group.name, a.topic, a.partition, a.lost_from, a.lost_to,
                    "on_retention_gap: skip", now.isoformat(timespec="seconds"),
                    f"group {group.name} is configured to skip retention gaps (run {run_id})"))

    superseded += _strays(storage, config, group, cat, slices, superseded, listings)
    topics = sorted({s.topic for s in slices})
    plan = Plan(
        group=group.name, run_id=run_id, created_at=now.isoformat(timespec="seconds"),
        bootstrap=config.bootstrap_servers, generation=config.generation,
        format=group.format.__dict__, slices=tuple(slices),
        topic_formats={t: group.format_for(t).__dict__ for t in topics
                       if group.format_for(t) != group.format},
        token_versions={t: reads[t].version for t in topics},
        token_runs={t: reads[t].token.run_id if reads[t].token else None for t in topics},
        base_offsets={t: {str(p): o for p, o in offsets[t].items()} for t in topics},
        anomalies=tuple(anomalies), superseded=tuple(superseded), waiting=waiting,
        finalized=_watermarks(cat, group, topics),
        latest={t: {str(s.partition): s.latest for s in states if s.topic == t} for t in topics},
        columns=_columns(group, topics, tables),
        column_origins=_typed(group, topics, tables, "column_origins"),
        column_identities=_typed(group, topics, tables, "column_identities"),
        catalog_seq=cat.state.seq, cuts=tuple(cuts))
    if dry_run or not slices:
        return plan
    plan_url = _plan_url(config, plan)
    storage.put_bytes(plan_url, plan.to_json())
    _mark(storage, config, group, run_id, plan_url, read_at=_read_at(plan))
    _move_aside(storage, config, plan)
    return plan


def _plan_url(config: Config, plan: Plan) -> str:
    return layout.run_file(config.archive_root, plan.group, plan.run_id, "plan.json")


def _read_at(plan: Plan) -> int | None:
    """The catalog seq the plan read the rows at: a compaction (or any writer of rows)
    after it may have merged a row the plan replaces, even one it moves no file of (a
    rewind to a row of transaction markers only, which has none) into one the plan does
    not replace (its commit would then refuse the overlap for good). None: a plan from
    before the seq was recorded."""
    return plan.catalog_seq


class CompactionUnderWay(TransientError):
    """The group's tables are being compacted: the plan gave way, nothing was planned."""


# catalog entries that replace rows: a plan that read the rows before one of them was
# appended may list files that are no longer current (a rebuild makes the same rows again)
_ROW_CHANGES = frozenset({"commit", "compaction", "backfill"})


def _mark(storage: Storage, config: Config, group: Group, run_id: str, plan_url: str,
          read_at: int | None = None) -> None:
    """Mark the plan in flight, then look for a compaction of the group's tables
    (commit.compaction): one that took its lease before the mark may be replacing rows
    this plan read, so the plan gives way (its mark taken off) and is made again when the
    run is retried; a killed compaction's lease stays until the next compaction task
    finishes its work. The compaction looks for the mark after taking its lease: of the
    two, at least one sees the other. A compaction (or any writer of rows) that both
    started and finished between the plan's reading of the catalog (at seq read_at) and
    its mark is in the catalog's log after read_at: the plan gives way to it too."""
    inflight.mark(storage, config.archive_root, group.name, run_id, plan_url)
    _give_way_if_moved(storage, config, group, run_id, plan_url, read_at)


def _give_way_if_moved(storage: Storage, config: Config, group: Group, run_id: str,
                       plan_url: str, read_at: int | None, moved_aside: bool = False) -> None:
    """_mark's look for a compaction, for the marked plan: CompactionUnderWay (its mark
    taken off) if one holds the lease or rows changed after read_at. moved_aside: an
    earlier attempt may have moved files aside, for the next plan to put back."""
    if group.table is None and read_at is None:
        return  # (nothing to compare, no compaction to look for)
    held = inflight.compacting(storage, config.archive_root, group.name) \
        if group.table is not None else None
    moved = None if held is not None or read_at is None else next(
        (e for e in store.entries_after(storage, config.archive_root, group.name, read_at)
         if e.get("kind") in _ROW_CHANGES), None)
    if held is None and moved is None:
        return
    inflight.clear(storage, config.archive_root, group.name, run_id)
    if not moved_aside:  # it moved and wrote nothing: no later plan has anything to undo
        inflight.note_given_up(storage, config.archive_root, group.name,
                               {"run_id": run_id, "plan": plan_url})
    if moved is not None:
        raise CompactionUnderWay(
            f"group {group.name}: the catalog changed while run {run_id} was planning "
            f"({moved['kind']} {moved.get('run_id', '')}, entry {moved.get('seq')}): the rows "
            "it read may no longer be current, so it planned nothing and gives way; run it again")
    raise CompactionUnderWay(
        f"group {group.name} is being compacted ({held.get('id')}, process {held.get('pid')} "
        f"on {held.get('host')}" + ("" if held["alive"] else ", which is gone: the group's "
                                    "next compaction task finishes its work") +
        f"): run {run_id} planned nothing and gives way; run it again")


def _judged(cat: catalog.Catalog, config: Config, states: list[planning.PartitionState],
            offsets: dict[str, dict[int, int]]
            ) -> tuple[dict[str, dict[int, int]], dict[tuple[str, int], list[tuple[int, int]]]]:
    """The token lines the plan decides from: each topic's, and for a partition without a
    line (deleted by a person, to archive it again from start_from) whose archive ends
    below Kafka's earliest offset, that end: the messages between were deleted before they
    were archived, a retention gap like any other (held or skipped, recorded, mailed), not
    a silent skip. Where Kafka still holds the end, the line stays absent: a rewind; under
    `start_from: latest` there is nothing to rewind to, and starting at Kafka's latest
    offset would skip what the archive has not reached, so the line is the archive's end:
    its rows' and losses' (a rewind cut short left what lies beyond them to archive), or
    where a plan began the partition if it holds none (latest starts only partitions no
    generation's archive holds). A line
    below Kafka's earliest offset (a rewind, then retention) counts from where the archive
    stops holding what lies between (losses.lost_spans): a rewind cannot lose what the
    archive holds; what it holds of it splits the loss (the spans returned per partition,
    which the plan reports as one anomaly each)."""
    start_from = config.group(cat.group).start_from
    judged = {t: dict(lines) for t, lines in offsets.items()}
    ends: dict[str, dict[int, int]] = {}
    held: dict[str, dict[int, int]] = {}
    spans: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for s in states:
        if (line := judged.get(s.topic, {}).get(s.partition)) is not None:
            if line < s.earliest:  # what the archive holds of the gap is no loss
                lost = losses.lost_spans(cat, s.topic, s.partition, line, s.earliest)
                spans[(s.topic, s.partition)] = lost
                judged[s.topic][s.partition] = lost[0][0] if lost else s.earliest
            continue
        if s.topic not in ends:
            ends[s.topic] = losses.archived_through(cat, s.topic)
        end = ends[s.topic].get(s.partition)
        if end is not None and end < s.earliest:
            judged.setdefault(s.topic, {})[s.partition] = end
        elif end is not None and start_from == "latest":  # (an archive beyond
            # Kafka's latest offset, of an earlier generation: nothing there to skip)
            if s.topic not in held:  # its rows and losses; where a plan began it, if none
                held[s.topic] = losses.archived_through(cat, s.topic, spots=False)
            judged.setdefault(s.topic, {})[s.partition] = min(
                held[s.topic].get(s.partition, end), s.latest)
    return judged, spans


def _split_by_archive(anomaly: Anomaly, lost_spans: dict[tuple[str, int], list[tuple[int, int]]]
                      ) -> list[Anomaly]:
    """A retention gap as one anomaly per range the archive does not hold (_judged)."""
    spans = lost_spans.get((anomaly.topic, anomaly.partition))
    if anomaly.kind != "retention_gap" or spans is None:
        return [anomaly]
    return [dataclasses.replace(anomaly, lost_from=a, lost_to=b) for a, b in spans]


def _lines_caught_up(group: Group, offsets: dict[str, dict[int, int]],
                     judged: dict[str, dict[int, int]], slices: list[planning.Slice],
                     anomalies: list[Anomaly]) -> list[planning.Slice]:
    """A slice of no offsets for each line judged from further on than it says (below
    Kafka's earliest offset, with the archive holding what lies between; or a line deleted
    under `start_from: latest`, judged at its archive's end) where nothing else is planned
    for its partition: the commit moves the line there, which no archiving would (nothing
    new in Kafka), so the partition is not judged again run after run."""
    planned = {(s.topic, s.partition) for s in slices}
    held_out = {a.topic for a in planning.held(anomalies)}
    return [planning.Slice(topic, p, at, at, group.policy_for(topic).max_bytes)
            for topic, lines in judged.items() if topic not in held_out
            for p, at in sorted(lines.items())
            if offsets.get(topic, {}).get(p, -1) < at and (topic, p) not in planned]


class RunFolderTaken(TerminalError):
    """A run's folder holds what a new plan must not overwrite."""


def _planned_before(storage: Storage, config: Config, group: str, run_id: str) -> Plan | None:
    """The plan this run id stored and committed before (Airflow re-executing the plan
    task of a committed run: a Clear of the run): it stands, and the run's other tasks
    find their outcome stored too. None when the run has no plan stored yet, or one that
    was never archived (a plan task killed before its mark), which a new plan replaces.
    Refused: a folder another run id maps to (layout.run_folder_name), and an archived
    plan that is no longer in flight (its mark deleted by hand), whose files a new plan
    under the same folder would overwrite."""
    root = config.archive_root
    stored = storage.get_or_none(layout.run_file(root, group, run_id, "plan.json"))
    if stored is None:
        return None
    plan = Plan.from_json(stored)
    folder = layout.run_file(root, group, run_id, "")
    if plan.run_id != run_id:
        raise RunFolderTaken(
            f"run ids {run_id!r} and {plan.run_id!r} of group {group} map to the same run "
            f"folder {folder} (characters other than letters, digits and ._=- become _); "
            f"run {plan.run_id!r} planned there first: trigger this run under another id")
    if storage.size(layout.run_file(root, group, run_id, "committed.json")) is not None:
        log.warning("run %s was planned and committed before: its plan stands, nothing is "
                    "planned again", run_id)
        return plan
    if (manifests.read(storage, root, group, run_id) is not None
            and inflight.holding(storage, root, group) != run_id):
        raise RunFolderTaken(
            f"run {run_id} of group {group} was archived ({folder}manifest.json) but never "
            "committed, and is no longer in flight (its _inflight.json was deleted by hand, "
            "and other runs may have archived the same offsets since): its folder is kept as "
            "it is; trigger a new run")
    # a plan never archived (killed before its mark, or given up before its job ran): the
    # new plan replaces it, and with it the mark that its commit may not run
    storage.delete(layout.run_file(root, group, run_id, GIVEN_UP))
    return None


def _cut_short(storage: Storage, config: Config, group: str, reads: dict[str, Versioned],
               cat: catalog.Catalog) -> tuple[Plan | None, list[str]]:
    """A run named by a token whose commit never finished, though it was no longer in
    flight: its mark was deleted by hand after the commit advanced tokens. A new plan from
    those tokens would leave the run's files out of the catalog, under tokens that say
    they are archived; the run's own plan is finished instead (its commit finds the tokens
    it advanced, and adds its rows). Unless the catalog holds some of its offsets by now
    (its token was put back by hand after other runs went on): then finishing it would put
    them in the catalog twice; the topics whose tokens name such a run come back second."""
    root = config.archive_root
    named: dict[str, list[str]] = {}  # run id -> the topics whose tokens name it
    for topic, read in reads.items():
        if read.token and read.token.run_id:
            named.setdefault(read.token.run_id, []).append(topic)
    resume, stale = None, []
    for run_id, topics in sorted(named.items()):
        if in_catalog(cat, run_id, topics[0]):
            continue  # no storage read for the tokens of idle topics
        stored = storage.get_or_none(layout.run_file(root, group, run_id, "plan.json"))
        if stored is None or manifests.read(storage, root, group, run_id) is None:
            continue  # not a run of this group's folders (a token edited by hand)
        plan = Plan.from_json(stored)
        if plan.run_id != run_id or is_final(stored_outcome(storage, root, group, run_id)):
            continue
        if (storage.size(layout.run_file(root, group, run_id, GIVEN_UP)) is not None
                or any(_held_since(cat, config, plan, s) for s in plan.slices)):
            # a given-up run never commits (a copy of its token put back by hand): its
            # lines, too, count only as far as the catalog holds
            stale += topics
        elif resume is None:
            resume = plan
    return resume, stale


def in_catalog(cat: catalog.Catalog, run_id: str, topic: str) -> bool:
    """Whether the run's rows of the topic reached the catalog (by its commit or by a
    rebuild from the run folders): a recent run, or the last of one of the topic's
    partitions. Asks the catalog, not the run's record, which a commit cut short after
    the rebuild never finished."""
    held = cat.state.topics.get(topic)
    folder = layout.run_folder_name(run_id)
    return cat.state.has_run(run_id) or (
        held is not None and any(s.last_run == folder for s in held.summaries.values()))


def _held_since(cat: catalog.Catalog, config: Config, plan: Plan, s: planning.Slice) -> bool:
    """Whether the catalog holds offsets of the plan's slice in a row the plan did not
    move aside: runs went on after it."""
    if s.end <= s.start:
        return False
    aside = set(plan.superseded)
    return any(f["url"] not in aside
               for r in cat.rows(s.topic, s.partition, config.generation, end_after=s.start,
                                 start_before=s.end)
               for f in row_files(r))


def stored_outcome(storage: Storage, root: str, group: str, run_id: str) -> dict | None:
    """The run's committed.json, as its commit stored it (None: none yet)."""
    stored = storage.get_or_none(layout.run_file(root, group, run_id, "committed.json"))
    return json.loads(stored) if stored is not None else None


def is_final(outcome: dict | None) -> bool:
    """Whether a stored outcome is of a commit that reached the catalog, so that nothing
    of the run may change again (not: cut short before it, the commit must go on).
    Outcomes from before `in_catalog` say it by the entry they recorded."""
    return bool(outcome) and ("in_catalog" in outcome or "entry" in outcome)


def _columns(group: Group, topics: list[str], tables) -> dict[str, list]:
    if not group.parsed_table:
        return {}
    declared = [list(c) for c in group.table.columns]
    return {t: tables.columns(group.name, t) if tables else declared for t in topics}


def _typed(group: Group, topics: list[str], tables, facts: str) -> dict[str, dict[str, str]]:
    """Per topic, a typed table's column facts (Tables.column_origins, .column_identities)."""
    if not group.parsed_table or tables is None:
        return {}
    return {t: found for t in topics if (found := getattr(tables, facts)(group.name, t))}


def _watermarks(cat: catalog.Catalog, group: Group, topics: list[str]) -> dict[str, int]:
    """Per topic of an event-time group, its finalize watermark (commit.finalizing)."""
    if group.layout.kind != "event_time":
        return {}
    found = {t: cat.state.topics[t].finalized_through_ms for t in topics if t in cat.state.topics}
    return {t: mark for t, mark in found.items() if mark is not None}


def _read_tokens(tokens: TokenStore, group: str, topics: list[str]
                 ) -> tuple[dict[str, Versioned], list[Anomaly]]:
    """Each topic's token; a malformed one is the topic's anomaly, not the group's failure."""
    reads, unreadable = {}, []
    for topic in topics:
        try:
            reads[topic] = tokens.read(group, topic)
        except MalformedTokenError as exc:
            unreadable.append(Anomaly("malformed_token", topic, -1, exc.line, exc.line, "failed",
                                      str(exc)))
    return reads, unreadable


def _names_taken(group: Group, topics: set[str], archived: set[str]) -> list[Anomaly]:
    """Pairs of topics of a parsed table group where one is named like the other's
    dead-letter table (`X` and `X_dlq`): both would write one table, and its rows of two
    shapes fail every commit. A pair is one whether both are in Kafka or one of them was
    archived (the catalog knows it; a topic deleted from Kafka keeps its tables). The one
    archived first keeps the name; the other, if Kafka has it, is held, named in the
    anomaly, and the group's other topics go on. Neither archived yet: `X_dlq` is held."""
    if not group.parsed_table:
        return []
    suffix = layout.DEAD_LETTER_SUFFIX
    known = topics | archived
    pairs = {(t, t.removesuffix(suffix)) for t in known if t.endswith(suffix)
             and t.removesuffix(suffix) in known}
    held = []
    for named, base in sorted(pairs):
        if named in archived and base not in archived:
            if base in topics:
                held.append(Anomaly("name_taken", base, -1, 0, 0, "failed",
                                    f"its dead-letter table would be the table of topic "
                                    f"{named} in group {group.name}, archived first ({named})"))
        elif named in topics:
            held.append(Anomaly("name_taken", named, -1, 0, 0, "failed",
                                f"its table would be the dead-letter table of topic {base} "
                                f"in group {group.name} ({named})"))
    return held


def _vanished(group: Group, consumer, reads: dict[str, Versioned], observed: set[str]
              ) -> list[Anomaly]:
    """Topics the group selects and has archived (a token with lines) that Kafka no longer
    has: deleted, or a cluster that lost them; their token waits for a person."""
    candidates = [t for t, r in reads.items()
                  if t not in observed and r.token and r.token.offsets and group.selects(t)]
    if not candidates:
        return []
    existing = consumer.topics()
    return [Anomaly("vanished", t, -1, 0, 0, "failed",
                    "the group has a token for this topic but Kafka has no such topic (deleted, "
                    "or another cluster); its token is kept")
            for t in candidates if t not in existing]


def _refuse_other_clusters(config: Config, group: str, reads: dict) -> None:
    for topic, read in reads.items():
        if read.token and read.token.offsets and read.token.bootstrap != config.bootstrap_servers:
            raise TerminalError(
                f"token {group}/{topic} was written for Kafka at {read.token.bootstrap}, "
                f"but the config says {config.bootstrap_servers}: refusing to apply offsets of "
                f"another cluster. Delete the token to start over.")


def _strays(storage: Storage, config: Config, group: Group, cat: catalog.Catalog,
            slices: list[planning.Slice], superseded: list[str], listings: dict) -> list[str]:
    """Files in the folder of a partition this plan rewinds (a slice starting below what
    the catalog holds), at or beyond the slice's start, that no current row names: an
    abandoned plan's (its commit cut short, its in-flight mark deleted and its token put
    back by hand). They go aside with what the rewind replaces, or a reader of the folder
    would read their messages twice."""
    found = []
    for s in slices:
        topic = cat.state.topics.get(s.topic)
        summary = topic and topic.summaries.get(part_key(s.partition, config.generation))
        if not summary or summary.end is None or s.start >= summary.end:
            continue  # not a rewind: the plan's files take the names an earlier attempt's had
        for url in unlisted(storage, config, group, cat, s, config.generation,
                            set(superseded) | set(found), listings=listings):
            log.warning("%s is in no current row of the catalog (a plan given up before its "
                        "commit wrote it): moved aside with what the rewind replaces", url)
            found.append(url)
    return found


def unlisted(storage: Storage, config: Config, group: Group, cat: catalog.Catalog,
             s: planning.Slice, generation: int, known: set[str], end: float = float("inf"),
             listings: dict | None = None) -> list[str]:
    """The files of the slice's Kafka partition and generation (its plan's: the config's
    may have changed since) whose first offset is in [slice start, end), that no current
    row of the catalog names (and not in known): strays, never a committed file. One listing: the partition's folder, or an event-time group's topic
    tree (only a rewind's, a given-up plan's or a lost slice's cost), kept in `listings`
    for the caller's other slices (a rewind of a topic's 8 partitions lists its tree once,
    not 8 times); a table's reader reads its snapshot."""
    if group.table is not None:
        return []
    current = {f["url"] for r in cat.rows(s.topic, s.partition, generation,
                                          end_after=s.start) for f in row_files(r)}
    where = layout.slice_listing(config.archive_root, group.name,
                                 group.layout.kind == "event_time", s.topic, s.partition,
                                 generation, s.start)
    listings = {} if listings is None else listings
    if where not in listings:
        listings[where] = [url for url, _ in storage.list(where[0], start_after=where[1])]
    return [url for url in listings[where]
            if layout.of_slice(url, generation, s.partition, s.start, end)
            and url not in current and url not in known]


GIVEN_UP = "given_up.json"  # in a run's folder: the run was given up, never to commit


def _put_back_given_up(storage: Storage, config: Config, group: Group, planning_run: str,
                       tokens: TokenStore, cat: catalog.Catalog, tables,
                       listings: dict) -> catalog.Catalog:
    """The run last marked in flight, if a person deleted its mark before its commit
    reached the catalog and no token names it (its commit moved none, or a person put
    older copies back since): the plan was given up, and nothing may stay as it left it.
    What it moved aside comes back (the catalog still lists it, since the commit that
    would have replaced it never came), and what its job wrote that no current row names
    goes aside: a reader of the folders would otherwise miss the first and read the
    second. The same run id planned again (its plan task re-executed) is undone the same
    way but not given up: the new plan replaces it. Idempotent (a kill in between: the
    next plan does it again); noted done, so later plans read one small file. A table
    group's run may have reached its tables before it was given up: taken out of them
    again (needs tables). Returns the catalog, with the given-up plan's spots. listings:
    the plan's folder listings (runs.unlisted), kept while nothing moves."""
    root = config.archive_root
    if group.table is not None and tables is None:
        return cat
    note = inflight.last(storage, root, group.name)
    if note is None or note.get("given_up"):
        return cat
    run_id = note["run_id"]
    if cat.state.has_run(run_id) or is_final(stored_outcome(storage, root, group.name, run_id)):
        return cat  # committed
    stored = storage.get_or_none(layout.run_file(root, group.name, run_id, "plan.json"))
    plan = Plan.from_json(stored) if stored is not None else None
    if plan is None or plan.run_id != run_id:
        return cat
    if any((t := tokens.read(group.name, topic).token) and t.run_id == run_id
           for topic in plan.topics()):
        return cat  # a commit cut short after a token: _cut_short's
    spots = catalog.plan_marks(json.loads(stored))["spots"]
    if run_id != planning_run:  # (its own plan task re-executed: replaced, not given up)
        # first: from here on a re-executed commit of the run refuses (commit.protocol);
        # its spots too, for a catalog rebuilt from the run folders
        storage.put_bytes(layout.run_file(root, group.name, run_id, GIVEN_UP), json.dumps(
            {"run_id": run_id, "given_up_at": now_utc().isoformat(timespec="seconds"),
             "spots": spots}).encode())
        # where its slices began stays known: what retention deletes there from now on, or
        # deleted since its commit moved a token a person then deleted too, is a loss to
        # report, as under a committed plan's spots (losses.archived_through)
        cat = catalog.append(storage, config, group.name, lambda now: None if _spotted(
            now.state, spots) else {"kind": "give_up", "run_id": run_id, "spots": spots})
    restored, leftovers = _undo_given_up(storage, config, group, cat, plan, tables, listings)
    log.warning("run %s was %s before its commit (its _inflight.json deleted by hand): %d "
                "files it moved aside are back, %d it wrote are moved aside", run_id,
                "planned again" if run_id == planning_run else "given up", restored,
                len(leftovers))
    inflight.note_given_up(storage, root, group.name, note)
    return cat


def _spotted(state: State, spots: list[dict]) -> bool:
    """Whether the catalog knows each of the spots already (a give-up done again)."""
    return all((t := state.topics.get(s["topic"])) is not None
               and t.spots.get(part_key(s["partition"], s["generation"]), -1) >= s["offset"]
               for s in spots)


def _undo_given_up(storage: Storage, config: Config, group: Group, cat: catalog.Catalog,
                   plan: Plan, tables, listings: dict) -> tuple[int, list[str]]:
    """_put_back_given_up's moves: the count of files put back, the files moved aside.
    A table group moves no file (its table reads its snapshot; its maintenance sweeps a
    given-up run's files as orphans): its run's commit, if one reached a table, is
    withdrawn there."""
    root = config.archive_root
    if group.table is not None:
        written = manifests.read(storage, root, group.name, plan.run_id)
        for topic in plan.topics() if written is not None else ():
            tables.withdraw_run(plan, written, topic)
        return 0, []
    current = {f["url"] for s in plan.slices
               for r in cat.rows(s.topic, s.partition, plan.generation, end_after=s.start)
               for f in row_files(r)}
    restored = 0
    for url in plan.superseded:
        aside = layout.superseded(root, plan.run_id, url)
        if url in current and storage.size(aside) is not None:
            storage.move(aside, url)  # over the job's file of the same name, if any
            restored += 1
    written = manifests.read(storage, root, group.name, plan.run_id)
    leftovers = {f["url"] for e in (written or {}).get("slices", ()) for f in row_files(e)
                 if f["url"] not in current and storage.size(f["url"]) is not None}
    for s in plan.slices:
        leftovers.update(unlisted(storage, config, group, cat, s, plan.generation, leftovers,
                                  listings=listings))
    for url in sorted(leftovers):
        storage.move(url, layout.superseded(root, plan.run_id, url))
    for where in [w for w in listings if any(url.startswith(w[0].rstrip("/") + "/")
                                             for url in leftovers)]:
        del listings[where]  # changed since it was listed (the restores came before)
    return restored, sorted(leftovers)


def _move_aside(storage: Storage, config: Config, plan: Plan) -> None:
    """The files the plan's rewind replaces, to `_superseded/<run id>/`. Idempotent: a
    re-executed plan finds the saved copy, and then what is at the old path is this plan's
    own output (a re-archived slice has its predecessor's name), never moved onto the copy.
    Before the job has finished (no manifest) that output is unfinished, or the original
    whose move was cut short between copy and delete: it goes, the job writes it again.
    Once it has, nothing moves: a plan resumed after a kill moved nothing aside if the
    files were gone already (an earlier plan, abandoned, had moved them).
    A table group's files stay where they are: the table's current snapshot reads them
    until the run's commit replaces them in one snapshot (older ones keep reading them),
    and the run writes its own under its own folder (layout.table_data_file)."""
    if config.group(plan.group).table is not None:
        return
    if manifests.read(storage, config.archive_root, plan.group, plan.run_id) is not None:
        return  # archived: what is at the old paths is the job's output (or was never there)
    for url in plan.superseded:
        aside = layout.superseded(config.archive_root, plan.run_id, url)
        if storage.size(aside) is None:
            if storage.size(url) is not None:
                storage.move(url, aside)
        else:
            storage.delete(url)


def now_utc() -> datetime:
    return datetime.now(timezone.utc)
