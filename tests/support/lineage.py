"""OpenLineage events checked against OpenLineage's own JSON schemas: the event against
the spec (openlineage_spec/, copied from OpenLineage's repository), and every facet in
it against the schema its `_schemaURL` names: OpenLineage's facets, the Airflow
provider's (the files it ships) and ours (kafka_archive.airflow.lineage). A facet whose
schema none of them has is a problem too, so a new facet is looked at, not let through."""

from __future__ import annotations

import json
from pathlib import Path

import airflow.providers.openlineage
from jsonschema import Draft202012Validator, FormatChecker
from referencing import Registry, Resource

from kafka_archive.airflow import lineage

SPEC = Path(__file__).parent / "openlineage_spec"
PROVIDER_FACETS = Path(airflow.providers.openlineage.__file__).parent / "facets"


def _registry() -> Registry:
    schemas = [json.loads(p.read_text()) for p in sorted(SPEC.glob("*.json"))]
    schemas.append(lineage.offsets_facet_schema())
    return Registry().with_resources((s["$id"], Resource.from_contents(s)) for s in schemas)


REGISTRY = _registry()


def _schema(url: str) -> dict | None:
    """The schema a _schemaURL names: by its document's $id, or the provider's file of
    that name (the provider's URLs point at its source on GitHub, at its version)."""
    document, _, pointer = url.partition("#")
    if document in REGISTRY:
        return {"$ref": url}
    shipped = PROVIDER_FACETS / document.rsplit("/", 1)[-1]
    if document.startswith("https://raw.githubusercontent.com/apache/airflow/") and shipped.is_file():
        return {"$defs": json.loads(shipped.read_text())["$defs"], "$ref": f"#{pointer}"}
    return None


def _validator(schema: dict) -> Draft202012Validator:
    return Draft202012Validator(schema, registry=REGISTRY, format_checker=FormatChecker())


def problems(event: dict) -> list[str]:
    """What is wrong with an event, as readable lines; [] when it is valid."""
    found = [f"event: {e.json_path}: {e.message}" for e in _validator(
        {"$ref": event["schemaURL"]}).iter_errors(event)]
    for where, facet in _facets(event):
        schema = _schema(facet.get("_schemaURL", ""))
        if schema is None:
            found.append(f"{where}: no schema known for {facet.get('_schemaURL')!r}")
            continue
        found += [f"{where}: {e.json_path}: {e.message}"
                  for e in _validator(schema).iter_errors(facet)]
    return found


def _facets(event: dict):
    yield from ((f"run.facets.{k}", v) for k, v in event["run"].get("facets", {}).items())
    yield from ((f"job.facets.{k}", v) for k, v in event["job"].get("facets", {}).items())
    for side, own in (("inputs", "inputFacets"), ("outputs", "outputFacets")):
        for i, dataset in enumerate(event.get(side, ())):
            for kind in ("facets", own):
                yield from ((f"{side}[{i}].{kind}.{k}", v)
                            for k, v in dataset.get(kind, {}).items())
