"""The deployment, tested as a user does it (issue 55): the wheel the project's build
backend makes, installed into a fresh virtualenv that already holds Airflow and the
providers a team runs (resolved together, as Airflow's constraints file is made; the real
file where KAFKA_ARCHIVE_AIRFLOW_CONSTRAINTS names it), with nothing else of ours: no
checkout on any path, no plugins/ folder, no requirements.txt. A DAG file of two lines
and a config in the DAGs folder run a group end to end against the local services, over
Spark Connect (no JVM in the user's Airflow); then the api-server serves the group's page
and offers the provider's connection type in its form."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic

from tests.support import localservices

ROOT = Path(__file__).resolve().parents[2]
UV = ROOT / ".cache" / "uv" / "bin" / "uv"
# Airflow and the providers a team's Airflow already has: the versions our own pins test
# (requirements.txt), the Spark client at its Connect server's version
PINNED = {line.split("==")[0].lower(): line.strip()
          for line in (ROOT / "requirements.txt").read_text().splitlines() if "==" in line}
THEIR_AIRFLOW = [PINNED[name] for name in (
    "apache-airflow", "apache-airflow-providers-amazon", "apache-airflow-providers-apache-spark",
    "apache-airflow-providers-apache-kafka", "apache-airflow-providers-smtp", "pyspark-client")]
# the DAG file a deployment writes: docs/deploy/airflow.md's (tests/unit/test_docs.py checks
# that page shows this one)
DAG_FILE = re.search(r"```python\n(.*?)```", (ROOT / "docs" / "deploy" / "airflow.md").read_text(),
                     re.S)[1]
TEST_TOOLS = {"pytest", "pytest-xdist", "hypothesis", "selenium", "aiosmtpd", "py-spy"}


def run(*command, env=None, timeout=600) -> str:
    done = subprocess.run([str(c) for c in command], env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"{command} exited {done.returncode}:\n" \
                                 f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def frozen(python: Path) -> dict[str, str]:
    listed = json.loads(run(UV, "pip", "list", "--format", "json", "--python", python))
    return {package["name"].lower(): package["version"] for package in listed}


@pytest.fixture(scope="module")
def deployed(tmp_path_factory):
    """(venv, packages before the wheel, packages after)."""
    where = tmp_path_factory.mktemp("deploy")
    run(UV, "build", "--wheel", "--out-dir", where / "dist", ROOT)
    [wheel] = (where / "dist").glob("kafka_archive-*.whl")
    venv = where / "venv"
    run(UV, "venv", "-q", "--python", "python3.11", venv)
    python = venv / "bin" / "python"
    constraints = os.environ.get("KAFKA_ARCHIVE_AIRFLOW_CONSTRAINTS")
    run(UV, "pip", "install", "-q", "--python", python, *THEIR_AIRFLOW,
        *(["-c", constraints] if constraints else []))
    before = frozen(python)
    run(UV, "pip", "install", "-q", "--python", python, wheel)  # the wheel, nothing else
    return venv, before, frozen(python)


def test_the_wheel_installs_into_their_airflow_without_changing_it(deployed):
    venv, before, after = deployed
    changed = {name: (version, after.get(name)) for name, version in before.items()
               if after.get(name) != version}
    assert changed == {}, f"installing the wheel up- or downgraded {changed}"
    assert after["kafka-archive"]
    assert not TEST_TOOLS & after.keys()
    listed = run(venv / "bin" / "airflow", "providers", "list",
                 env={**os.environ, "AIRFLOW_HOME": str(venv / "airflow")})
    assert re.search(r"^kafka-archive\s+\|.*\|\s+" + re.escape(after["kafka-archive"]), listed,
                     re.M), listed


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_two_line_dag_file_runs_a_group_then_serves_its_page(
        deployed, service_env, kafka, s3, spark_connect, smtp_maildir, tmp_path, unique):
    venv, _, _ = deployed
    topic = f"deploy-{unique}"
    admin = KafkaAdminClient(bootstrap_servers=kafka)
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=kafka)
    for n in range(40):
        producer.send(topic, f"message {n}".encode(), partition=n % 2)
    producer.flush()
    producer.close()

    dags = tmp_path / "dags"
    dags.mkdir()
    # the DAG file as docs/deploy/airflow.md has it
    (dags / "kafka_archive_dags.py").write_text(DAG_FILE)
    (dags / "kafka-archive.yaml").write_text(
        f"kafka: {{bootstrap_servers: '{kafka}'}}\n"
        f"archive_root: s3://{s3.bucket}/deploy-{unique}\n"
        "token_root: tokens/\n"
        "groups:\n"
        f"  billing:\n    topics: {{include: ['{topic}']}}\n"
        "    spark_connect: kafka_archive_spark_connect\n")
    home = tmp_path / "airflow"
    # the connections a deployment makes (here as AIRFLOW_CONN_* variables), and nothing
    # of the checkout: no PYTHONPATH, no plugins folder of ours, no KAFKA_ARCHIVE_CONFIG
    connections = {k: v for k, v in localservices.client_env(service_env, home).items()
                   if k.startswith("AIRFLOW_CONN_") or k in localservices.trust_env()}
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": os.environ["HOME"], "LANG": "C.UTF-8",
           **connections, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
           "AIRFLOW__CORE__PLUGINS_FOLDER": str(tmp_path / "plugins"),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True"}
    airflow = venv / "bin" / "airflow"
    run(airflow, "db", "migrate", env=env)
    run(airflow, "dags", "test", "kafka_archive_billing", env=env)

    tokens = (dags / "tokens" / "billing" / f"{topic}.token").read_text()
    assert sorted(line.split()[2:] for line in tokens.splitlines() if not line.startswith("#")) \
        == [["0", "20"], ["1", "20"]]
    listed = s3.client.list_objects_v2(Bucket=s3.bucket, Prefix=f"deploy-{unique}/billing/{topic}/")
    assert sorted(o["Key"].rsplit("/", 2)[-2] for o in listed["Contents"]) == \
        ["partition=0", "partition=1"]

    port = free_port()
    server = subprocess.Popen([str(airflow), "api-server", "--port", str(port)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:  # ready when its health answers
            try:
                urllib.request.urlopen(f"{base}/api/v2/monitor/health", timeout=5)
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, "no api-server"
                time.sleep(0.5)
        token = json.load(urllib.request.urlopen(f"{base}/auth/token", timeout=30))["access_token"]

        def get(path: str) -> str:
            request = urllib.request.Request(base + path,
                                             headers={"Authorization": f"Bearer {token}"})
            return urllib.request.urlopen(request, timeout=60).read().decode()

        page = get("/kafka-archive/dag/kafka_archive_billing")
        assert topic in page and "billing" in page, page[:2000]
        hooks = {h["connection_type"]: h for h in json.loads(get("/ui/connections/hook_meta"))}
        form = hooks["kafka_archive_kafka"]
        assert form["hook_name"] == "Kafka (kafka-archive)"
        assert {"security_protocol", "sasl_mechanism", "ssl_ca_location"} <= \
            {f.rsplit("__", 1)[-1] for f in form["extra_fields"]}
        assert form["standard_fields"]["password"]["title"] == "SASL password"
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)


def test_a_part_whose_extra_is_missing_says_which_extra(deployed):
    """The wheel alone (no [spark], no [tables]): a spark-submit group and a table group
    fail with the extra to install, not an ImportError."""
    venv, _, _ = deployed
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "from kafka_archive import spark\nfrom kafka_archive.commit import iceberg\n"
         "for attempt in (spark.spark_home, lambda: iceberg.catalog('local', {})):\n"
         "    try:\n        attempt()\n    except Exception as exc:\n"
         "        print(type(exc).__name__, exc)\n"], capture_output=True, text=True, timeout=120)
    assert "TerminalError spark-submit is not installed here" in done.stdout, done.stderr[-2000:]
    assert "pip install 'kafka-archive[spark]'" in done.stdout
    assert "TerminalError pyiceberg is not installed here" in done.stdout
    assert "pip install 'kafka-archive[tables]'" in done.stdout
