"""What an operator sees, on a real Airflow after one 12-slice run of the backup DAG
(made once for the module):

- the archive task's log: one line per slice and a summary, under 100 lines in all;
- Kafka's own `kafka-consumer-groups --describe` (from the installed Kafka jars) shows the
  consumer group `kafka-archive.backup` at the tokens' offsets;
- the CLI's output pipes: `status --json | head -c 10` and `cat FILE | head -1` end
  without a traceback, `cat --format json` gives the produced records back, and commands
  print no INFO log lines;
- the group's page, behind Airflow's login: refused without a session, and in Chromium
  (headless, logged in through Airflow's login form) its lag numbers equal
  `kafka-archive status --json`; its screenshots are the docs' (docs/screens/: each run
  of this test makes them again, so the pictures in the docs show the page as it is);
- a run in flight as Airflow sees it: running, then failed (needing a person, linked to
  its run and to its failed task's log in the Airflow UI).
"""

from __future__ import annotations

import base64
import json
import re
import shlex
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic

from test_airflow_rest import run_to_end

from kafka_archive import layout
from tests.support import localservices
from tests.support.browser import log_in, wait_for

DAG = "kafka_archive_backup"
SCREENSHOT = localservices.ROOT / "docs" / "screens" / "kafka-archive-ui.png"


def make_topics(kafka: str, names: list[str], partitions: int, messages: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=kafka)
    admin.create_topics([NewTopic(n, partitions, 1) for n in names])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=kafka, acks="all", linger_ms=5)
    for name in names:
        for p in range(partitions):
            for i in range(messages):
                producer.send(name, key=f"k{i}".encode(), value=b"v" * 500, partition=p,
                              headers=[("source", b"ui-test")])
    producer.flush()
    producer.close()


