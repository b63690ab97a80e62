"""Bad configs a person would write: each is refused whole, with one line naming the file,
the key path and what is wrong (a "did you mean" for a typo)."""

import os
import subprocess
import sys
import textwrap

import pytest

from kafka_archive import config
from kafka_archive.errors import ConfigError

BASE = "kafka: {bootstrap_servers: 'b:9092'}\narchive_root: s3://bucket/archive\n"
BACKUP = BASE + "groups:\n  backup:\n"

# (config text, the error after "<file>: ")
BAD = [
    (BASE + "grups: {backup: {}}\n", "grups: unknown key; did you mean groups?"),
    (BACKUP + "    topic: {include: [x]}\n",
     "groups.backup.topic: unknown key; did you mean topics?"),
    (BACKUP + "    policy: {max_recrods: 10}\n",
     "groups.backup.policy.max_recrods: unknown key; did you mean max_records?"),
    (BACKUP + "    policy: {max_records: lots}\n",
     "groups.backup.policy.max_records: must be a valid integer, unable to parse string as an "
     "integer, got 'lots'"),
    (BACKUP + "    policy: {max_records: true}\n",
     "groups.backup.policy.max_records: must be an integer, got True"),
    (BACKUP + "    policy: {max_bytes: -5}\n",
     "groups.backup.policy.max_bytes: must be greater than or equal to 1, got -5"),
    (BACKUP + "    topics: {include: ['orders(']}\n",
     "groups.backup.topics.include.0: bad regex 'orders(': missing ), unterminated subpattern "
     "at position 6"),
    (BACKUP + "    topic_policies: {'billing[': {max_delay: 5m}}\n",
     "groups.backup.topic_policies.billing[: bad regex 'billing[': unterminated character set "
     "at position 7"),
    (BACKUP + "    schedule: every 15 minutes\n",
     "groups.backup.schedule: not a cron schedule (Exactly 5, 6 or 7 columns has to be "
     "specified for iterator expression.); use 5 fields like '*/15 * * * *', a preset like "
     "@hourly, @once or null"),
    (BACKUP + "    schedule: '0 */15 * * * *'\n",
     "groups.backup.schedule: cron schedule '0 */15 * * * *' has 6 fields; Airflow takes 5"),
    (BACKUP + "    deadline: half an hour\n",
     "groups.backup.deadline: must be a duration like 300, '15m' or '2h', got 'half an hour'"),
    (BASE + "audit: {window: 0s}\n", "audit.window: must be greater than or equal to 1, got 0"),
    (BACKUP + "    format: {kind: avro}\n",
     "groups.backup.format.kind: unknown format kind 'avro'; one of sequencefile, text, baldr, parquet"),
    (BACKUP + "    on_retention_gap: ignore\n",
     "groups.backup.on_retention_gap: must be 'fail' or 'skip', got 'ignore'"),
    ("kafka: {bootstrap_servers: 'b:9092'}\narchive_root: hdfs://nn/archive\n",
     "archive_root: must be s3://bucket/prefix or file:///absolute/path (no other scheme), "
     "got 'hdfs://nn/archive'"),
    (BASE + "token_root: ${KAFKA_ARCHIVE_TEST_UNSET}\n",
     "token_root: ${KAFKA_ARCHIVE_TEST_UNSET} is not set and has no default"),
    ("kafka: {}\narchive_root: s3://b/a\n", "kafka.bootstrap_servers: missing required key "
                                            "(or conn_id: an Airflow connection of type kafka "
                                            "whose extra holds bootstrap.servers)"),
    ("archive_root: s3://b/a\n", "kafka.bootstrap_servers: missing required key "
                                  "(or conn_id: an Airflow connection of type kafka "
                                  "whose extra holds bootstrap.servers)"),
    ("kafka: {bootstrap_server: 'b:9092'}\narchive_root: s3://b/a\n",
     "kafka.bootstrap_server: unknown key; did you mean bootstrap_servers?"),
    (BASE + "audit: {groups: [bakup]}\n",
     "audit.groups: names bakup, not under groups (have: backup)"),
    (BASE + "alerts: {email_to: oncall}\n",
     "alerts.email_to.0: must be an email address, got 'oncall'"),
    (BASE + "groups:\n  'my group': {}\n",
     "groups.my group: a group name may only use letters, digits, _ and -, got 'my group'"),
]


