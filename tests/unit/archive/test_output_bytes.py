"""The archive job writes the same bytes for the same plan and config, release after
release: every format's files and manifest rows for the golden records (archive_golden)
against checksums computed with the per-record writer before the job was made faster."""

import json
from pathlib import Path

import pytest

from tests.support import archive_golden  # the golden records, every encoding's edge cases
from kafka_archive import formats

GOLDEN = json.loads((Path(__file__).parent / "golden_output.json").read_text())


@pytest.mark.parametrize("name", sorted(archive_golden.FORMATS))
def test_job_writes_the_golden_bytes(tmp_path, name):
    written = archive_golden.write(tmp_path, archive_golden.FORMATS[name])
    assert written["files"] == GOLDEN[name]["files"]
    assert written["rows"] == GOLDEN[name]["rows"]


@pytest.mark.parametrize("name", ["seq-msgpack-none", "seq-msgpack-default", "seq-offset-none"])
@pytest.mark.parametrize("rows_per_batch", [7, 1000])
def test_how_spark_cuts_batches_does_not_change_the_bytes(tmp_path, name, rows_per_batch):
    # block and sync-point state, max_bytes cuts and gaps carry across batch boundaries
    rows = archive_golden.records()
    written = archive_golden.write(tmp_path, archive_golden.FORMATS[name],
                                   archive_golden.arrow_batches(rows, rows_per_batch))
    assert written == GOLDEN[name]


def test_level_1_is_the_only_change_a_faster_zlib_level_makes(tmp_path):
    fast = {**archive_golden.FORMATS["seq-msgpack-default"], "level": 1}
    written = archive_golden.write(tmp_path, fast)
    golden = GOLDEN["seq-msgpack-default"]
    assert set(written["files"]) == set(golden["files"])
    assert all(written["files"][f]["sha256"] != golden["files"][f]["sha256"] for f in golden["files"])
    for row in written["rows"] + golden["rows"]:
        for name in ("bytes", "crc32c", "url", "files"):
            row.pop(name)
    assert written["rows"] == golden["rows"]
    with open(tmp_path / written_name(golden), "rb") as f:
        assert [r.offset for r in formats.read(f, written_name(golden))][:3] == [0, 6, 7]


def written_name(golden):
    return sorted(golden["files"])[0]


def test_the_golden_records_cover_the_encodings_edge_cases():
    rows = archive_golden.records()
    values = [r["value"] for r in rows]
    keys = [len(r["key"]) for r in rows if r["key"] is not None]
    headers = [h for r in rows for h in r["headers"] or ()]
    assert None in values and b"" in values and max(map(len, filter(None, values))) >= 100_000
    assert {0, 255, 256, 65_535}.issubset(keys)
    assert max(len(r["headers"] or ()) for r in rows) >= 16  # msgpack array16
    name_sizes = {len(h["key"].encode()) for h in headers}  # fixstr, str8, str16
    assert 0 in name_sizes and any(32 <= n < 256 for n in name_sizes) and max(name_sizes) >= 256
    assert any(h["value"] is None for h in headers)
    assert {r["timestamp_ms"] for r in rows} >= {-1, -33, -129, -32_769, 2**32}
    cut = [r for name in GOLDEN for r in GOLDEN[name]["rows"] if r["cut"]]
    assert cut and all(r["records"] for r in cut)