def consumer_group_offsets(kafka: str, group: str) -> dict[tuple[str, int], int]:
    """(topic, partition) -> CURRENT-OFFSET, as Kafka's kafka-consumer-groups tool shows them."""
    jars = localservices.ROOT / ".cache" / "jars" / "kafka"
    out = subprocess.run(["java", "-cp", f"{jars}/*",
                          "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
                          "--bootstrap-server", kafka, "--describe", "--group", group],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    rows = [line.split() for line in out.stdout.splitlines()]
    return {(r[1], int(r[2])): int(r[3]) for r in rows if len(r) >= 6 and r[0] == group}


@dataclass(frozen=True)
class ArchivedRun:
    topics: list[str]
    run_id: str
    cli_env: dict[str, str]
    committed: dict  # the run's committed.json

    def cli(self, *args: str, pipe: str = "") -> subprocess.CompletedProcess:
        """kafka-archive with the stack's config; `pipe`: a shell command its output goes to."""
        command = " ".join(shlex.quote(a) for a in (
            str(Path(sys.executable).parent / "kafka-archive"), *args))
        return subprocess.run(f"set -o pipefail; {command} {pipe}", shell=True,
                               executable="/bin/bash", capture_output=True, timeout=300,
                               env=self.cli_env)


@pytest.fixture(scope="module")
def archived(airflow_stack, airflow_env, kafka, s3) -> ArchivedRun:
    """Three topics of four partitions, 25 messages each, archived by one triggered run."""
    unique = uuid.uuid4().hex[:8]
    topics = [f"ui-{unique}-{n}" for n in ("a", "b", "c")]
    make_topics(kafka, topics, partitions=4, messages=25)   # 3 x 4 = 12 slices
    airflow_stack.unpause(DAG)
    r = airflow_stack.trigger(DAG, {"topics": topics})
    assert r.status_code == 200, r.text
    run_id = r.json()["dag_run_id"]
    airflow_stack.wait_for_run(DAG, run_id)
    states = airflow_stack.task_states(DAG, run_id)
    assert [states[t] for t in ("plan", "archive", "commit", "freshness")] == ["success"] * 4, states
    key = layout.run_file(airflow_stack.config().archive_root, "backup", run_id,
                          "committed.json").split("/", 3)[3]
    return ArchivedRun(topics, run_id,
                       {**airflow_env, "KAFKA_ARCHIVE_CONFIG": str(airflow_stack.config_file)},
                       json.loads(s3.client.get_object(Bucket=s3.bucket, Key=key)["Body"].read()))


def test_the_archive_log_has_a_line_per_slice_and_a_summary(airflow_stack, archived):
    log = airflow_stack.task_log(DAG, archived.run_id, "archive").splitlines()
    slices = [line for line in log if re.search(r"slice ui-\S+ partition \d offsets \[0, 25\): "
                                                r"25 records, \d+ bytes -> s3://", line)]
    assert len(slices) == 12, "\n".join(log)
    assert any(re.search(r"archived run .*12 slices, 300 records, \d+ bytes, 12 files in "
                         r"[\d.]+ s \([\d.e-]+ MB/s\)", line) for line in log), "\n".join(log)
    assert len(log) < 100, f"{len(log)} lines:\n" + "\n".join(log)
    print(f"archive task log: {len(log)} lines")


def test_kafka_consumer_groups_shows_the_tokens(airflow_stack, kafka, archived):
    from kafka_archive.tokens import open_store

    tokens = open_store(airflow_stack.config().token_root, None)
    expected = {(t, p): o for t in archived.topics
                for p, o in tokens.read("backup", t).token.offsets.items()}
    assert len(expected) == 12 and set(expected.values()) == {25}
    shown = consumer_group_offsets(kafka, "kafka-archive.backup")
    assert {k: v for k, v in shown.items() if k[0] in archived.topics} == expected


def test_cli_output_pipes_and_round_trips(airflow_stack, s3, archived):
    status = archived.cli("status", "--group", "backup", "--json", pipe="| head -c 10")
    assert status.stdout.startswith(b"[") and len(status.stdout) == 10
    assert b"Traceback" not in status.stderr and b"Error" not in status.stderr, status.stderr
    root = airflow_stack.config().archive_root
    url = f"{root}/backup/{archived.topics[0]}/partition=2/1_2_{0:020d}.seq"
    first = archived.cli("cat", url, pipe="| head -1")
    assert first.stdout.startswith(b"0  ") and first.stdout.count(b"\n") == 1, first
    assert b"Traceback" not in first.stderr, first.stderr
    records = archived.cli("cat", "--format", "json", url)
    assert records.returncode == 0 and records.stderr == b"", records.stderr
    lines = [json.loads(line) for line in records.stdout.decode().splitlines()]
    assert [r["offset"] for r in lines] == list(range(25))
    for i, r in enumerate(lines):
        assert base64.b64decode(r["key"]) == f"k{i}".encode()
        assert base64.b64decode(r["value"]) == b"v" * 500
        assert [(n, base64.b64decode(v)) for n, v in r["headers"]] == [("source", b"ui-test")]
        assert r["timestamp_ms"] > 1_700_000_000_000
    raw = archived.cli("cat", "--format", "raw", "--limit", "2", url)
    assert raw.stdout == b"v" * 500 + b"\n" + b"v" * 500 + b"\n"
    verify = archived.cli("verify", "--group", "backup", "--json")
    report = json.loads(verify.stdout)
    assert report["group"] == "backup" and report["files"] >= 12, report
    assert b" INFO " not in verify.stderr and b"[info" not in verify.stderr, verify.stderr


def test_the_group_page_behind_the_login(airflow_stack, kafka, archived, browser):
    from selenium.webdriver.common.by import By

    topics, run_id = archived.topics, archived.run_id
    # some lag to show: 3 messages more in one partition
    producer = KafkaProducer(bootstrap_servers=kafka, acks="all")
    for _ in range(3):
        producer.send(topics[0], value=b"pending", partition=1)
    producer.flush()
    producer.close()
    cli = archived.cli("status", "--group", "backup", "--json")
    assert cli.returncode == 0, cli.stderr
    lags = {(s["topic"], s["partition"]): s["lag_messages"] for s in json.loads(cli.stdout)
            if s["topic"] in topics}
    assert len(lags) == 12 and lags[(topics[0], 1)] == 3 and sum(lags.values()) == 3

    # no session, no page
    page_url = f"{airflow_stack.url}/kafka-archive/dag/{DAG}"
    anonymous = httpx.get(page_url, follow_redirects=False, timeout=60)
    assert anonymous.status_code == 303 and "/auth/login" in anonymous.headers["location"]
    assert topics[0] not in anonymous.text
    forged = httpx.get(page_url, cookies={"_token": "forged"}, timeout=60)
    assert forged.status_code == 403 and topics[0] not in forged.text
    plugins = airflow_stack.api.get("/api/v2/plugins").json()["plugins"]
    # ours, once (beside the Kafka provider's kafka_event_producer)
    assert [p["name"] for p in plugins].count("kafka_archive") == 1, plugins

    log_in(browser, page_url)
    wait_for(browser, lambda d: d.find_elements(By.ID, "lag-table"), "the group's page", 120)
    shown_lags = {}
    for row in browser.find_elements(By.CSS_SELECTOR, "#lag-table tr[data-topic]"):
        if row.get_attribute("data-topic") in topics:
            cell = row.find_element(By.CSS_SELECTOR, "td[data-lag]")
            shown_lags[(row.get_attribute("data-topic"), int(row.get_attribute("data-partition")))] = \
                int(cell.get_attribute("textContent"))  # in a closed drill-down past 60
    assert shown_lags == lags
    run_row = browser.find_element(By.CSS_SELECTOR, f"#runs tr[data-run='{run_id}']")
    assert float(run_row.find_element(By.CSS_SELECTOR, "td.mbps").get_attribute("data-mbps")) > 0
    assert "300" in run_row.text and "12" in run_row.text
    assert browser.find_elements(By.ID, "lag-chart")
    assert browser.find_elements(By.ID, "audit-ok") or browser.find_elements(By.ID, "alarms")
    assert all("PAST SLA" not in row.text
               for row in browser.find_elements(By.CSS_SELECTOR, "#freshness tr[data-topic]")
               if row.get_attribute("data-topic") in topics)

    # the trends: each chart's point of the run is the run's own figure (its committed.json)
    points = {(p.get_attribute("data-run"), p.get_attribute("data-topic"),
               p.find_element(By.XPATH, "ancestor::*[@data-chart]").get_attribute("data-chart"),
               p.find_element(By.XPATH, "ancestor::*[@data-window]").get_attribute("data-window")):
              float(p.get_attribute("data-value"))
              for p in browser.find_elements(By.CSS_SELECTOR, f"#trends circle[data-run='{run_id}']")}
    by_topic = archived.committed["by_topic"]
    for window in ("86400", "604800"):
        assert points[(run_id, "", "records", window)] == 300
        assert points[(run_id, "", "bytes", window)] == sum(t["bytes"] for t in by_topic.values())
    # per topic: the shared stack's other tests' topics may outrank these (8 drawn a chart)
    for (_, topic, chart, _), value in points.items():
        if chart == "topic_records":
            assert value == by_topic[topic]["records"] == 100, (topic, value)
        elif chart == "lag_messages":
            assert value == 0, (topic, value)  # as the run left it
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    assert browser.find_element(By.ID, "trends").screenshot(
        str(SCREENSHOT.with_name("kafka-archive-trends.png")))

    # one malformed token: that topic is named first, every other topic is still shown
    broken = Path(airflow_stack.config().token_root) / "backup" / f"{topics[0]}-broken.token"
    broken.parent.mkdir(parents=True, exist_ok=True)
    broken.write_text(f"# group: backup\n# topic: {topics[0]}-broken\nnot a token line\n")
    try:
        browser.get(page_url)
        problems = wait_for(browser, lambda d: d.find_elements(By.ID, "attention"), "attention")
        assert f"{topics[0]}-broken" in problems[0].text and "line 3" in problems[0].text
        shown = {row.get_attribute("data-topic")
                 for row in browser.find_elements(By.CSS_SELECTOR, "#lag-table tr[data-topic]")}
        assert set(topics) <= shown
        browser.set_window_size(1300, 900)
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        assert browser.save_screenshot(str(SCREENSHOT.with_name("kafka-archive-page-problem.png")))
    finally:  # the stack is shared with later tests
        broken.unlink()

    # the whole page (lag, runs, freshness, audit) in one picture
    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(1300, min(height + 140, 4000))
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(SCREENSHOT.with_name("kafka-archive-page.png")))
    browser.set_window_size(1500, 1100)

    # the same page as the DAG's "Kafka archive" tab, inside the Airflow UI
    browser.get(f"{airflow_stack.url}/dags/{DAG}/plugin/kafka-archive-dag")
    frame = wait_for(browser, lambda d: d.find_elements(By.TAG_NAME, "iframe"), "the tab's frame")
    browser.switch_to.frame(frame[0])
    wait_for(browser, lambda d: d.find_elements(By.ID, "lag-table"), "the page in its tab", 120)
    browser.switch_to.default_content()
    assert browser.save_screenshot(str(SCREENSHOT))
    print(f"screenshots: {SCREENSHOT.parent}")


