"""What a group's page in the Airflow UI shows, gathered with the functions the CLI uses:
per partition the lag (kafka_archive.monitor.status, as `kafka-archive status`), per
topic the freshness against its SLA (kafka_archive.monitor.freshness, as the DAG's
freshness task), the last committed runs with their throughput, the audit's unresolved
mismatches (kafka_archive.audit.incremental.alarms, as `kafka-archive audit list`) and
the losses to retention accepted (kafka_archive.plan.losses, as `verify` lists them).

`run_summary` is pure; `gather` and `recent_runs` read Kafka, the tokens and the archive.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timezone

from kafka_archive import catalog, manifest
from kafka_archive.audit import incremental
from kafka_archive.audit.checkpoint import Alarm
from kafka_archive.config import Config
from kafka_archive.monitor import freshness, status, trends
from kafka_archive.plan import inflight
from kafka_archive.storage import Storage
from kafka_archive.tokens import TokenStore

RUNS_SHOWN = 10


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    planned_at: str
    committed_at: str
    records: int
    bytes: int
    files: int
    seconds: float | None  # from the plan to the commit (Spark's start-up included)

    @property
    def mb_per_s(self) -> float | None:
        """Megabytes (10^6 bytes) written per second, plan to commit."""
        return self.bytes / 1e6 / self.seconds if self.seconds else None


@dataclass(frozen=True)
class TopicFreshness:
    topic: str
    lag_s: float | None  # None: Kafka did not tell, or the token is unreadable
    sla_s: int
    problem: str | None = None  # why the lag is not known (a malformed token)

    @property
    def past_sla(self) -> bool:
        return self.lag_s is not None and self.lag_s > self.sla_s


@dataclass(frozen=True)
class GroupOverview:
    group: str
    at_ms: int
    partitions: list[status.PartitionStatus]
    freshness: list[TopicFreshness]
    runs: list[RunSummary]          # newest first
    audited: bool
    alarms: list[Alarm]             # new, open and acknowledged mismatches
    accepted_losses: list[catalog.AcceptedLoss]  # ranges retention deleted, accepted
    in_flight: inflight.InFlight | None = None  # planned, not committed (failed, or running)
    # Airflow's state of that run ("running", "queued", "failed", "success"); None when
    # Airflow was not asked (the CLI) or does not know the run (deleted, another deployment)
    in_flight_state: str | None = None
    # of a failed run: the task that failed first and its try, whose log says why
    in_flight_failed_task: tuple[str, int] | None = None
    deadline_s: int | None = None  # the group's: a run in flight longer is stuck
    history: tuple[dict, ...] = ()  # the runs of the last days, oldest first (trends)


@dataclass(frozen=True)
class Glance:
    """A group at a glance, for the all-groups page: a catalog read, no Kafka call of its
    own (glance: one for every group)."""
    group: str
    topics: int
    partitions: int
    files: int
    last_commit: str | None
    in_flight: inflight.InFlight | None
    open_alarms: int | None  # None: not audited
    problem: str | None = None  # its catalog cannot be read: the rest is unknown
    # what the group selects in Kafka now, as its next plan would (None: Kafka not asked)
    selected_topics: int | None = None
    selected_partitions: int | None = None
    # as GroupOverview's: Airflow's state of the run in flight, the group's deadline, now
    in_flight_state: str | None = None
    deadline_s: int | None = None
    at_ms: int = 0
    connect_problem: str | None = None  # its Spark Connect server cannot be reached


def glance(config: Config, storage: Storage, consumer=None,
           run_state: Callable[[str, str], str | None] | None = None,
           connect_problem: Callable[[str], str | None] | None = None,
           now_ms: int | None = None) -> list[Glance]:
    """consumer: Kafka's metadata (one call for every group) for the topics and partitions
    each group selects; without it, what the catalog holds only. run_state(group, run id):
    Airflow's state of a run (as gather's); connect_problem(conn id): why the Spark
    Connect server a connection names cannot be reached, or None."""
    now_ms = now_ms if now_ms is not None else int(datetime.now(timezone.utc).timestamp() * 1000)
    problems = {conn: connect_problem(conn) for conn in sorted(
        {g.spark_connect for g in config.groups.values() if g.spark_connect})
    } if connect_problem else {}
    # one metadata call for every group: what each selects now (None: Kafka not asked)
    partitions = ({t: len(consumer.partitions_for_topic(t) or ()) for t in consumer.topics()}
                  if consumer is not None else None)
    found = []
    for name in sorted(config.groups):
        g, group = _glance(config, storage, name), config.group(name)
        chosen = None if partitions is None else [t for t in partitions if group.selects(t)]
        found.append(replace(
            g, at_ms=now_ms, deadline_s=group.deadline_s,
            connect_problem=problems.get(group.spark_connect),
            in_flight_state=run_state(name, g.in_flight.run_id)
            if g.in_flight is not None and run_state else None,
            selected_topics=None if chosen is None else len(chosen),
            selected_partitions=None if chosen is None else sum(partitions[t] for t in chosen)))
    return found


def _glance(config: Config, storage: Storage, name: str) -> Glance:
    try:
        cat = catalog.open_catalog(storage, config, name)
    except catalog.CatalogUnreadable as exc:  # one group's damage hides no other group
        return Glance(name, 0, 0, 0, None, inflight.current(
            storage, config.archive_root, name), None, str(exc))
    summaries = [s for t in cat.state.topics.values() for s in t.summaries.values()
                 if s.rows]
    commits = [r for r in cat.state.recent if r.get("kind", "commit") == "commit"]
    return Glance(
        name, sum(1 for t in cat.state.topics.values()
                  if any(s.rows for s in t.summaries.values())),
        len(summaries), sum(s.files for s in summaries),
        commits[0]["committed_at"] if commits else None,
        inflight.current(storage, config.archive_root, name),
        sum(1 for a in incremental.alarms(storage, config, name) if a.state != "acknowledged")
        if name in config.audit.groups else None)


@dataclass(frozen=True)
class ArchivedFile:
    """A current file of a partition, as its catalog row names it."""
    url: str
    start: int  # the offsets of its row: [start, end)
    end: int
    records: int
    bytes: int
    run: str    # the name of the folder of the run that wrote it (its run id, made safe)


@dataclass(frozen=True)
class PartitionFiles:
    """A partition's current files, oldest first, and its table (a table group's)."""
    group: str
    topic: str
    partition: int
    files: list[ArchivedFile]
    table: str | None  # `<catalog>.<namespace>.<topic>`; None: a files group


def partition_files(config: Config, group: str, storage: Storage, topic: str,
                    partition: int) -> PartitionFiles:
    """What the catalog holds of one partition now: one topic's rows read, on demand."""
    spec = config.group(group).table
    rows = catalog.open_catalog(storage, config, group).rows(topic, partition=partition)
    return PartitionFiles(
        group, topic, partition,
        [ArchivedFile(f["url"], row["start"], row["end"], f["records"], f["bytes"],
                      row.get("_run", "?").rstrip("/").rsplit("/", 1)[-1])
         for row in rows for f in manifest.row_files(row)],
        f"{spec.catalog}.{spec.namespace}.{topic}" if spec else None)


