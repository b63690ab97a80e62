"""Config of a group's output: format, layout, parsers, lateness."""

import textwrap

import pytest

from kafka_archive import config
from kafka_archive.formats.parsers import ParserSpec
from kafka_archive.config import FormatSpec
from kafka_archive.errors import ConfigError
from kafka_archive.layout import LayoutSpec

HEAD = """
kafka: {bootstrap_servers: "b:9092"}
archive_root: s3://bucket/archive
audit: {groups: []}
groups:
  g:
"""


def load(tmp_path, group_yaml: str):
    path = tmp_path / "kafka-archive.yaml"
    path.write_text(HEAD + textwrap.indent(textwrap.dedent(group_yaml), "    "))
    return config.load(path).group("g"), path


def test_defaults_are_the_backup_group(tmp_path):
    group, _ = load(tmp_path, "schedule: null\n")
    assert group.format == FormatSpec("sequencefile", "msgpack", "default", False)
    assert group.layout == LayoutSpec("partition")
    assert group.parser == ParserSpec("timestamp") and group.topic_parsers == ()
    assert group.lateness_s == 3600


def test_partitioned_group_with_per_topic_parsers(tmp_path):
    group, _ = load(tmp_path, r"""
        layout: {kind: event_time, granularity: minute, prefixes: {minute: "m="},
                 formats: {day: "%Y%m%d"}}
        parser: {kind: json, field: meta.event_time, unit: ms}
        topic_parsers:
          "clicks\\..*": timestamp
          "logs": {kind: msgpack, field: [at, "x.y"]}
        lateness: 2h
        format: {kind: text, compression: gzip, escape_newlines: true}
    """)
    assert group.layout == LayoutSpec("event_time", "minute", ("dt=", "hr=", "m="),
                                      ("%Y%m%d", "%H", "%M"))
    assert group.parser_for("orders") == ParserSpec("json", (("field", "meta.event_time"),
                                                              ("unit", "ms")))
    assert group.parser_for("clicks.eu") == ParserSpec("timestamp")
    assert group.parser_for("logs") == ParserSpec("msgpack", (("field", ("at", "x.y")),))
    assert group.lateness_s == 7200
    assert group.format == FormatSpec("text", compression="gzip", escape_newlines=True)
    hash(group)  # still a plain value


@pytest.mark.parametrize("fmt, expected", [
    ("{kind: text}", FormatSpec("text", compression="none")),
    ("{kind: baldr}", FormatSpec("baldr", compression="gzip")),
    ("{kind: sequencefile, key: offset, compression: gzip}",
     FormatSpec("sequencefile", "offset", "gzip")),
    ("{kind: sequencefile, level: 1}", FormatSpec("sequencefile", level=1)),
    ("{kind: sequencefile, compression: fast}", FormatSpec("sequencefile", compression="fast")),
    ("{kind: sequencefile, compression: snappy}", FormatSpec("sequencefile", compression="snappy")),
])
def test_format_kinds(tmp_path, fmt, expected):
    assert load(tmp_path, f"format: {fmt}\n")[0].format == expected


EVENT_TIME = "layout: event_time\n"


@pytest.mark.parametrize("group_yaml, message", [
    ("format: {kind: avro}", r"groups.g.format.kind: unknown format kind 'avro'; one of sequencefile, text, baldr"),
    ("format: {kind: text, compression: default}",
     r"groups.g.format.compression: must be one of none, gzip"),
    ("format: {kind: text, key: offset}", r"groups.g.format.key: format kind text does not take key"),
    ("format: {kind: baldr, compression: none}", r"groups.g.format.compression: format kind baldr does not take"),
    ("format: {kind: sequencefile, level: 10}", r"groups.g.format.level: .*less than or equal to 9"),
    ("format: {kind: sequencefile, level: 0}", r"groups.g.format.level: .*greater than or equal to 1"),
    ("format: {kind: text, level: 1}", r"groups.g.format.level: format kind text does not take level"),
    ("format: {kind: sequencefile, compression: lz4}",
     r"groups.g.format.compression: must be one of none, default, gzip, fast, snappy"),
    ("format: {kind: sequencefile, compression: fast, level: 1}",
     r"groups.g.format.level: a level is zlib's: it applies to compression default or gzip, not fast"),
    ("format: {kind: text, escape_newlines: maybe}",
     r"groups.g.format.escape_newlines: must be a valid boolean"),
    ("layout: sideways", r"groups.g.layout.kind: must be 'partition' or 'event_time'"),
    ("layout: [event_time]", r"groups.g.layout: must be a valid dictionary"),
    ("layout: {granularity: day}", r"groups.g.layout: layout kind partition takes no granularity"),
    ("layout: {kind: event_time, granularity: week}", r"groups.g.layout: granularity must be"),
    ("layout: {kind: event_time, formats: {day: '%Y'}}", r"groups.g.layout: formats.day '%Y'"),
    ("layout: {kind: event_time, prefixes: {second: 's='}}",
     r"groups.g.layout.prefixes.second: must be 'day', 'hour' or 'minute'"),
    ("layout: {kind: event_time, prefixes: {day: _dt=}}", r"start with _ or \."),
    ("parser: json", r"groups.g.parser: applies only to layout kind event_time"),
    (EVENT_TIME + "parser: {kind: json, unit: ms}", r"groups.g.parser: parser json refuses"),
    (EVENT_TIME + "parser: {field: ts}", r"groups.g.parser: must be a parser name"),
    (EVENT_TIME + "parser: nope.module:Cls",
     r"groups.g.parser: parser nope.module:Cls: cannot import nope.module"),
    (EVENT_TIME + "topic_parsers: {'a\\.b': {kind: json, field: ts, unit: hours}}",
     r"groups.g.topic_parsers.a\\.b: parser json refuses options .*unit must be one of"),
    (EVENT_TIME + "topic_parsers: {'(': timestamp}", r"bad regex"),
    (EVENT_TIME + "lateness: soon", r"groups.g.lateness: must be a duration"),
])
def test_bad_group_output_config_names_file_and_key(tmp_path, group_yaml, message):
    with pytest.raises(ConfigError, match=message) as caught:
        load(tmp_path, group_yaml + "\n")
    assert str(caught.value).startswith(str(tmp_path / "kafka-archive.yaml") + ": ")