def test_the_trigger_form_refuses_a_topic_the_group_does_not_archive(airflow_stack, browser):
    """The Airflow UI's own trigger form, filled in as a person would: a topic the group
    does not archive is refused, the form says why, and no run exists."""
    from selenium.webdriver.common.by import By

    def runs() -> int:
        return airflow_stack.api.get(f"/api/v2/dags/{DAG}/dagRuns").json()["total_entries"]

    before = runs()
    log_in(browser, f"{airflow_stack.url}/dags/{DAG}")
    wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "[data-testid=trigger-dag-button]"),
             "the DAG's Trigger button", 120)[0].click()
    topics = wait_for(browser, lambda d: d.find_elements(By.ID, "element_topics"),
                      "the form's Topics field")[0]
    topics.send_keys("no.such.topic")
    browser.find_element(By.CSS_SELECTOR, "[data-testid=trigger-dag-submit]").click()
    refusal = "does not archive topic(s) no.such.topic"
    wait_for(browser, lambda d: refusal in d.execute_script("return document.body.innerText"),
             "the refusal in the form")  # (an element held across React re-renders goes stale)
    shown = browser.find_element(By.XPATH, f"//*[contains(text(), '{refusal}')]")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", shown)
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(SCREENSHOT.with_name("kafka-archive-trigger-refused.png")))
    assert runs() == before


