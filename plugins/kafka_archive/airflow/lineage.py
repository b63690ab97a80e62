"""OpenLineage facets of the archive, commit and replay tasks, for Airflow's OpenLineage
provider: its listener calls each operator's `get_openlineage_facets_on_complete` after
the task succeeded and sends what it returns, with Airflow's own facets, to whatever
transport the deployment configured (`[openlineage] transport`). Without the provider
nothing here is imported.

What a run says:

- inputs: the run's Kafka topics (namespace `kafka://<first bootstrap server>`, name the
  topic), each with the records read (`inputStatistics`) and the offset ranges per
  partition (`kafkaArchive_offsetRanges`, this project's facet; its JSON schema is
  `offset_ranges_facet.json` beside this module);
- outputs: each topic's folder under the archive root (`s3://<bucket>` and the key, or
  `file` and the path), for a table group the Iceberg table there, named by a TABLE
  symlink `<namespace>.<topic>` and the catalog facet; each with the records, bytes and
  files written (`outputStatistics`).

A replay reads a topic's folder (with the offsets it replays) and writes its target topic.
Names follow OpenLineage's naming conventions, through its client's `naming` classes.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import ClassVar
from urllib.parse import urlsplit, urlunsplit

import attr
from airflow.providers.openlineage.extractors import OperatorLineage
from openlineage.client.generated.base import InputDataset, InputDatasetFacet, OutputDataset
from openlineage.client.generated.catalog_dataset import CatalogDatasetFacet
from openlineage.client.generated.input_statistics_input_dataset import \
    InputStatisticsInputDatasetFacet
from openlineage.client.generated.output_statistics_output_dataset import \
    OutputStatisticsOutputDatasetFacet
from openlineage.client.generated.symlinks_dataset import Identifier, SymlinksDatasetFacet
from openlineage.client.naming import dataset as naming

from kafka_archive import layout, manifest as manifests
from kafka_archive.archive.replay_job import Progress
from kafka_archive.config import Config
from kafka_archive.manifest import row_files
from kafka_archive.plan.planning import Plan
from kafka_archive.storage import Storage

OFFSETS_FACET = "kafkaArchive_offsetRanges"
# a name, not a location: the schema ships in the package (offset_ranges_facet.json) and
# in the docs; OpenLineage's consumers store a facet's _schemaURL, they do not fetch it
OFFSETS_SCHEMA = "urn:kafka-archive:openlineage:facets:1-0-0:OffsetRangesInputDatasetFacet"


@attr.define
class OffsetRangesInputDatasetFacet(InputDatasetFacet):
    """The Kafka offsets a task read of a topic: per partition, [start, end) and the
    records in it (fewer than end - start where Kafka holds gaps: compaction, transactions)."""
    partitions: list[dict] = attr.field(factory=list)
    _additional_skip_redact: ClassVar[list[str]] = ["partitions"]

    @staticmethod
    def _get_schema() -> str:
        return OFFSETS_SCHEMA + "#/$defs/OffsetRangesInputDatasetFacet"


def offsets_facet_schema() -> dict:
    """The JSON schema of OffsetRangesInputDatasetFacet."""
    return json.loads(resources.files(__package__).joinpath("offset_ranges_facet.json").read_text())


def of_run(config: Config, storage: Storage, plan_url: str) -> OperatorLineage:
    """The lineage of an archive run (its archive and its commit task alike): what its
    manifest says it read of each topic of the plan and wrote where."""
    plan = Plan.from_json(storage.get_bytes(plan_url))
    manifest = manifests.read(storage, config.archive_root, plan.group, plan.run_id) or {}
    rows = manifest.get("slices", [])
    inputs, outputs = [], []
    for topic in plan.topics():
        mine = sorted((r for r in rows if r["topic"] == topic),
                      key=lambda r: (r["partition"], r["start"]))
        records = sum(r["records"] for r in mine)
        inputs.append(kafka_input(plan.bootstrap, topic, records, [
            {"partition": r["partition"], "start": r["start"], "end": r["end"],
             "records": r["records"]} for r in mine]))
        statistics = OutputStatisticsOutputDatasetFacet(
            rowCount=records, size=sum(r.get("bytes") or 0 for r in mine),
            fileCount=sum(len(row_files(r)) for r in mine))
        outputs.append(topic_output(config, plan.group, topic, statistics))
    return OperatorLineage(inputs=inputs, outputs=outputs)


def of_replay(config: Config, storage: Storage, replay_url: str) -> OperatorLineage:
    """The lineage of a replay: the archived topic's folder it read (the offsets of each
    source partition) and the topic it wrote, with the messages each target partition
    acknowledged (its progress files: a resumed replay counts what earlier attempts sent)."""
    plan = json.loads(storage.get_bytes(replay_url))
    request, root = plan["request"], config.archive_root
    ranges, acked = [], 0
    for part in plan["partitions"]:
        progress = Progress(storage, layout.replay_progress(root, plan["replay_id"],
                                                            part["partition"])).state
        sent = progress["acked"] if progress else 0
        acked += sent
        if files := part["files"]:
            ranges.append({"partition": part["partition"], "start": files[0]["start"],
                           "end": files[-1]["end"], "records": sent})
    folder = storage_dataset(layout.table_location(root, request["group"], request["topic"]))
    read = InputDataset(namespace=folder.get_namespace(), name=folder.get_name(), inputFacets={
        "inputStatistics": InputStatisticsInputDatasetFacet(
            rowCount=acked, fileCount=sum(len(p["files"]) for p in plan["partitions"])),
        OFFSETS_FACET: OffsetRangesInputDatasetFacet(partitions=ranges)})
    target = kafka_naming(plan["target_bootstrap"], request["to_topic"])
    written = OutputDataset(namespace=target.get_namespace(), name=target.get_name(),
                            outputFacets={"outputStatistics":
                                          OutputStatisticsOutputDatasetFacet(rowCount=acked)})
    return OperatorLineage(inputs=[read], outputs=[written])


def kafka_naming(bootstrap: str, topic: str) -> naming.Kafka:
    """OpenLineage's name of a topic: its cluster by the first bootstrap server."""
    first = bootstrap.split(",")[0].strip().split("://")[-1]  # SASL_SSL://host:port too
    host, _, port = first.rpartition(":")
    return naming.Kafka(bootstrap_server_host=host, port=port, topic=topic)


