"""Alert emails from a real Airflow (scheduler, LocalExecutor, triggerer): the run deadline
missed (a Deadline Alert, sent by the triggerer), a task failure (on_failure_callback in
the task's process) and a topic left lagging past its freshness SLA by a commit (the
freshness task). Prints the delay from incident to mail; the target is under 2 minutes."""

from __future__ import annotations

import email
import email.policy
import re
import time
from html import unescape
from datetime import datetime, timedelta, timezone
from pathlib import Path
from urllib.parse import quote

from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic

from kafka_archive.monitor.alerts import _span as span
from tests.support.browser import log_in, wait_for
from tests.support.mail import html_of, secrets

DAG = "kafka_archive_backup"
TARGET_S = 120


def make_topic(kafka: str, name: str, partitions: int, messages: int,
               timestamps_ms: list[int] | None = None) -> None:
    admin = KafkaAdminClient(bootstrap_servers=kafka)
    admin.create_topics([NewTopic(name, partitions, 1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=kafka, acks="all")
    for i in range(messages):
        producer.send(name, value=f"message {i}".encode(), partition=i % partitions,
                      timestamp_ms=timestamps_ms[i] if timestamps_ms else None)
    producer.flush()
    producer.close()


def wait_for_mail(maildir, subject_part: str, timeout_s: float):
    """(arrival time, message) of the first mail whose subject contains subject_part."""
    import email
    from email import policy

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for path in sorted(maildir.glob("*.eml")):
            message = email.message_from_bytes(path.read_bytes(), policy=policy.default)
            if subject_part in message["Subject"]:
                return int(path.name.split("-")[0]) / 1e9, message
        time.sleep(0.5)
    raise AssertionError(f"no mail with {subject_part!r} in the subject after {timeout_s:.0f}s")


def mails_about(maildir, subject_part: str) -> list:
    import email
    from email import policy

    return [path for path in sorted(maildir.glob("*.eml")) if subject_part in email.message_from_bytes(
        path.read_bytes(), policy=policy.default)["Subject"]]


def parsed_since(stack, when: float, timeout_s: float = 120) -> None:
    """Ask the dag-processor to parse the DAG's file again (Airflow's REST API, as the
    UI's "reparse" does), and wait until it has, after `when` (a config change)."""
    token = stack.api.get(f"/api/v2/dags/{DAG}/details").json()["file_token"]
    r = stack.api.put(f"/api/v2/parseDagFile/{token}")
    assert r.status_code == 201, r.text
    deadline = time.monotonic() + timeout_s
    while True:
        details = stack.api.get(f"/api/v2/dags/{DAG}/details").json()
        parsed = details.get("last_parsed_time")
        if parsed and datetime.fromisoformat(parsed.replace("Z", "+00:00")).timestamp() > when:
            return
        assert time.monotonic() < deadline, f"{DAG} not parsed again in {timeout_s}s"
        time.sleep(1)


def assert_no_secret_in(stack, run_id: str, message) -> None:
    texts = {"mail": message.as_string() + html_of(message)}
    for task, state in stack.task_states(DAG, run_id).items():
        if state not in (None, "skipped", "upstream_failed"):
            texts[f"log of {task}"] = stack.task_log(DAG, run_id, task)
    for secret in secrets(stack_env()):
        for where, text in texts.items():
            assert secret not in text, f"a configured secret appears in the {where}"


def stack_env() -> dict[str, str]:
    from tests.support import localservices

    return localservices.client_env(localservices.local_env(),
                                    localservices.SERVICES_DIR / "airflow")


def report(what: str, incident: datetime, arrived: float) -> None:
    delay = arrived - incident.timestamp()
    print(f"\nALERT DELAY {what}: {delay:.1f} s from incident to mail")
    assert delay < TARGET_S, f"{what}: mail {delay:.0f}s after the incident"


def when(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_deadline_missed_is_mailed_by_the_triggerer(airflow_stack, kafka, smtp_maildir, unique):
    cfg = airflow_stack.config()
    deadline_s = cfg.group("backup").deadline_s
    assert deadline_s <= 30, "the test stack's config should set a short deadline"
    parsed_since(airflow_stack, airflow_stack.config_file.stat().st_mtime)
    topic = f"deadline-{unique}"
    make_topic(kafka, topic, 2, 40)  # archived by Spark: far longer than the deadline
    airflow_stack.unpause(DAG)

    r = airflow_stack.trigger(DAG, {"topics": [topic]}, run_id=f"deadline__{unique}")
    assert r.status_code == 200, r.text
    run_id, queued_at = r.json()["dag_run_id"], when(r.json()["queued_at"])
    arrived, message = wait_for_mail(smtp_maildir, f"run {run_id} not finished", deadline_s + 240)
    run = airflow_stack.wait_for_run(DAG, run_id)

    assert message["Subject"] == (f"[kafka-archive] backup: run {run_id} not finished within "
                                  f"{deadline_s}s of being queued")
    html = html_of(message)
    assert f"{airflow_stack.url}/dags/{DAG}/runs/{quote(run_id, safe='')}" in html
    assert queued_at.isoformat()[:19] in html.replace(" ", "T")
    if f"The plan in flight is run {run_id}" in html:  # planned before the deadline
        assert f"<td>{topic}</td><td>0</td><td>[0, 20)</td><td>20</td>" in html
        assert f"<td>{topic}</td><td>1</td><td>[0, 20)</td><td>20</td>" in html
    else:  # still queued or planning, or another run's plan ahead of it
        assert "No plan is in flight" in html or "The plan in flight is run" in html
    assert run["state"] == "success", airflow_stack.task_states(DAG, run_id)
    finished = when(run["end_date"])
    assert (finished - queued_at).total_seconds() > deadline_s  # the deadline was missed
    assert_no_secret_in(airflow_stack, run_id, message)
    report(f"deadline missed (queued_at + {deadline_s}s)",
           queued_at + timedelta(seconds=deadline_s), arrived)


def test_task_failure_is_mailed_from_the_task_process(airflow_stack, kafka, smtp_maildir,
                                                      unique, browser):
    cfg = airflow_stack.config()
    topic = f"failing-{unique}"
    make_topic(kafka, topic, 1, 3)
    token = f"{cfg.token_root}/backup/{topic}.token"
    Path(token).parent.mkdir(parents=True, exist_ok=True)
    # a token of another cluster fails the whole group (a malformed one only holds its topic)
    Path(token).write_text(f"# group: backup\n# topic: {topic}\nother-cluster:9092 "
                           f"{topic} 0 7\n")
    airflow_stack.unpause(DAG)

    try:
        r = airflow_stack.trigger(DAG, {"topics": [topic]}, run_id=f"failing__{unique}")
        assert r.status_code == 200, r.text
        run_id = r.json()["dag_run_id"]
        run = airflow_stack.wait_for_run(DAG, run_id)
    finally:  # the stack is shared: a malformed token would fail every later full run
        Path(token).unlink()
    arrived, message = wait_for_mail(smtp_maildir, f"task plan failed in run {run_id}", TARGET_S)

    assert run["state"] == "failed"
    # a run that has failed gets the failure mail only: when its deadline fires, no second
    # alarm (a deadline firing while the run was still running may mail, saying so)
    deadline_s = cfg.group("backup").deadline_s
    queued_at, ended_at = (when(run[k]) for k in ("queued_at", "end_date"))
    wait_until = queued_at.timestamp() + deadline_s + 60  # the triggerer's usual delay
    while time.time() < wait_until and not mails_about(smtp_maildir, f"run {run_id} not finished"):
        time.sleep(1)  # no readiness to poll: the deadline may or may not mail
    for path in mails_about(smtp_maildir, f"run {run_id} not finished"):
        body = html_of(email.message_from_bytes(path.read_bytes(), policy=email.policy.default))
        assert "state failed" not in re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", body)), body
    if (ended_at - queued_at).total_seconds() < deadline_s:
        assert not mails_about(smtp_maildir, f"run {run_id} not finished"), "deadline mail"
    html = html_of(message)
    for expected in ("TerminalError", f"token backup/{topic} was written for Kafka at "
                     "other-cluster:9092", "No plan was made",
                     f"{airflow_stack.url}/dags/{DAG}/runs/{quote(run_id, safe='')}/tasks/plan"):
        assert expected in html, expected
    assert_no_secret_in(airflow_stack, run_id, message)
    report("task failure on the real stack", failed_at(airflow_stack, run_id, "plan"), arrived)
    # the DAG's callback found the task's own mail and sent none (issue 56, defect 10)
    assert "handled by its task (plan)" in dags_callback_handled(run_id)
    assert len(mails_about(smtp_maildir, f"in run {run_id}")) == 1

    # the mail's link opens the failed task of that run in the running Airflow UI (one
    # Airflow: the run exists where the link points)
    links = re.findall(r'href="([^"]+)"', html)
    task_link = next(link for link in links if f"/runs/{quote(run_id, safe='')}/tasks/plan" in link)
    assert task_link.startswith(airflow_stack.url), links
    log_in(browser, task_link)
    # the page's text as the script sees it: React re-renders replace elements, so a held
    # element can go stale between two reads
    page = lambda d: d.execute_script("return document.body.innerText")  # noqa: E731
    wait_for(browser, lambda d: run_id in page(d) and "failed" in page(d).lower(),
             "the failed run's plan task", 120)
    assert "not found" not in page(browser).lower()


def dags_callback_handled(run_id: str, timeout_s: float = 120) -> str:
    """The DAG processor's log line of the archive DAG's failure callback for the run
    (airflow.alerting.on_run_failure): once it is there, that callback has decided."""
    from tests.support import localservices

    logs = localservices.SERVICES_DIR / "airflow" / "logs" / "dag_processor"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for path in logs.glob("*/dags-folder/*.log"):
            for line in path.read_text(errors="replace").splitlines():
                if f"run {run_id} failed;" in line:
                    return line
        time.sleep(0.5)
    raise AssertionError(f"the DAG's failure callback did not run for {run_id}")


def failed_at(stack, run_id: str, task: str) -> datetime:
    """When the task logged its failure (the callback mails after that)."""
    r = stack.api.get(f"/api/v2/dags/{DAG}/dagRuns/{run_id}/taskInstances/{task}/logs/1",
                      headers={"Accept": "application/json"})
    for item in r.json()["content"]:
        if isinstance(item, dict) and item.get("event") == "Task failed with exception":
            return when(item["timestamp"])
    raise AssertionError(f"no failure in the log of {task}")


def test_lagging_topic_is_mailed_after_the_commit(airflow_stack, kafka, smtp_maildir, unique):
    topic = f"lagging-{unique}"
    sla_s = airflow_stack.config().group("backup").policy_for(topic).freshness_s
    step_s, first_s = sla_s // 10, int(time.time()) - 2 * sla_s  # the newest: 0.1 SLA ago
    make_topic(kafka, topic, 1, 20, [(first_s + i * step_s) * 1000 for i in range(20)])
    airflow_stack.unpause(DAG)

    # a cap of 5 leaves 15 messages behind: the archive lags Kafka by 15 steps, 1.5 SLAs
    r = airflow_stack.trigger(DAG, {"topics": [topic], "max_records": 5},
                              run_id=f"lagging__{unique}")
    assert r.status_code == 200, r.text
    run_id = r.json()["dag_run_id"]
    run = airflow_stack.wait_for_run(DAG, run_id)
    arrived, message = wait_for_mail(smtp_maildir, f"archive freshness past SLA for {topic}",
                                     TARGET_S)

    # the data is committed, but the run shows red: its freshness task failed (no second mail)
    states = airflow_stack.task_states(DAG, run_id)
    assert run["state"] == "failed" and states["commit"] == "success", states
    assert states["freshness"] == "failed", states
    assert message["Subject"] == f"[kafka-archive] backup: archive freshness past SLA for {topic}"
    html = html_of(message)
    newest_kafka, newest_archived = (datetime.fromtimestamp(first_s + i * step_s, timezone.utc)
                                     for i in (19, 4))
    for expected in ("group <b>backup</b>", f"after run {run_id} committed",
                     f"{topic}: lag {span(15 * step_s)}, SLA {span(sla_s)}, 15 messages waiting",
                     f"<td>0</td><td>5</td><td>20</td><td>15</td>"
                     f"<td>{newest_kafka.isoformat()}</td><td>{newest_archived.isoformat()}</td>",
                     f"{airflow_stack.url}/dags/{DAG}/runs/{quote(run_id, safe='')}"):
        assert expected in html, expected
    assert_no_secret_in(airflow_stack, run_id, message)
    commit = airflow_stack.api.get(f"/api/v2/dags/{DAG}/dagRuns/{run_id}/taskInstances/commit")
    report("freshness past SLA (commit task end)", when(commit.json()["end_date"]), arrived)
    assert "handled by its task (freshness)" in dags_callback_handled(run_id)
    assert len(mails_about(smtp_maildir, topic)) == 1


def test_a_task_killed_before_its_callback_is_mailed_by_the_dags_callback(
        airflow_stack, kafka, smtp_maildir, unique):
    """Issue 56, defect 10: the archive task's process SIGKILLed (as the OOM killer does):
    its own failure callback never runs; once its run fails (here a person marks the retry
    failed rather than waiting for it), the DAG's callback mails it, once, naming the task
    and linking its log. A failure whose task mailed it gets no second mail (the task
    failure and freshness tests above)."""
    import signal

    import psutil

    topic = f"killed-{unique}"
    make_topic(kafka, topic, 2, 40)  # archived by Spark: seconds to catch the task running
    airflow_stack.unpause(DAG)
    r = airflow_stack.trigger(DAG, {"topics": [topic]}, run_id=f"killed__{unique}")
    assert r.status_code == 200, r.text
    run_id = r.json()["dag_run_id"]
    ti_url = f"/api/v2/dags/{DAG}/dagRuns/{run_id}/taskInstances/archive"
    deadline = time.monotonic() + 300
    while (ti := airflow_stack.api.get(ti_url).json()).get("state") != "running":
        assert time.monotonic() < deadline and ti.get("state") not in ("success", "failed"), ti
        time.sleep(0.2)
    # the task's own process (the supervisor forks it and names it by the task instance)
    title = f"airflow worker -- {ti['id']}"
    while not (worker := [p for p in psutil.process_iter(["cmdline"])
                          if " ".join(p.info["cmdline"] or ()).startswith(title)]):
        assert time.monotonic() < deadline, f"no process {title!r}"
        time.sleep(0.1)
    worker[0].send_signal(signal.SIGKILL)
    while airflow_stack.api.get(ti_url).json()["state"] == "running":
        assert time.monotonic() < deadline, "the killed task still runs"
        time.sleep(0.2)
    r = airflow_stack.api.patch(ti_url, json={"new_state": "failed"})
    assert r.status_code == 200, r.text
    run = airflow_stack.wait_for_run(DAG, run_id)
    arrived, message = wait_for_mail(smtp_maildir, f"task archive failed in run {run_id}",
                                     TARGET_S)

    assert run["state"] == "failed"
    html = unescape(html_of(message))
    for expected in ("ended failed without its own failure handling",
                     "Read the task's log", f"{topic}</td><td>0</td><td>[0, 20)",
                     f"{airflow_stack.url}/dags/{DAG}/runs/{quote(run_id, safe='')}"):
        assert expected in html, (expected, html)
    assert len(mails_about(smtp_maildir, f"in run {run_id}")) == 1
    # as the mail says, the next run re-executes the killed run's plan (and leaves the
    # shared stack's group with nothing in flight)
    after = airflow_stack.trigger(DAG, {"topics": [topic]}).json()["dag_run_id"]
    assert airflow_stack.wait_for_run(DAG, after)["state"] == "success", \
        airflow_stack.task_states(DAG, after)
    assert f"run {run_id} failed before commit; re-executing its plan unchanged" in \
        airflow_stack.task_log(DAG, after, "plan")
