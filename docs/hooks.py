"""MkDocs hooks: the reference pages generated from the code at every build, so they
cannot drift from it (mkdocs.yml names this file). Each page is a function of the code:
- configure/reference.md: every config key from the schema (kafka_archive.config_schema):
  type, default, the example config's value, and the error a wrong value gets, as the
  code words it;
- reference/cli.md: every command and flag of `kafka-archive` (its argparse parser);
- reference/dag-params.md: the archive DAG's trigger params (their JSON schemas);
- reference/connections.md: the provider's connection types and their form fields;
- reference/metrics.md: every metric the tasks send, its kind and tags;
- reference/lineage.md: the OpenLineage datasets and facets of the archive, commit and
  replay tasks, with the example config's names and the offsets facet's JSON schema;
- operate/mails/<kind>.md: each alert mail's subject and body, rendered by the functions
  that send it, on example facts.
tests/unit/test_docs.py checks that these cover every key, flag and mail kind.
"""

from __future__ import annotations

import argparse
import json
import sys
import typing
from pathlib import Path

import yaml
from mkdocs.structure.files import File
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from kafka_archive import config_schema as schema
from kafka_archive.airflow import params, provider
from kafka_archive.monitor import alerts

sys.path.insert(0, str(Path(__file__).resolve().parent))  # MkDocs loads this file by path
import mail_examples  # noqa: E402  (docs/mail_examples.py)

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_CONFIG = ROOT / "config" / "kafka-archive.yaml"


def pages() -> dict[str, str]:
    """Generated page path (under docs/) -> its Markdown."""
    return {"configure/reference.md": config_reference(),
            "reference/cli.md": cli_reference(),
            "reference/dag-params.md": params_reference(),
            "reference/connections.md": connections_reference(),
            "reference/packages.md": packages_reference(),
            "reference/assets.md": assets_reference(),
            "reference/metrics.md": metrics_reference(),
            "reference/lineage.md": lineage_reference(),
            **{f"operate/mails/{kind}.md": mail_page(kind) for kind in alerts.MAIL_KINDS}}


def on_files(files, config):
    for path, text in pages().items():
        files.append(File.generated(config, path, content=text))
    return files


# --- the config -----------------------------------------------------------------------------

def config_keys() -> list[tuple[str, type[BaseModel], str]]:
    """(key path, its section's model, field name) of every key, depth first; a group's
    keys under `groups.<name>`, a per-topic mapping's under `<regex>`."""
    found = []

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, field in model.model_fields.items():
            found.append((prefix + name, model, name))
            inner, keyed = _section_of(field.annotation)
            if inner is not None:
                walk(inner, f"{prefix}{name}.{'<name>.' if name == 'groups' else '<regex>.' if keyed else ''}")

    walk(schema.Document, "")
    return found


def _section_of(annotation) -> tuple[type[BaseModel] | None, bool]:
    """The section model a field holds (directly, optionally, or as a mapping's values)."""
    for candidate in [annotation, *typing.get_args(annotation)]:
        candidate = typing.get_args(candidate)[0] if typing.get_origin(candidate) is typing.Annotated \
            else candidate
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate, False
        if typing.get_origin(candidate) is dict:
            inner, _ = _section_of(typing.get_args(candidate)[1])
            if inner is not None:
                return inner, True
    return None, False


def _type(annotation) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        validators = [getattr(m, "func", None) for m in annotation.__metadata__]
        if schema._seconds in validators:
            return "duration (`90s`, `15m`, `2h`, `7d`, or seconds)"
        return _type(args[0])
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType")):
        kinds = [_type(a) for a in args if a is not type(None)]
        return " or ".join(kinds) + (" or null" if type(None) in args else "")
    if origin is dict:
        return f"mapping of {_type(args[1])}"
    if origin is list:
        return f"list of {_type(args[0])}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"section ({annotation.__name__})"
    return getattr(annotation, "__name__", str(annotation))


def _default(field) -> str:
    if field.default is PydanticUndefined:
        return "required"
    if isinstance(field.default, BaseModel):
        return "(its keys' defaults)"
    return "`" + json.dumps(field.default, default=lambda value: value.model_dump(
        exclude_defaults=True) if isinstance(value, BaseModel) else str(value)) + "`"


