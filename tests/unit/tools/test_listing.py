"""`kafka-archive ls` lists what the catalog says is current, one line per file."""

from __future__ import annotations

import json

from kafka_archive.catalog import Contents
from kafka_archive.tools import listing


def row(topic, partition, start, end, files, run="s3://b/r/_runs/backup/run-1"):
    return {"topic": topic, "partition": partition, "start": start, "end": end,
            "records": sum(f["records"] for f in files), "files": json.dumps(files),
            "_run": run, "_generation": 1}


CONTENTS = Contents(rows=[
    row("orders", 0, 0, 10, [{"url": "s3://b/r/backup/orders/partition=0/1_0_00000000000000000000.seq",
                              "records": 10, "bytes": 400, "sha256": "x"}]),
    row("orders", 1, 5, 9, [{"url": "s3://b/r/p/orders/dt=2026-01-01/1_1_00000000000000000005.seq",
                             "records": 3, "bytes": 90, "sha256": "y"},
                            {"url": "s3://b/r/p/orders/dt=2026-01-02/1_1_00000000000000000006.seq",
                             "records": 1, "bytes": 30, "sha256": "z"}], run="s3://b/r/_runs/p/run-2"),
    row("billing", 0, 0, 0, []),  # a slice Kafka held nothing in: no file to list
], plans={}, lost={})


def test_every_file_of_every_current_slice_is_listed_with_its_slice_range():
    files = listing.list_files(CONTENTS)
    assert [(f.topic, f.partition, f.start, f.end, f.records, f.bytes, f.run) for f in files] == [
        ("orders", 0, 0, 10, 10, 400, "run-1"), ("orders", 1, 5, 9, 3, 90, "run-2"),
        ("orders", 1, 5, 9, 1, 30, "run-2")]


def test_one_topic_and_the_renderings():
    files = listing.list_files(CONTENTS, "billing")
    assert files == [] and listing.render(files).endswith("0 files, 0 records, 0 bytes")
    text = listing.render(listing.list_files(CONTENTS))
    assert "orders\t0\t[0, 10)\t10\t400\ts3://b/r/backup/orders/partition=0/" in text
    assert text.endswith("3 files, 14 records, 520 bytes")
    assert json.loads(json.dumps(listing.as_json(listing.list_files(CONTENTS))))[2]["bytes"] == 30
