"""OpenLineage through Airflow's own provider: `airflow dags test` of a files group, a
table group and the replay, with the provider's file transport set as a deployment sets
it (`[openlineage] transport`). Each archive, commit and replay task's COMPLETE event
names the topic it read (with its offsets) and the folder, table or topic it wrote, and
every event is valid by OpenLineage's JSON schemas (tests/support/lineage)."""

from __future__ import annotations

import json

from tests.integration.test_backup_archive import varied_messages
from tests.integration.test_replay import in_order, new_topic
from tests.support import lineage
from tests.support.pipeline import GROUP, Pipeline, airflow

CONNECT = "spark_connect: kafka_archive_spark_connect\n"  # no spark-submit: faster


def events(folder) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(folder.glob("event-*.json"))]


def completed(found: list[dict], task: str) -> list[dict]:
    return [e for e in found if e["eventType"] == "COMPLETE" and e["job"]["name"] == task]


def names(datasets: list[dict]) -> list[tuple[str, str]]:
    return [(d["namespace"], d["name"]) for d in datasets]


def test_each_task_names_the_topic_it_read_and_the_folder_table_or_topic_it_wrote(
        airflow_env, kafka, s3, spark_connect, unique, tmp_path):
    folder = tmp_path / "lineage"
    folder.mkdir()
    env = {**airflow_env, "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
        {"type": "file", "log_file_path": str(folder / "event")})}  # a file per event
    files = Pipeline(env, kafka, s3, f"ol{unique}", tmp_path, group_extra=CONNECT)
    topic = files.create_topic("src", 2)
    files.produce(varied_messages(topic, 2, 40, seed=7))
    original = in_order(kafka, topic)
    files.run_dag()
    target = new_topic(kafka, f"olcopy{unique}", 2)
    airflow(files.env, "dags", "test", "kafka_archive_replay",
            "--conf", json.dumps({"topic": topic, "to_topic": target}))
    assert in_order(kafka, target) == original
    tables = Pipeline(env, kafka, s3, f"ol{unique}", tmp_path, name="tables",
                      group_extra=CONNECT + "format: {kind: parquet}\ntable: {namespace: lineage}\n")
    tables.run_dag()

    found = events(folder)
    assert found, "no OpenLineage event was written"
    invalid = {f"{e['job']['name']} {e['eventType']}": lineage.problems(e) for e in found}
    assert not any(invalid.values()), {k: v for k, v in invalid.items() if v}

    kafka_ns = f"kafka://{kafka}"
    tokens = files.token_offsets()[topic]
    ranges = [{"partition": p, "start": 0, "end": end, "records": end}
              for p, end in sorted(tokens.items())]
    assert sum(tokens.values()) == 40
    by_task = {task: completed(found, f"kafka_archive_{GROUP}.{task}")
               for task in ("archive", "commit")}
    assert [len(e) for e in by_task.values()] == [2, 2]  # the files group's, the table group's
    for task, (of_files, of_table) in by_task.items():
        for event, pipeline in ((of_files, files), (of_table, tables)):
            [read], [wrote] = event["inputs"], event["outputs"]
            assert (read["namespace"], read["name"]) == (kafka_ns, topic), task
            assert read["inputFacets"]["kafkaArchive_offsetRanges"]["partitions"] == ranges
            assert (wrote["namespace"], wrote["name"]) == (
                f"s3://{s3.bucket}", f"{pipeline.root_key}/{GROUP}/{topic}"), task
            assert wrote["outputFacets"]["outputStatistics"]["rowCount"] == 40
        assert "symlinks" not in of_files["outputs"][0].get("facets", {})
        table = of_table["outputs"][0]["facets"]
        assert table["symlinks"]["identifiers"][0]["name"] == f"lineage.{topic}"
        assert table["symlinks"]["identifiers"][0]["type"] == "TABLE"
        assert table["catalog"]["framework"] == "iceberg"

    [replayed] = completed(found, "kafka_archive_replay.replay")
    assert names(replayed["inputs"]) == [(f"s3://{s3.bucket}", f"{files.root_key}/{GROUP}/{topic}")]
    assert names(replayed["outputs"]) == [(kafka_ns, target)]
    assert replayed["outputs"][0]["outputFacets"]["outputStatistics"]["rowCount"] == 40
    assert replayed["inputs"][0]["inputFacets"]["kafkaArchive_offsetRanges"]["partitions"] == ranges
