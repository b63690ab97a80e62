import json
import sys
import types

import msgpack
import pytest

from kafka_archive import layout
from kafka_archive.formats import parsers
from kafka_archive.formats.parsers import ParseError, ParserSpec, event_time_ms, parser_for
from kafka_archive.errors import ConfigError
from kafka_archive.formats.records import Record

T = 1_795_244_400_123  # 2026-11-21T07:00:00.123Z


def msg(value, offset=7, timestamp_ms=T):
    if isinstance(value, dict):
        value = json.dumps(value).encode()
    return Record(offset, None, value, timestamp_ms)


def parse(kind, record, topic="orders", **options):
    return event_time_ms(parser_for(ParserSpec(kind, tuple(options.items()))), topic, record)


def test_timestamp_parser_reads_the_kafka_timestamp():
    assert parse("timestamp", msg(b"anything")) == T
    with pytest.raises(ParseError, match=r"^topic orders offset 7: the message has no timestamp$"):
        parse("timestamp", msg(b"x", timestamp_ms=-1))


@pytest.mark.parametrize("value, unit, expected", [
    (T // 1000, "s", T // 1000 * 1000),
    (T / 1000, "s", T),                       # float seconds: no ms lost to float noise
    (T, "ms", T),
    (T * 1000 + 999, "us", T),                # finer units floor to the ms
    (T * 1_000_000 + 999_999, "ns", T),
    (str(T), "ms", T),                        # numeric text
    ("2026-11-21T07:00:00.123Z", "iso8601", T),
    ("2026-11-21T09:00:00.123+02:00", "iso8601", T),
    ("2026-11-21T07:00:00.123", "iso8601", T),  # no offset: UTC
    (T // 1000, "auto", T // 1000 * 1000),
    (T, "auto", T),
    (T * 1000, "auto", T),
    (T * 1_000_000, "auto", T),
    ("2026-11-21T07:00:00.123Z", "auto", T),
    (str(T), "auto", T),
    (-1500, "ms", -1500),                     # before 1970: laid out like any time
])
def test_json_units(value, unit, expected):
    assert parse("json", msg({"meta": {"event_time": value}}), field="meta.event_time",
                 unit=unit) == expected


def test_msgpack_parser_reads_a_map_and_msgpack_timestamps():
    value = msgpack.packb({"ts": T, "nested": {"at": msgpack.Timestamp.from_unix_nano(T * 10**6)}})
    assert parse("msgpack", msg(value), field="ts", unit="ms") == T
    assert parse("msgpack", msg(value), field=["nested", "at"]) == T


def test_a_field_key_holding_a_dot_is_given_as_a_list():
    assert parse("json", msg({"event.time": T}), field=["event.time"], unit="ms") == T


@pytest.mark.parametrize("kind, value, reason", [
    ("json", b"{not json", "the value is not a JSON object"),
    ("json", b"\xff\xfe\x00", "the value is not a JSON object"),
    ("json", b"[" * 100_000, "the value is not a JSON object"),
    ("json", None, "the message is a tombstone"),
    ("json", b"[1, 2]", "the value has no field 'meta.ts'"),
    ("json", b'{"meta": 5}', "the value has no field 'meta.ts'"),
    ("json", b'{"meta": {"ts": null}}', "meta.ts = None is not a number"),
    ("json", b'{"meta": {"ts": true}}', "meta.ts = True is not a number"),
    ("json", b'{"meta": {"ts": "yesterday"}}', "meta.ts = 'yesterday' is not ISO 8601 text"),
    ("json", b'{"meta": {"ts": NaN}}', "meta.ts = nan is not a time"),
    ("json", b'{"meta": {"ts": 1e400}}', "meta.ts = inf is not a time"),
    ("json", b'{"meta": {"ts": 1e300}}', "outside years 1..9999"),
    ("msgpack", b"\xc1", "the value is not a MessagePack map"),
    ("msgpack", b"\x92\x01", "the value is not a MessagePack map"),
    ("msgpack", b"\x81\x91\x01\x02", "the value is not a MessagePack map"),
])
def test_unreadable_messages_raise_parse_error_naming_topic_offset_and_why(kind, value, reason):
    with pytest.raises(ParseError, match=r"^topic orders offset 7: ") as caught:
        parse(kind, msg(value), field="meta.ts")
    assert reason in caught.value.reason
    assert (caught.value.topic, caught.value.offset) == ("orders", 7)


class EveryMessageAtDouble(parsers.Parser):
    def __init__(self, factor=2):
        self.factor = factor

    def event_time_ms(self, record):
        if record.value == b"bad":
            raise ParseError("custom says no")
        return record.offset * self.factor


class ReturnsText(parsers.Parser):
    def event_time_ms(self, record):
        return "soon"


@pytest.fixture
def custom_module(monkeypatch):
    module = types.ModuleType("custom_parsers_for_test")
    module.EveryMessageAtDouble, module.ReturnsText, module.NotAParser = \
        EveryMessageAtDouble, ReturnsText, dict
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return module.__name__


def test_custom_parsers_by_dotted_path_with_options(custom_module):
    for path in (f"{custom_module}:EveryMessageAtDouble", f"{custom_module}.EveryMessageAtDouble"):
        assert parse(path, msg(b"x", offset=21), factor=3) == 63
    with pytest.raises(ParseError, match="^topic orders offset 7: custom says no$"):
        parse(f"{custom_module}:EveryMessageAtDouble", msg(b"bad"))
    with pytest.raises(ParseError, match="ReturnsText returned 'soon', not an int of ms"):
        parse(f"{custom_module}:ReturnsText", msg(b"x"))


@pytest.mark.parametrize("kind, options, message", [
    ("xml", {}, "neither built in"),
    ("no_such_module_here:Parser", {}, "cannot import no_such_module_here"),
    ("{module}:Missing", {}, "Missing in custom_parsers_for_test is not a subclass"),
    ("{module}:NotAParser", {}, "NotAParser in custom_parsers_for_test is not a subclass"),
    ("{module}:EveryMessageAtDouble", {"speed": 1}, "refuses options"),
    ("json", {}, "refuses options"),
    ("json", {"field": "ts", "unit": "minutes"}, "unit must be one of"),
    ("json", {"field": ""}, "field must be a dotted path"),
    ("timestamp", {"field": "ts"}, "refuses options"),
])
def test_bad_parser_specs_are_config_errors(custom_module, kind, options, message):
    with pytest.raises(ConfigError, match=message):
        parser_for(ParserSpec(kind.format(module=custom_module), tuple(options.items())))


def test_parse_error_survives_pickling_for_spark():
    import pickle

    error = pickle.loads(pickle.dumps(ParseError("why", "t", 3)))
    assert str(error) == "topic t offset 3: why" and error.offset == 3


def test_event_time_bounds_are_the_layouts():
    assert parse("json", msg({"ts": layout.MIN_EVENT_MS}), field="ts", unit="ms") == \
        layout.MIN_EVENT_MS
    with pytest.raises(ParseError, match="outside years"):
        parse("json", msg({"ts": layout.MAX_EVENT_MS}), field="ts", unit="ms")