def test_the_page_asks_airflow_whether_a_run_in_flight_runs_or_failed(airflow_stack, kafka,
                                                                        archived, browser):
    """A run in flight as Airflow sees it: running (here past the stack's short deadline),
    then, its archive task marked failed in Airflow, failed and needing a person, with
    links to its run and to its failed task's log in the Airflow UI."""
    from selenium.webdriver.common.by import By

    producer = KafkaProducer(bootstrap_servers=kafka, acks="all")
    for topic in archived.topics:
        producer.send(topic, value=b"in flight", partition=0)
    producer.flush()
    producer.close()
    page_url = f"{airflow_stack.url}/kafka-archive/dag/{DAG}"
    log_in(browser, page_url)
    run_id = airflow_stack.trigger(DAG, {"topics": archived.topics}).json()["dag_run_id"]

    def glance_state() -> str:  # the group's state on the all-groups page
        browser.get(f"{airflow_stack.url}/kafka-archive/")
        return wait_for(browser, lambda d: d.find_elements(
            By.CSS_SELECTOR, "#groups tr[data-group='backup'] td"), "the groups' table")[1].text
    deadline = time.monotonic() + 300
    while airflow_stack.task_states(DAG, run_id).get("plan") != "running":
        assert time.monotonic() < deadline, airflow_stack.task_states(DAG, run_id)
        time.sleep(0.1)
    # no free slot once the plan is done: the run stays running, its plan in flight (as
    # a run waiting for a worker), for as long as the page takes to look
    pool = "/api/v2/pools/default_pool?update_mask=slots"
    slots = airflow_stack.api.get("/api/v2/pools/default_pool").json()["slots"]
    assert airflow_stack.api.patch(pool, json={"name": "default_pool", "slots": 0}).is_success
    try:
        while airflow_stack.task_states(DAG, run_id).get("plan") != "success":
            assert time.monotonic() < deadline, airflow_stack.task_states(DAG, run_id)
            time.sleep(0.2)
        # Airflow's state, not a guess. Within the group's deadline the run is calm news;
        # past it (the test stack's deadline is 5 s, for the Deadline Alert's tests) the
        # page calls it late, as the alert does. Reloaded until the deadline has passed.
        calm = []  # what the page said while the run was within its deadline

        def late_line(d):
            d.get(page_url)
            lines = [li.text for li in d.find_elements(By.CSS_SELECTOR, "#attention li")
                     if run_id in li.text]
            if not lines:
                calm.append(d.find_element(By.ID, "in-flight").text)
            return lines
        line = wait_for(browser, late_line, "the run past its deadline", 60)
        assert all(f"run {run_id} is running in Airflow" in text for text in calm), calm
        assert f"run {run_id} is still running in Airflow" in line[0] and (
            "past the group's deadline of 5s" in line[0]), line
        assert "failed" not in line[0]
        assert f"run {run_id} running past its deadline" in glance_state()  # all groups'

        # its archive task fails (as a person marks it): the run fails with it
        r = airflow_stack.api.patch(f"/api/v2/dags/{DAG}/dagRuns/{run_id}/taskInstances/archive",
                                    json={"new_state": "failed"})
        assert r.status_code == 200, r.text
    finally:
        assert airflow_stack.api.patch(pool, json={"name": "default_pool",
                                                   "slots": slots}).is_success
    airflow_stack.wait_for_run(DAG, run_id)
    try:
        ti = airflow_stack.api.get(f"/api/v2/dags/{DAG}/dagRuns/{run_id}/taskInstances/archive")
        assert ti.json()["state"] == "failed", ti.text
        assert f"run {run_id} failed in Airflow" in glance_state()
        browser.get(page_url)
        items = wait_for(browser, lambda d: [li for li in d.find_elements(
            By.CSS_SELECTOR, "#attention li") if run_id in li.text],
            "the failed run needing a person")
        assert "failed in Airflow" in items[0].text and "before its commit" in items[0].text
        link = items[0].find_element(By.CSS_SELECTOR, "a.run").get_attribute("href")
        assert link == f"{airflow_stack.url}/dags/{DAG}/runs/{quote(run_id, safe='')}", link
        assert "the log of its failed task archive says why" in items[0].text
        log = items[0].find_element(By.CSS_SELECTOR, "a.log").get_attribute("href")
        tried = ti.json()["try_number"]  # Airflow counts a try when a person marks it
        assert log == f"{link}/tasks/archive" + (f"?try_number={tried}" if tried else ""), log
        browser.get(log)  # Airflow's own page of the task, which opens on its log
        wait_for(browser, lambda d: "archive" in d.find_element(By.TAG_NAME, "body").text
                 and run_id in d.find_element(By.TAG_NAME, "body").text,
                 "Airflow's page of the failed task", 120)
    finally:  # the next run finishes its plan, which later tests' runs would re-execute
        run_to_end(airflow_stack, {"topics": archived.topics})


