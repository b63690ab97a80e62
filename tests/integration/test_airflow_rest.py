"""Manual runs through a real Airflow's REST API, as the UI's trigger form sends them:
valid params reach the plan (topic subset, caps, rewind) and the data lands in the
archive; invalid ones are refused before any run exists."""

import io
import json

import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic

from kafka_archive import formats, layout
from kafka_archive.tokens import open_store

DAG = "kafka_archive_backup"


def make_topic(kafka: str, name: str, messages: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=kafka)
    admin.create_topics([NewTopic(name, 1, 1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=kafka, acks="all")
    for i in range(messages):
        producer.send(name, key=f"k{i}".encode(), value=f"message {i}".encode(), partition=0)
    producer.flush()
    producer.close()


def archived(s3, root: str, topic: str) -> dict[str, list[int]]:
    """Offsets in each archived file of the topic's partition 0, by file name."""
    bucket, prefix = root.removeprefix("s3://").split("/", 1)
    listing = s3.client.list_objects_v2(Bucket=bucket,
                                        Prefix=f"{prefix}/backup/{topic}/partition=0/")
    files = {}
    for obj in listing.get("Contents", []):
        data = s3.client.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
        files[obj["Key"].rsplit("/", 1)[1]] = [r.offset for r in formats.read(io.BytesIO(data))]
    return files


def run_to_end(stack, conf: dict, run_id: str | None = None, dag: str = DAG) -> str:
    r = stack.trigger(dag, conf, run_id)
    assert r.status_code == 200, f"trigger refused: {r.status_code} {r.text}"
    run_id = r.json()["dag_run_id"]
    assert r.json()["conf"] == conf
    stack.wait_for_run(dag, run_id)
    # the archive's own steps; not the run's state, which also holds the freshness check
    # of every token of the group, tokens other tests sharing this Airflow may have spoilt
    states = stack.task_states(dag, run_id)
    assert [states[t] for t in ("plan", "archive", "commit")] == ["success"] * 3, (
        states, stack.task_log(dag, run_id, "plan")[-3000:])
    return run_id


def test_triggered_run_archives_only_its_topics_within_caps_then_rewinds(airflow_stack, kafka, s3,
                                                                          unique):
    topic, other = f"rest-{unique}", f"rest-{unique}-other"
    make_topic(kafka, topic, 20)
    make_topic(kafka, other, 3)
    cfg = airflow_stack.config()
    tokens = open_store(cfg.token_root, lambda: s3.client)
    airflow_stack.unpause(DAG)

    first = run_to_end(airflow_stack, {"topics": [topic], "max_records": 5})

    plan_key = layout.run_file(cfg.archive_root, "backup", first, "plan.json").split("/", 3)[3]
    plan = json.loads(s3.client.get_object(Bucket=s3.bucket, Key=plan_key)["Body"].read())
    assert {s["topic"] for s in plan["slices"]} == {topic}  # the subset, nothing else
    assert tokens.read("backup", topic).token.offsets == {0: 5}  # capped at 5 of 20
    assert tokens.read("backup", other).token is None
    assert list(archived(s3, cfg.archive_root, topic).values()) == [[0, 1, 2, 3, 4]]

    # offset 2 lies inside the archived file: the whole file is archived again
    run_to_end(airflow_stack, {"topics": [topic], "rewind": [{"topic": topic, "offset": 2}]})

    assert tokens.read("backup", topic).token.offsets == {0: 20}
    assert list(archived(s3, cfg.archive_root, topic).values()) == [list(range(20))]


@pytest.mark.parametrize("conf, field", [
    ({"max_records": -1}, "max_records"),
    ({"topics": "notalist"}, "topics"),
    ({"rewind": [{"topic": "t", "offset": 3, "timestamp": "2026-01-01T00:00:00Z"}]}, "rewind"),
    ({"rewind": [{"topic": "t", "partition": 0}]}, "rewind"),
    ({"max_bytes": "lots"}, "max_bytes"),
])
def test_invalid_trigger_params_are_refused_and_create_no_run(airflow_stack, unique, conf, field):
    airflow_stack.wait_for_dag(DAG)
    run_id = f"refused-{unique}"

    r = airflow_stack.trigger(DAG, conf, run_id=run_id)

    assert r.status_code == 400, r.text
    assert f"Invalid input for param {field}" in r.json()["detail"], r.text
    assert airflow_stack.api.get(f"/api/v2/dags/{DAG}/dagRuns/{run_id}").status_code == 404


@pytest.mark.parametrize("conf, named", [
    ({"max_recrods": 5}, "DAG kafka_archive_backup has no trigger param 'max_recrods' (did you "
                         "mean 'max_records'?)"),
    ({"topics": ["no.such.topic"]}, "group backup does not archive topic(s) no.such.topic: "
                                    "not in Kafka"),
])
def test_a_trigger_naming_an_unknown_param_or_topic_is_refused_naming_it(airflow_stack, unique,
                                                                          conf, named):
    airflow_stack.wait_for_dag(DAG)
    run_id = f"closed-{unique}"

    r = airflow_stack.trigger(DAG, conf, run_id=run_id)

    assert r.status_code == 400, r.text
    assert named in r.json()["detail"], r.text
    assert airflow_stack.api.get(f"/api/v2/dags/{DAG}/dagRuns/{run_id}").status_code == 404


def test_unauthenticated_requests_are_refused(airflow_stack):
    import httpx

    r = httpx.post(f"{airflow_stack.url}/api/v2/dags/{DAG}/dagRuns", json={"logical_date": None})
    assert r.status_code == 401, r.text
    r = httpx.post(f"{airflow_stack.url}/auth/token", json={"username": "admin", "password": "x"})
    assert r.status_code == 401, r.text
