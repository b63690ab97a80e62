"""What a run's OpenLineage facets say (kafka_archive.airflow.lineage): its topics as
Kafka datasets with the offsets read, its folders or tables as outputs with the figures
its manifest records; each facet valid by OpenLineage's schema (tests/support/lineage)."""

from __future__ import annotations

import json

from openlineage.client.serde import Serde

from kafka_archive import config, layout, manifest
from kafka_archive.airflow import lineage
from kafka_archive.plan.planning import Plan, Slice
from kafka_archive.storage import Storage
from tests.support.lineage import REGISTRY, _validator


def load(tmp_path, group: str, catalogs: str = "") -> config.Config:
    path = tmp_path / "kafka-archive.yaml"
    path.write_text("kafka: {bootstrap_servers: 'SASL_SSL://k1.example:9093,k2:9093'}\n"
                    f"archive_root: file://{tmp_path}/archive\ngroups: {{g: {group}}}\n{catalogs}")
    return config.load(path)


def archived_run(cfg: config.Config) -> str:
    """A plan of two topics and the manifest of its job: partition 1 of `orders` held a
    gap (2 records in 3 offsets), `idle` had nothing new."""
    storage = Storage()
    plan = Plan(group="g", run_id="r1", created_at="", bootstrap=cfg.bootstrap_servers,
                generation=1, format={}, slices=(Slice("orders", 1, 7, 10, 1000),
                                                 Slice("orders", 0, 0, 5, 1000),
                                                 Slice("idle", 0, 4, 4, 1000)),
                token_versions={}, base_offsets={})
    url = layout.run_file(cfg.archive_root, "g", "r1", "plan.json")
    storage.put_bytes(url, plan.to_json())
    manifest.write(storage, cfg.archive_root, {"run_id": "r1", "group": "g", "slices": [
        {"topic": "orders", "partition": 0, "start": 0, "end": 5, "records": 5, "bytes": 300,
         "files": [{"url": "a", "records": 5, "bytes": 300}]},
        {"topic": "orders", "partition": 1, "start": 7, "end": 10, "records": 2, "bytes": 90,
         "files": [{"url": "b", "records": 2, "bytes": 90}], "gaps": [[8, 9]]}]})
    return url


def as_dicts(datasets) -> list[dict]:
    return [json.loads(Serde.to_json(d)) for d in datasets]


def test_a_run_reads_its_topics_offsets_and_writes_their_folders(tmp_path):
    cfg = load(tmp_path, "{}")
    made = lineage.of_run(cfg, Storage(), archived_run(cfg))
    inputs, outputs = as_dicts(made.inputs), as_dicts(made.outputs)

    assert [(d["namespace"], d["name"]) for d in inputs] == [
        ("kafka://k1.example:9093", "idle"), ("kafka://k1.example:9093", "orders")]
    orders = inputs[1]["inputFacets"]
    assert orders["kafkaArchive_offsetRanges"]["partitions"] == [
        {"partition": 0, "start": 0, "end": 5, "records": 5},
        {"partition": 1, "start": 7, "end": 10, "records": 2}]
    assert orders["inputStatistics"]["rowCount"] == 7
    assert [(d["namespace"], d["name"]) for d in outputs] == [
        ("file", f"{tmp_path}/archive/g/idle"), ("file", f"{tmp_path}/archive/g/orders")]
    assert {k: outputs[1]["outputFacets"]["outputStatistics"][k]
            for k in ("rowCount", "size", "fileCount")} == {"rowCount": 7, "size": 390,
                                                             "fileCount": 2}
    assert outputs[0]["outputFacets"]["outputStatistics"]["rowCount"] == 0
    assert "symlinks" not in outputs[1].get("facets", {})


def test_a_table_groups_output_is_its_table_named_in_its_catalog_without_a_password(tmp_path):
    cfg = load(tmp_path, "{format: {kind: parquet}, table: {namespace: raw, catalog: pg}}",
               "iceberg_catalogs: {pg: {type: sql, uri: 'postgresql+psycopg://arch:s3cret@db:5432/ice'}}\n")
    made = lineage.of_run(cfg, Storage(), archived_run(cfg))
    orders = as_dicts(made.outputs)[1]
    assert orders["facets"]["symlinks"]["identifiers"] == [
        {"namespace": "postgresql+psycopg://arch@db:5432/ice", "name": "raw.orders",
         "type": "TABLE"}]
    assert orders["facets"]["catalog"]["framework"] == "iceberg"
    assert orders["facets"]["catalog"]["name"] == "pg"
    assert "s3cret" not in json.dumps(as_dicts(made.outputs) + as_dicts(made.inputs))


def test_every_facet_is_valid_by_its_schema(tmp_path):
    cfg = load(tmp_path, "{format: {kind: parquet}, table: {namespace: raw}}")
    made = lineage.of_run(cfg, Storage(), archived_run(cfg))
    checked = 0
    for side, own, datasets in (("InputDataset", "inputFacets", made.inputs),
                                ("OutputDataset", "outputFacets", made.outputs)):
        for dataset in as_dicts(datasets):
            errors = list(_validator({"$ref": "https://openlineage.io/spec/2-0-2/"
                                      f"OpenLineage.json#/$defs/{side}"}).iter_errors(dataset))
            assert not errors, errors
            for facet in [*dataset.get("facets", {}).values(), *dataset[own].values()]:
                assert facet["_schemaURL"].partition("#")[0] in REGISTRY
                errors = list(_validator({"$ref": facet["_schemaURL"]}).iter_errors(facet))
                assert not errors, (facet, errors)
                checked += 1
    assert checked == 2 * 2 + 2 * 3  # inputs: statistics, offsets; outputs: + symlinks, catalog


def test_the_offsets_facet_refuses_what_its_schema_does_not_allow():
    facet = json.loads(Serde.to_json(lineage.OffsetRangesInputDatasetFacet(
        partitions=[{"partition": 0, "start": 9, "end": 3, "records": -1}])))
    errors = list(_validator({"$ref": facet["_schemaURL"]}).iter_errors(facet))
    assert [e.message for e in errors] == ["-1 is less than the minimum of 0"]


def test_the_event_check_finds_a_broken_event_a_broken_facet_and_an_unknown_one(tmp_path):
    from openlineage.client.event_v2 import Job, Run, RunEvent, RunState

    from tests.support.lineage import problems

    cfg = load(tmp_path, "{}")
    made = lineage.of_run(cfg, Storage(), archived_run(cfg))
    event = json.loads(Serde.to_json(RunEvent(
        eventType=RunState.COMPLETE, eventTime="2026-11-29T10:00:00+00:00",
        run=Run(runId="01933d1c-7c2e-7f6a-8d4e-2f1c9a7b3e10"), job=Job(namespace="n", name="j"),
        inputs=made.inputs, outputs=made.outputs)))
    assert problems(event) == []
    no_producer = {k: v for k, v in event.items() if k != "producer"}
    assert problems(no_producer) == ["event: $: 'producer' is a required property"]
    event["inputs"][1]["inputFacets"]["kafkaArchive_offsetRanges"]["partitions"][0]["end"] = "5"
    event["outputs"][0]["outputFacets"]["outputStatistics"]["_schemaURL"] = "https://x.example/F.json"
    assert problems(event) == [
        "inputs[1].inputFacets.kafkaArchive_offsetRanges: $.partitions[0].end: '5' is not of type 'integer'",
        "outputs[0].outputFacets.outputStatistics: no schema known for 'https://x.example/F.json'"]
