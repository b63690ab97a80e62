"""Each alert mail on example facts, with what it means and what to do: the runbook's mail
pages (docs/hooks.py renders them with the functions that send the mails) and
tests/unit/test_docs.py (every kind of kafka_archive.monitor.alerts.MAIL_KINDS has one)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from kafka_archive.audit.checkpoint import Alarm
from kafka_archive.monitor import alerts
from kafka_archive.monitor.freshness import PartitionFreshness, TopicFreshness
from kafka_archive.plan.planning import Anomaly

RUN = "scheduled__2026-11-27T06:15:00+00:00"
LINK = "https://airflow.example.com/dags/kafka_archive_backup/runs/" + RUN
NOW_MS = 1_796_000_000_000


@dataclass(frozen=True)
class MailExample:
    title: str
    builder: str                    # the function of kafka_archive.monitor.alerts
    meaning: str                    # what happened, for the on-call reader
    action: str                     # what to do (Markdown)
    render: Callable[[], alerts.Message]


EXAMPLES = {
    "task-failed": MailExample(
        "a task failed", "task_failed",
        "A task of a group's archive DAG failed for good: Airflow's retries are spent, or the "
        "error is terminal (retrying cannot help, so the task failed at once). The mail says "
        "which kind, the error as the task raised it (secrets masked), and what the run was "
        "archiving. The same failure in the following runs is not mailed again until a run "
        "commits; a reminder follows daily.",
        "- *transient* (Kafka, S3 or Spark unreachable, a lease busy): usually nothing; the "
        "next run tries again. If it keeps failing, check the services from a worker with "
        "`kafka-archive preflight` or the `kafka_archive_preflight` DAG.\n"
        "- *terminal*: the error names the file, key, topic, partition or offsets; fix that "
        "and the next run goes on. A malformed token: fix or delete the line it names "
        "([rewind](../rewind.md)). A config problem: the [reference](../../configure/reference.md).\n"
        "- Nothing was committed half: a failed run's plan is re-executed unchanged by the "
        "next run, or abandoned for a topic whose token a person changed.",
        lambda: alerts.task_failed(
            "backup", RUN, "archive", 3, "TransientError: Kafka at broker-1:9092 cannot be "
            "reached: NoBrokersAvailable", False, None, LINK, LINK + "/tasks/archive",
            "TransientError")),
    "data-lost": MailExample(
        "data lost to retention", "data_lost",
        "Kafka deleted messages (retention) before the archive read them: a token is below "
        "the partition's earliest retained offset. The range is gone from Kafka for good. "
        "With `on_retention_gap: fail` (the default) the topic is held out of every run until "
        "a person accepts the loss; with `skip` the run went on and recorded the loss.",
        "- Find out why the archive fell behind (failing runs, a backlog, a paused DAG) and "
        "whether another copy of the range exists.\n"
        "- Accept the loss with the command the mail gives (`kafka-archive accept-loss ...`, "
        "recorded with your name, the time and the reason), or trigger the DAG with "
        "`accept_loss`; `verify` then lists the range as known loss, never as a hole.\n"
        "- To stop holding topics in future: `on_retention_gap: skip` (losses recorded, "
        "mailed, not held).",
        lambda: alerts.data_lost(
            "backup", RUN, [Anomaly("retention_gap", "billing.events", 3, 120_000, 125_400,
                                    "failed")], True, LINK)),
    "topics-held": MailExample(
        "a topic left out of the archive", "topics_held",
        "A topic was left out of the run for a problem other than retention, and the group's "
        "other topics were archived. The *problem* column says which: a token ahead of "
        "Kafka's latest offset (a topic re-created, or a token from another cluster); an "
        "archive that reaches past Kafka's latest offset, or Kafka holding another message "
        "at an archived offset than the archive does (a topic re-created, or an unclean "
        "leader election that truncated it; a rewind would replace archived messages with "
        "others, so nothing was moved aside); a partition without a leader (Kafka gave no "
        "offsets of the topic); a token the archive cannot read; a topic gone from Kafka; or "
        "two topics that would share one table name.",
        "Follow the *what to do* column: it names the token line, the setting or the topic.\n"
        "- A token ahead of Kafka after a topic was re-created: delete the token (or its "
        "line) so the topic is archived again from `start_from` ([rewind](../rewind.md)).\n"
        "- Another message at an archived offset, or an archive ahead of Kafka: set a new "
        "`generation` in the config, then delete the token: the new messages get files of "
        "their own and the archived ones stay ([rewind](../rewind.md)).\n"
        "- A partition without a leader: nothing in the archive; the next run archives the "
        "topic once Kafka serves it again. If it lasts, see to the brokers.",
        lambda: alerts.topics_held(
            "backup", RUN, [
                Anomaly("token_ahead", "orders", 0, 5_000, 1_200, "failed"),
                Anomaly("offsets_reused", "payments", 2, 88_412, 88_413, "failed"),
                Anomaly("unavailable", "clicks", -1, 0, 0, "failed",
                        "Kafka gives no offsets of this topic (a partition without a "
                        "leader?): LeaderNotAvailableError")],
            LINK)),
    "tokens-left-as-found": MailExample(
        "a token changed by hand during a run", "tokens_left_as_found",
        "While a run was in flight, a person (or a CLI rewind or accept-loss) changed a "
        "token the run had planned from. A person's change wins: the run committed its other "
        "topics and left that token as found; the next run archives from it.",
        "Nothing, unless the change was a mistake. Nothing was lost or archived twice; the "
        "next run moves aside whatever it archives again.",
        lambda: alerts.tokens_left_as_found(
            "backup", RUN, {"clicks": "the token was deleted (a rewind of the whole topic)"},
            LINK)),
    "deadline-missed": MailExample(
        "a run missed its deadline", "deadline_missed",
        "A run had not finished `deadline` (default 30 minutes) after it was queued: Airflow's "
        "deadline alert, mailed by the triggerer. The run may still finish.",
        "Look at the run's tasks: a long Spark job (a backlog: lower `max_records` / "
        "`max_bytes` per run), a task waiting for an executor slot, or a retry. If runs are "
        "always slow, raise `deadline` or give the group more Spark.",
        lambda: alerts.deadline_missed(
            "backup", RUN, 1800, "2026-11-27T06:15:02+00:00", "2026-11-27T06:45:02+00:00",
            "running", None, "the plan in flight could not be read", LINK)),
    "freshness-past-sla": MailExample(
        "the archive is behind its SLA", "freshness_past_sla",
        "After a commit, a topic's archive was further behind Kafka than its `freshness` SLA "
        "(default 2 hours): the time between Kafka's newest message and the newest archived "
        "one.",
        "A backlog (raise `max_records` / `max_bytes` or run more often), `min_records` / "
        "`max_delay` holding partitions back, or failing runs are the usual causes. The "
        "group's page in the Airflow UI shows the lag per partition.",
        lambda: alerts.freshness_past_sla(
            "backup", RUN, [TopicFreshness("billing.events", 1800, 9000.0, (PartitionFreshness(
                "billing.events", 0, 1_000, 51_000, NOW_MS, NOW_MS - 9_000_000,
                NOW_MS - 8_990_000),))], NOW_MS, LINK)),
    "audit-mismatch": MailExample(
        "an audit mismatch", "audit_mismatch",
        "The audit compared what producers reported sending in a time window with what the "
        "archive holds for it, and they differ: MISSING (fewer archived) or EXCESS (more: "
        "archived twice, or sent outside the audited producer). Each mismatch is mailed once "
        "and stays open until it turns OK or a person acknowledges it.",
        "Run the commands the mail lists: `status` and `verify` for holes, `audit --rescan` to "
        "count the files themselves, `cat` to read the window's messages. Once explained, "
        "`kafka-archive audit ack ...` records who, when and why ([audit](../audit.md)).",
        lambda: alerts.audit_mismatch(
            "backup", [Alarm("billing.events", "checkout-service", NOW_MS - 3_600_000, 60_000,
                             "MISSING", 1200, 1150, "2026-11-27T06:30:00+00:00", RUN)],
            {}, LINK, "s3://archive/_audit/backup/report.html", 7 * 86400, 0, 0)),
}