def run_summary(run: dict) -> RunSummary:
    """A run as the catalog keeps it (catalog.run_summary). Pure."""
    seconds = freshness.plan_to_commit_s(run.get("planned_at"), run.get("committed_at"))
    return RunSummary(run.get("run_id", "?"), run.get("planned_at", "?"),
                      run.get("committed_at", "?"), run.get("records", 0), run.get("bytes", 0),
                      run.get("files", 0),
                      None if seconds is None else max(seconds, 1.0))  # times are in seconds


def recent_runs(cat: catalog.Catalog, limit: int = RUNS_SHOWN) -> list[RunSummary]:
    """The group's last `limit` committed runs, newest first, from the catalog."""
    return [run_summary(run) for run in cat.state.recent
            if run.get("kind", "commit") == "commit"][:limit]


def topic_freshness(config: Config, group_name: str, tokens: TokenStore, consumer,
                    now_ms: int, cat: catalog.Catalog | None = None) -> list[TopicFreshness]:
    group = config.group(group_name)
    offsets, unreadable = freshness.read_tokens(tokens, group.name, tokens.topics(group.name))
    partitions = freshness.observe(consumer, group, offsets, [], unreadable=unreadable,
                                   caught_up_at=freshness.caught_up(cat) if cat else None)
    lags = freshness.topic_lags(partitions, now_ms)
    return [TopicFreshness(t, lags.get(t), group.policy_for(t).freshness_s, unreadable.get(t))
            for t in sorted({p.topic for p in partitions} | set(unreadable))]


def gather(config: Config, group: str, storage: Storage, tokens: TokenStore, consumer,
           now_ms: int | None = None,
           run_state: Callable[[str], str | None] | None = None,
           failed_task: Callable[[str], tuple[str, int] | None] | None = None) -> GroupOverview:
    """run_state: Airflow's state of a run of the group's DAG, by run id (the UI asks
    Airflow's database; without it the page cannot tell a running run from a failed one);
    failed_task: of a failed run, its first failed task and that task's try."""
    now_ms = now_ms if now_ms is not None else int(datetime.now(timezone.utc).timestamp() * 1000)
    config.group(group)  # an unknown group fails here, naming the configured ones
    audited = group in config.audit.groups
    cat = catalog.open_catalog(storage, config, group)
    held = inflight.current(storage, config.archive_root, group)
    return GroupOverview(
        group=group, at_ms=now_ms,
        partitions=status.status(config, tokens, consumer, now_ms, group, storage),
        freshness=topic_freshness(config, group, tokens, consumer, now_ms, cat),
        runs=recent_runs(cat),
        audited=audited,
        alarms=incremental.alarms(storage, config, group) if audited else [],
        accepted_losses=[catalog.AcceptedLoss(**a) for a in cat.state.accepted],
        in_flight=held,
        in_flight_state=(state := run_state(held.run_id) if held is not None and run_state
                         else None),
        in_flight_failed_task=failed_task(held.run_id)
        if held is not None and failed_task and state == "failed" else None,
        deadline_s=config.group(group).deadline_s,
        history=tuple(trends.read(storage, config.archive_root, group,
                                  datetime.fromtimestamp(now_ms / 1000, timezone.utc))))