def kafka_input(bootstrap: str, topic: str, records: int, ranges: list[dict]) -> InputDataset:
    name = kafka_naming(bootstrap, topic)
    return InputDataset(namespace=name.get_namespace(), name=name.get_name(), inputFacets={
        "inputStatistics": InputStatisticsInputDatasetFacet(rowCount=records),
        OFFSETS_FACET: OffsetRangesInputDatasetFacet(partitions=ranges)})


def storage_dataset(url: str) -> naming.S3 | naming.LocalFileSystem:
    """OpenLineage's name of a folder under the archive root (S3, or a local path)."""
    if url.startswith("s3://"):
        bucket, _, key = url.removeprefix("s3://").partition("/")
        return naming.S3(bucket_name=bucket, object_key=key.rstrip("/"))
    return naming.LocalFileSystem(path=url.removeprefix("file://").rstrip("/"))


def topic_output(config: Config, group: str, topic: str,
                 statistics: OutputStatisticsOutputDatasetFacet) -> OutputDataset:
    """A topic's folder; for a table group the table there, with its catalog's names."""
    folder = storage_dataset(layout.table_location(config.archive_root, group, topic))
    facets = {}
    if (spec := config.group(group).table) is not None:
        properties = config.iceberg_catalogs.get(spec.catalog, {})
        uri = without_password(properties.get("uri", ""))
        facets["symlinks"] = SymlinksDatasetFacet(identifiers=[Identifier(
            namespace=uri or f"iceberg:{spec.catalog}", name=f"{spec.namespace}.{topic}",
            type="TABLE")])
        facets["catalog"] = CatalogDatasetFacet(
            framework="iceberg", type=properties.get("type", "sql"), name=spec.catalog,
            metadataUri=uri or None, warehouseUri=properties.get("warehouse", config.archive_root),
            source="kafka-archive")
    return OutputDataset(namespace=folder.get_namespace(), name=folder.get_name(),
                         facets=facets, outputFacets={"outputStatistics": statistics})


def without_password(uri: str) -> str:
    """A catalog's URI fit for lineage: a password in it (an SQL catalog's) left out."""
    parts = urlsplit(uri)
    if parts.password is None:
        return uri
    host = parts.hostname + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=f"{parts.username}@{host}" if parts.username
                                     else host))