def test_the_all_groups_page_counts_what_each_group_selects_in_kafka(airflow_stack, kafka,
                                                                      archived, browser):
    from selenium.webdriver.common.by import By

    cfg = airflow_stack.config()
    admin = KafkaAdminClient(bootstrap_servers=kafka)
    topics = {t.get("name", t.get("topic")): len(t["partitions"]) for t in admin.describe_topics()
              if not t.get("is_internal")}  # (the key is "name" in newer kafka-python)
    admin.close()
    log_in(browser, f"{airflow_stack.url}/kafka-archive/")
    rows = {row.get_attribute("data-group"): row for row in wait_for(
        browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#groups tr[data-group]"),
        "the groups' table")}
    assert set(rows) == set(cfg.groups)
    for name, row in rows.items():
        chosen = [t for t in topics if cfg.group(name).selects(t)]
        cells = [c.text for c in row.find_elements(By.TAG_NAME, "td")]
        assert int(cells[3].split(" of ")[1]) == len(chosen), (name, cells)
        assert int(cells[4].split(" of ")[1]) == sum(topics[t] for t in chosen), (name, cells)
        if cells[1] not in ("ok", "never archived", "no topic matched"):
            continue  # trouble another test left (a run in flight, a mismatch)
        expected = ("no topic matched" if not chosen else
                    "never archived" if cells[2] == "never" else "ok")
        assert cells[1] == expected, (name, cells)
    assert "never archived" not in rows["backup"].text  # archived by the module's run



def test_a_partition_opens_onto_its_files_and_the_command_that_prints_them(
        airflow_stack, archived, s3, browser):
    """The group page's partition links to the partition's current files: each one's S3
    URL (the catalog's) and the `kafka-archive cat` command, which, run as shown, prints
    the partition's records."""
    from selenium.webdriver.common.by import By

    from kafka_archive.monitor import overview, page
    from kafka_archive.storage import Storage

    topic = archived.topics[0]
    log_in(browser, f"{airflow_stack.url}/kafka-archive/dag/{DAG}")
    link = wait_for(browser, lambda d: d.find_elements(
        By.CSS_SELECTOR, f"tr[data-topic='{topic}'][data-partition='1'] a.files"),
        "the partition's link to its files")[0]
    browser.get(link.get_attribute("href"))  # (inside a collapsed drill-down on big groups)
    urls = [c.text for c in wait_for(browser, lambda d: d.find_elements(
        By.CSS_SELECTOR, "#files code.url"), "the partition's files")]
    held = overview.partition_files(airflow_stack.config(), "backup",
                                    Storage(lambda: s3.client), topic, 1)
    assert urls == [f.url for f in held.files] and urls[0].startswith("s3://"), urls
    commands = [c.text for c in browser.find_elements(By.CSS_SELECTOR, "#files code.cat")]
    assert commands == [page.cat_command(url) for url in urls]
    assert browser.save_screenshot(str(SCREENSHOT.with_name("kafka-archive-files.png")))
    printed = archived.cli(*shlex.split(commands[0])[1:])
    assert printed.returncode == 0, printed.stderr
    assert [int(line.split()[0]) for line in printed.stdout.splitlines()] == list(range(
        held.files[0].start, held.files[0].end))
    browser.find_element(By.LINK_TEXT, "the group's page").click()
    wait_for(browser, lambda d: d.find_elements(By.ID, "attention"), "the group's page")