def test_per_topic_formats_override_the_groups(tmp_path):
    group, _ = load(tmp_path, r"""
        format: {kind: sequencefile, compression: none}
        topic_formats:
          "logs\\..*": {kind: text, compression: gzip}
          "raw\\..*": {kind: baldr}
        """)
    assert group.format_for("logs.web") == FormatSpec("text", "msgpack", "gzip", False)
    assert group.format_for("raw.x").kind == "baldr"
    assert group.format_for("orders") == group.format == FormatSpec("sequencefile", "msgpack", "none")


def test_a_bad_per_topic_format_names_the_topic_regex(tmp_path):
    with pytest.raises(ConfigError, match=r"groups.g.topic_formats.logs.kind: unknown format kind 'avro'"):
        load(tmp_path, """
            topic_formats:
              logs: {kind: avro}
            """)


def test_a_table_group_writes_parquet_into_a_named_catalog(tmp_path):
    group, _ = load(tmp_path, "format: {kind: parquet}\ntable: {namespace: raw}\n")
    assert group.table == config.TableSpec("local", "raw")
    loaded = config.load(tmp_path / "kafka-archive.yaml")
    assert loaded.iceberg_catalogs["local"] == {
        "type": "sql", "uri": f"sqlite:///{tmp_path.resolve() / 'iceberg' / 'catalog.db'}"}


@pytest.mark.parametrize("group_yaml, message", [
    ("table: {}\n", r"g\.table: .*format kind is parquet .*got sequencefile"),
    ("format: {kind: parquet}\ntopic_formats: {'x.*': {kind: text}}\ntable: {}\n",
     r"g\.table: .*got parquet, text"),
    ("format: {kind: parquet}\nlayout: {kind: event_time}\ntable: {}\n",
     r"g\.parser: parser timestamp gives no fields for the parsed table shape"),
    ("format: {kind: parquet}\nlayout: {kind: event_time, granularity: minute}\n"
     "parser: {kind: json, field: t}\ntable: {}\n", r"g\.layout\.granularity: .*hour or day"),
    ("format: {kind: parquet}\ntable: {columns: {a: long}}\n",
     r"g\.table\.columns: columns are the parsed shape's"),
    ("format: {kind: parquet}\nlayout: {kind: event_time}\nparser: {kind: json, field: t}\n"
     "table: {columns: {a: money}}\n", r"g\.table\.columns: .*unknown type 'money'"),
    ("format: {kind: parquet}\ntable: {catalog: prod}\n",
     r"groups\.g\.table\.catalog: names catalog 'prod', not under iceberg_catalogs"),
    ("format: {kind: parquet}\ntable: {namespace: 'a.b'}\n", r"g\.table\.namespace"),
])
def test_a_table_group_that_cannot_be_built_is_refused_by_name(tmp_path, group_yaml, message):
    with pytest.raises(ConfigError, match=message):
        load(tmp_path, group_yaml)


def test_two_table_groups_may_not_share_a_namespace(tmp_path):
    """They would share a topic's table, each commit taking the other's rows out."""
    path = tmp_path / "kafka-archive.yaml"
    table = "format: {kind: parquet}\n    table: {namespace: raw}\n"
    path.write_text(HEAD + "    " + table + "  h:\n    " + table)
    with pytest.raises(ConfigError, match=r"groups\.h\.table\.namespace: 'raw' in catalog "
                                          r"'local' is group g's namespace already"):
        config.load(path)
    path.write_text(HEAD + "    " + table + "  h:\n    " + table.replace("raw", "other"))
    assert config.load(path).group("h").table.namespace == "other"