def load(tmp_path, text):
    path = tmp_path / "x.yaml"
    path.write_text(text)
    return config.load(path), path


@pytest.mark.parametrize("text, message", BAD, ids=[m.split(":")[0] for _, m in BAD])
def test_bad_config_is_refused_naming_file_and_key(tmp_path, monkeypatch, text, message):
    monkeypatch.delenv("KAFKA_ARCHIVE_TEST_UNSET", raising=False)
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, text)
    assert str(caught.value) == f"{tmp_path / 'x.yaml'}: {message}"


def test_every_problem_is_listed_at_once(tmp_path):
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, BACKUP + "    policy: {max_bytes: 0, min_records: 0}\n    deadline: x\n")
    lines = str(caught.value).splitlines()
    assert [line.split(": ")[1] for line in lines] == [
        "groups.backup.policy.max_bytes", "groups.backup.policy.min_records",
        "groups.backup.deadline"]


@pytest.mark.parametrize("schedule", ["'*/15 * * * *'", "'@hourly'", "'@once'", "null"])
def test_schedules_airflow_takes_are_kept(tmp_path, schedule):
    cfg, _ = load(tmp_path, BACKUP + f"    schedule: {schedule}\n")
    assert cfg.group("backup").schedule == (None if schedule == "null" else schedule.strip("'"))


def test_values_from_the_environment_are_typed(tmp_path, monkeypatch):
    monkeypatch.setenv("KAFKA_ARCHIVE_TEST_CAP", "10")
    monkeypatch.setenv("KAFKA_ARCHIVE_TEST_ESCAPE", "true")
    cfg, _ = load(tmp_path, BACKUP + "    policy: {max_records: '${KAFKA_ARCHIVE_TEST_CAP}'}\n"
                  "    format: {kind: text, escape_newlines: '${KAFKA_ARCHIVE_TEST_ESCAPE}'}\n")
    assert cfg.group("backup").policy.max_records == 10
    assert cfg.group("backup").format.escape_newlines is True


def test_kafka_properties_are_text(tmp_path):
    cfg, _ = load(tmp_path, BASE.replace("{bootstrap_servers: 'b:9092'}",
                                         "{bootstrap_servers: 'b:9092', properties: "
                                         "{request.timeout.ms: 5000, enable.idempotence: true}}"))
    assert cfg.kafka_properties == {"request.timeout.ms": "5000", "enable.idempotence": "true"}


def test_airflow_import_error_shows_the_message(tmp_path):
    """A DAG file over a broken config: Airflow's import error ends with our line."""
    path = tmp_path / "x.yaml"
    path.write_text(BACKUP + "    policy: {max_recrods: 10}\n")
    dag_file = config.REPO / "dags" / "kafka_archive.py"
    code = textwrap.dedent(f"""
        from airflow.dag_processing.dagbag import DagBag
        errors = DagBag(dag_folder={str(dag_file)!r}).import_errors
        print("LAST LINE:", errors[{str(dag_file)!r}].strip().splitlines()[-1])
    """)
    env = {**os.environ, "KAFKA_ARCHIVE_CONFIG": str(path), "AIRFLOW_HOME": str(tmp_path / "af")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    last = [line for line in out.stdout.splitlines() if line.startswith("LAST LINE: ")]
    assert last == [(f"LAST LINE: kafka_archive.errors.ConfigError: {path}: "
                                  "groups.backup.policy.max_recrods: unknown key; did you mean "
                                  "max_records?")], out.stdout[-2000:] + out.stderr[-2000:]
