"""Deterministic Kafka records (as Arrow batches, the columns the job's reader builds), and the
archive job's files for them in every format: the input of the byte-identity test
(test_output_bytes.py) and of its golden checksums (golden_output.json), which were
computed with the per-record writer (commit "golden checksums") before the job learnt
to encode whole batches. Regenerate only with a new generation:

    .venv/bin/python -m tests.support.archive_golden \
        tests/unit/archive/golden_output.json
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

from kafka_archive import config as config_module
from kafka_archive.archive import job
from kafka_archive.plan.planning import Plan, Slice
from kafka_archive.storage import Storage, local_path

AUDIT_HEADER = "kafka-archive-source"
FORMATS = {
    "seq-msgpack-none": {"kind": "sequencefile", "key": "msgpack", "compression": "none"},
    "seq-msgpack-default": {"kind": "sequencefile", "key": "msgpack", "compression": "default"},
    "seq-msgpack-gzip": {"kind": "sequencefile", "key": "msgpack", "compression": "gzip"},
    "seq-offset-none": {"kind": "sequencefile", "key": "offset", "compression": "none"},
    "seq-offset-default": {"kind": "sequencefile", "key": "offset", "compression": "default"},
    "text-none": {"kind": "text", "compression": "none", "escape_newlines": False},
    "text-escaped-gzip": {"kind": "text", "compression": "gzip", "escape_newlines": True},
    "baldr": {"kind": "baldr", "compression": "gzip"},
}
# (partition, first offset, records, max_bytes): across msgpack's integer widths (fixint,
# uint8, uint16, uint32, uint64), a slice cut by max_bytes inside a batch, one record
# larger than max_bytes alone (always kept), and a slice ending in a gap
SLICES = [(0, 0, 700, 1 << 30), (1, 120, 400, 1 << 30), (2, 65_500, 300, 1 << 30),
          (3, 2**32 - 150, 300, 1 << 30), (4, 2**40, 900, 600_000), (5, 7, 3, 10)]
BATCH_ROWS = 128  # small batches, so slices span several and some batches hold two slices


def _bytes(rng: random.Random, size: int, text: bool) -> bytes:
    if text:  # compressible, like log lines
        words = [b"alpha", b"beta", b"gamma", b"\\", b"12345", b"\xc3\xa9t\xc3\xa9", b" "]
        out = b"".join(words[rng.getrandbits(3) % len(words)] for _ in range(size // 4 + 1))
        return out[:size]
    return rng.getrandbits(8 * size).to_bytes(size, "big") if size else b""


def _size(rng: random.Random) -> int:
    sizes = (0, 1, 31, 32, 100, 255, 256, 1000, 3000, 65_535, 65_536, 200_000)
    weights = rng.getrandbits(10)
    if weights < 4:
        return sizes[-3 + weights % 3]  # rare: big ones
    return sizes[rng.getrandbits(8) % 9]


def _timestamp(rng: random.Random) -> int:
    special = (-1, 0, 127, 128, -32, -33, -128, -129, -32_768, -32_769, -(2**31) - 1,
               2**32, 1_795_300_000_000)
    if rng.getrandbits(4) == 0:
        return special[rng.getrandbits(8) % len(special)]
    return 1_795_300_000_000 + rng.getrandbits(22)


def _headers(rng: random.Random):
    kind = rng.getrandbits(3)
    if kind == 0:
        return None
    if kind in (1, 2):
        return []
    count = 20 if rng.getrandbits(5) == 0 else 1 + rng.getrandbits(2)
    out = []
    for i in range(count):
        if i == 0 and rng.getrandbits(1):
            sources = (b"svc-a", b"svc-b", b"", b"\xff\xfe", None)
            out.append({"key": AUDIT_HEADER, "value": sources[rng.getrandbits(3) % 5]})
            continue
        name_size = (0, 5, 31, 32, 40, 300)[rng.getrandbits(3) % 6]
        name = "".join("hé"[rng.getrandbits(1)] for _ in range(name_size))
        value = None if rng.getrandbits(3) == 0 else _bytes(rng, _size(rng), False)
        out.append({"key": name, "value": value})
    return out


def records(seed: int = 14, newlines: bool = True) -> list[dict]:
    """Rows of the Kafka source's columns for every slice of SLICES, offsets increasing,
    with gaps. newlines=False: no value holds a newline (plain text refuses them)."""
    rng = random.Random(seed)
    rows = []
    for partition, first, count, _ in SLICES:
        offset = first
        for _ in range(count):
            key = None if rng.getrandbits(1) else _bytes(rng, _size(rng) % 70_000, False)
            value_kind = rng.getrandbits(5)
            if value_kind == 0:
                value = None  # tombstone
            else:
                value = _bytes(rng, _size(rng), text=value_kind % 4 != 1)
                if not newlines:
                    value = value.replace(b"\n", b"_")
            rows.append({"topic": "golden", "partition": partition, "offset": offset,
                         "key": key, "value": value, "timestamp_ms": _timestamp(rng),
                         "headers": _headers(rng)})
            offset += 1 + (5 if rng.getrandbits(4) == 0 else 0)
    return rows


def arrow_batches(rows: list[dict], rows_per_batch: int = BATCH_ROWS):
    """The golden records as Arrow batches of rows_per_batch rows, across partitions."""
    import pyarrow as pa

    schema = pa.schema([
        ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
        ("key", pa.binary()), ("value", pa.binary()), ("timestamp_ms", pa.int64()),
        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])))])
    for i in range(0, len(rows), rows_per_batch):
        yield pa.RecordBatch.from_pylist(rows[i:i + rows_per_batch], schema=schema)


def partition_batches(batches) -> dict[int, list]:
    """Each partition's records, as the job's Kafka reader hands them to a slice."""
    import pyarrow.compute as pc

    from kafka_archive.formats.batch import Batch

    found: dict[int, list] = {}
    for b in batches:
        for partition in sorted(set(b.column("partition").to_pylist())):
            part = b.filter(pc.equal(b.column("partition"), partition))
            found.setdefault(partition, []).append(Batch.from_arrow(part))
    return found


def plan(fmt: dict) -> Plan:
    slices = []
    for partition, first, count, max_bytes in SLICES:
        slices.append(Slice("golden", partition, first, first + 6 * count + 1, max_bytes))
    return Plan(group="backup", run_id="golden", created_at="2026-11-23T00:00:00Z",
                bootstrap="b", generation=1, format=fmt, slices=tuple(slices),
                token_versions={}, base_offsets={})


def write(folder: Path, fmt: dict, batches=None) -> dict:
    """Run the job's task body over the golden records in format `fmt`, to a
    local archive root: per file (relative name) its sha256 and size, and the manifest
    rows (URLs relative to the root, the long audit counts as their sha256)."""
    root = f"file://{folder}"
    path = folder / "kafka-archive.yaml"
    path.write_text(json.dumps({"kafka": {"bootstrap_servers": "127.0.0.1:9"}, "archive_root": root, "token_root": str(folder / "offsets"),
                                "generation": 1, "groups": {"backup": {}}}))
    config = config_module.load(path)
    newlines = fmt.get("kind") != "text" or fmt.get("escape_newlines")
    batches = batches if batches is not None else arrow_batches(records(newlines=newlines))
    task, storage = job.ArchiveTask(config, plan(fmt)), Storage.from_environment()
    per_partition = partition_batches(batches)
    rows = [task.archive(s, iter(per_partition.get(s.partition, [])), storage)
            for s in plan(fmt).slices]
    files = {}
    for row in rows:
        for f in row["files"]:
            data = local_path(f["url"]).read_bytes()
            files[f["url"][len(root) + 1:]] = {"sha256": hashlib.sha256(data).hexdigest(),
                                               "bytes": len(data)}
        row["files"] = [{**f, "url": f["url"][len(root) + 1:]} for f in row["files"]]
        row["url"] = row["url"] and row["url"][len(root) + 1:]
        # the golden rows keep these as the JSON text the job once passed them around in
        row["gaps"], row["errors"] = json.dumps(row["gaps"]), json.dumps(row["errors"])
        row["audit"] = hashlib.sha256(json.dumps(row["audit"]).encode()).hexdigest()
    return {"files": files, "rows": rows}


def main(path: str) -> None:
    """Writes the golden checksums: run once, from the per-record writer."""
    import tempfile

    out = {}
    for name, fmt in FORMATS.items():
        with tempfile.TemporaryDirectory() as tmp:
            out[name] = write(Path(tmp), fmt)
    Path(path).write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    import sys

    main(sys.argv[1])