def _example_value(path: str) -> str:
    document = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    node = document
    for part in path.split("."):
        if part in ("<name>", "<regex>") and isinstance(node, dict) and node:
            node = next(iter(node.values()))
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            return ""
    return "" if isinstance(node, dict) and len(json.dumps(node)) > 60 else f"`{json.dumps(node)}`"


def wrong_value_error(path: str) -> str:
    """The error the code gives a value of the wrong shape at this key: a mapping where a
    value is expected, a word where a mapping is."""
    document: dict = {"kafka": {"bootstrap_servers": "broker:9092"},
                      "archive_root": "s3://bucket/archive", "groups": {"g": {}}}
    parts = [("g" if p == "<name>" else "t.*" if p == "<regex>" else p) for p in path.split(".")]
    node = document
    for part in parts[:-1]:
        node = node.setdefault(part, {}) if isinstance(node.get(part, {}), dict) else node
    field_model = next(model for key, model, _ in config_keys() if key == path)
    field = field_model.model_fields[path.rsplit(".", 1)[-1]]
    node[parts[-1]] = "not-a-mapping" if _section_of(field.annotation)[0] or \
        "mapping" in _type(field.annotation) else {"a": "mapping"}
    try:
        schema.Document.model_validate(document)
    except Exception as exc:  # pydantic's ValidationError, worded by the schema
        lines = schema.problems(exc) if hasattr(exc, "errors") else [str(exc)]
        return "`" + lines[0].replace("`", "'").replace("|", "\\|")[:160] + "`"
    return ""


def config_reference() -> str:
    out = ["# Config reference", "",
           "Every key of the config file (`kafka-archive.yaml`), generated from its schema "
           "(`kafka_archive.config_schema`). Values may refer to the environment as `${NAME}` "
           "or `${NAME:-default}`. Every problem is reported with the file and the key path; "
           "an unknown key is refused naming the closest known one, e.g. "
           "`groups.backup.policy.max_recrods: unknown key; did you mean max_records?`. A "
           "problem inside one group takes only that group's DAG offline (its task fails with "
           "the error); the other groups run on.", "",
           "The *error* column is what the code answers a value of the wrong shape at that "
           "key; the *example* column is the value in the repository's example config "
           "(`config/kafka-archive.yaml`).", ""]
    sections: dict[str, list[tuple[str, type[BaseModel], str]]] = {}
    for path, model, name in config_keys():  # a section's keys together, in schema order
        sections.setdefault(path.rsplit(".", 1)[0] if "." in path else "", []).append(
            (path, model, name))
    for where, keys in sections.items():
        model = keys[0][1]
        doc = " ".join((model.__doc__ or "").split("\n\n")[0].split())
        out += ["", f"## `{where}`" if where else "## The top level", "",
                doc if model is not schema.Document else "", "",
                "| key | type | default | example | description | error |",
                "|---|---|---|---|---|---|"]
        for path, model, name in keys:
            field = model.model_fields[name]
            out.append(f"| `{name}` | {_type(field.annotation)} | {_default(field)} | "
                       f"{_example_value(path)} | {(field.description or '').replace('|', '/')} | "
                       f"{wrong_value_error(path)} |")
    return "\n".join(out) + "\n"


# --- the command line -----------------------------------------------------------------------

def cli_reference() -> str:
    from kafka_archive.cli import command_line

    parser = command_line()
    out = ["# CLI reference", "", "Generated from the command's own parser "
           "(`kafka_archive.cli.command_line`); [Commands](cli-guide.md) shows them by task.", "",
           "```", parser.format_help().strip(), "```"]
    for name, sub in _subcommands(parser):
        out += ["", f"## `kafka-archive {name}`", "", "```", sub.format_help().strip(), "```"]
    return "\n".join(out) + "\n"


def _subcommands(parser: argparse.ArgumentParser, prefix: str = ""):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield prefix + name, sub
                yield from _subcommands(sub, f"{prefix}{name} ")


def cli_flags() -> set[str]:
    from kafka_archive.cli import command_line

    parser = command_line()
    return {f"{name} {option}" for name, sub in [("", parser), *_subcommands(parser)]
            for action in sub._actions for option in action.option_strings
            if option.startswith("--")}


