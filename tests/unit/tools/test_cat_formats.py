import io
import json

from kafka_archive.formats.records import Record
from kafka_archive.tools.cat import format_record, json_record, preview, record_from_json

RECORDS = [
    Record(7, b"k\x00\xff", b'{"a": 1}\n', 1_767_225_600_123, [("h", b"\x01\x02"), ("n", None)]),
    Record(8, None, None, 1_767_225_600_124, []),           # a tombstone without a key
    Record(9, b"", b"", None, []),                          # empty, not null
]


def test_json_lines_parse_and_round_trip_every_field():
    for r in RECORDS:
        line = json_record(r)
        assert "\n" not in line
        parsed = json.loads(line)
        assert parsed["offset"] == r.offset and parsed["timestamp_ms"] == r.timestamp_ms
        assert record_from_json(line) == r
    assert json.loads(json_record(RECORDS[0]))["value"] == "eyJhIjogMX0K"  # base64 of the value
    assert json.loads(json_record(RECORDS[1]))["value"] is None


def test_text_shows_readable_values_escaped_and_cut():
    assert preview(b"caf\xc3\xa9\n\tx") == "café\\n\\tx"
    assert preview(b"\xff\x00") == "\\xff\\x00"
    assert preview(None) == "<null>" and preview(b"") == "<empty>"
    long = preview(b"x" * 250)
    assert long.startswith("x" * 200) and long.endswith("...(+50 chars)")
    line = format_record(RECORDS[0])
    assert line.startswith("7  2026-01-01T00:00:00.123Z  key=k\\x00\\xff  value={\"a\": 1}\\n")
    assert line.endswith("headers=h,n") and "b'" not in line


def test_raw_writes_values_verbatim(monkeypatch):
    from kafka_archive.tools import cat

    monkeypatch.setattr(cat, "read_archived", lambda storage, url: iter(RECORDS))
    out = io.BytesIO()
    cat.cat_file(None, "x.seq", None, "raw", out)
    assert out.getvalue() == b'{"a": 1}\n\n\n\n'
    out = io.BytesIO()
    cat.cat_file(None, "x.seq", 1, "json", out)
    assert [record_from_json(line) for line in out.getvalue().decode().splitlines()] == RECORDS[:1]