# --- DAG params, connections ----------------------------------------------------------------

def params_reference() -> str:
    out = ["# DAG parameters", "",
           "The archive DAG's trigger form (Airflow's *Trigger DAG w/ config*), generated from "
           "`kafka_archive.airflow.params.SCHEMAS`. Airflow checks a trigger against these JSON "
           "schemas (the REST API answers 400 naming the parameter) and the plugin refuses a "
           "parameter the DAG lacks or a topic the group does not archive.", "",
           "| param | default | title | what it does | schema |", "|---|---|---|---|---|"]
    for name, (default, spec) in params.SCHEMAS.items():
        rest = {k: v for k, v in spec.items() if k not in ("title", "description")}
        out.append(f"| `{name}` | `{json.dumps(default)}` | {spec.get('title', '')} | "
                   f"{spec.get('description', '')} | `{json.dumps(rest)}` |".replace("\n", " "))
    return "\n".join(out) + "\n"


def connections_reference() -> str:
    info = provider.get_provider_info()
    out = ["# Connections", "",
           "The Airflow connections kafka-archive reads. Its own connection type comes with "
           "the provider (`airflow providers list` shows `kafka-archive`; the connection form "
           "offers the type); the others are Airflow's own providers' types.", "",
           "| connection (default id) | type | what for |", "|---|---|---|",
           "| `kafka_archive_s3` (`s3_conn_id`) | `aws` (Amazon provider) | the archive root and "
           "S3 token roots: login/password or the instance's role, `endpoint_url` for a "
           "non-AWS server |",
           "| `kafka.conn_id` (no default) | `kafka_archive_kafka` (this provider) or `kafka` "
           "(Kafka provider) | the brokers and the client's security settings |",
           "| `kafka_archive_smtp` (`alerts.smtp_conn_id`) | `smtp` | the alert mails |",
           "| `kafka_archive_spark` | `spark` | spark-submit's master (groups without "
           "`spark_connect`) |",
           "| a group's `spark_connect` | `spark_connect` | the Spark Connect server the group's "
           "jobs run on |",
           "| an Iceberg catalog's `conn_id` | `postgres`, or any type whose extra holds "
           "pyiceberg properties | a table group's catalog |", ""]
    for kind in info["connection-types"]:
        behaviour = kind.get("ui-field-behaviour", {})
        out += [f"## `{kind['connection-type']}`: {kind['hook-name']}", "",
                f"Hook: `{kind['hook-class-name']}`. Hidden standard fields: "
                f"{', '.join(behaviour.get('hidden-fields', [])) or 'none'}. Relabelled: "
                + ", ".join(f"{k} as *{v}*" for k, v in behaviour.get("relabeling", {}).items())
                + ".", "", "| field | label | schema | description |", "|---|---|---|---|"]
        for name, field in kind.get("conn-fields", {}).items():
            out.append(f"| `{name}` | {field['label']} | `{json.dumps(field['schema'])}` | "
                       f"{field.get('description', '')} |")
        out.append("")
    return "\n".join(out) + "\n"


def assets_reference() -> str:
    from kafka_archive import config
    from kafka_archive.airflow import assets

    example = config.load(EXAMPLE_CONFIG)
    doc = assets.__doc__.strip().split("\n\n")
    out = ["# Assets", "", "Generated from `kafka_archive.airflow.assets`.", "",
           *("\n".join(part.splitlines()) + "\n" for part in doc),
           "For the example config (`config/kafka-archive.yaml`) and a topic `orders`:", "",
           "| what | name | URI |", "|---|---|---|",
           f"| the group's alias (a DAG's outlet) | `{assets.alias('backup').name}` | |"]
    for group in example.groups:
        topic = assets.topic_asset(example, group, "orders")
        out.append(f"| topic `orders` of group `{group}` | `{topic.name}` | `{topic.uri}` |")
        if example.group(group).layout.kind == "event_time":
            done = assets.finalized_asset(example, group, "orders")
            out.append(f"| its finalized time partitions | `{done.name}` | `{done.uri}` |")
    return "\n".join(out) + "\n"


def metrics_reference() -> str:
    from kafka_archive.monitor import metrics

    doc = metrics.__doc__.strip().split("\n\n")
    out = ["# Metrics", "", "Generated from `kafka_archive.monitor.metrics`.", "",
           *("\n".join(part.splitlines()) + "\n" for part in doc),
           "Each name below follows Airflow's `statsd_prefix` (`airflow` by default), so "
           "StatsD receives `airflow.kafka_archive.lag_messages`; through Prometheus's "
           "`statsd_exporter` (tags as labels) it is `airflow_kafka_archive_lag_messages` and "
           "a timing is a summary in seconds. The Grafana dashboard "
           "`docs/operate/grafana-dashboard.json` charts them "
           "([Operate](../operate/index.md#metrics)).", "",
           "| name | kind | tags | what |", "|---|---|---|---|"]
    for name, kind in metrics.METRICS.items():
        out.append(f"| `{metrics.PREFIX}{name}` | {kind.kind} | "
                   f"{', '.join(f'`{t}`' for t in kind.tags)} | {kind.what} |")
    return "\n".join(out) + "\n"


def lineage_reference() -> str:
    from openlineage.client.generated.output_statistics_output_dataset import \
        OutputStatisticsOutputDatasetFacet
    from openlineage.client.serde import Serde

    from kafka_archive import config
    from kafka_archive.airflow import lineage

    example = config.load(EXAMPLE_CONFIG)
    topic = lineage.kafka_naming(example.bootstrap_servers, "orders")
    doc = lineage.__doc__.strip().split("\n\n")
    out = ["# Lineage", "", "Generated from `kafka_archive.airflow.lineage`.", "",
           *("\n".join(part.splitlines()) + "\n" for part in doc),
           "For the example config (`config/kafka-archive.yaml`) and a topic `orders`:", "",
           "| dataset | namespace | name | table (symlink) |", "|---|---|---|---|",
           f"| the topic (every group's input) | `{topic.get_namespace()}` | "
           f"`{topic.get_name()}` | |"]
    for group in example.groups:
        made = json.loads(Serde.to_json(lineage.topic_output(
            example, group, "orders", OutputStatisticsOutputDatasetFacet())))
        table = made.get("facets", {}).get("symlinks", {}).get("identifiers", [])
        out.append(f"| group `{group}`'s output | `{made['namespace']}` | `{made['name']}` | "
                   + ", ".join(f"`{t['name']}` in `{t['namespace']}`" for t in table) + " |")
    out += ["", f"## `{lineage.OFFSETS_FACET}`", "",
            "The input facet of the offsets read, its schema's `$id` the facet's `_schemaURL`:",
            "", "```json", json.dumps(lineage.offsets_facet_schema(), indent=2), "```", ""]
    return "\n".join(out)


def packages_reference() -> str:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    out = ["# Packages", "", "What the wheel installs, generated from `pyproject.toml`: ranges "
           "that Airflow's constraints file satisfies, never Airflow itself (its providers "
           "require it), no test tools.", "", "## Always", "",
           *(f"- `{r}`" for r in project["dependencies"])]
    for extra, wanted in project["optional-dependencies"].items():
        out += ["", f"## `kafka-archive[{extra}]`", "", *(f"- `{r}`" for r in wanted)]
    executor = " ".join(f'"{r}"' for r in project["optional-dependencies"]["executor"])
    out += ["", "A Spark cluster's executor image (beside pyspark, which Spark provides; the "
            "library itself travels with each job as a zip):", "", "```sh",
            f"pip install {executor}", "```", ""]
    return "\n".join(out)


# --- the alert mails ------------------------------------------------------------------------

def mail_page(kind: str) -> str:
    example = mail_examples.EXAMPLES[kind]
    message = example.render()
    return "\n".join([
        f"# Mail: {example.title}", "", example.meaning, "",
        "## What to do", "", example.action, "",
        "## The mail", "", f"**Subject:** `{message.subject}`", "",
        "The body below is rendered by `kafka_archive.monitor.alerts."
        f"{example.builder}` on example facts, as the deployment sends it:", "",
        '<div class="mail" markdown="0">', message.html.split("<body", 1)[1].split(">", 1)[1]
        .rsplit("</body>", 1)[0], "</div>", ""])
