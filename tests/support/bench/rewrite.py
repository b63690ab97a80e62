"""A compaction's memory (issue 56, defect 5): one bin of key_value Parquet files written
again as one (archive.table_files.rewrite, what commit.compaction does per bin), in a
process of its own; prints the bin's size, the output's, its row groups, and the
process's peak resident memory above what it held before the rewrite (ru_maxrss).

    python -m tests.support.bench.rewrite [--mib 65] [--files 26]

No services: the inputs are written on local storage by the library's own writer
(random, incompressible values of 1 KiB, as a slice of the archive job writes them).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

VALUE_BYTES = 1024


def make_inputs(folder: Path, mib: int, files: int) -> list[str]:
    from kafka_archive.formats.parquet import KeyValueWriter
    from kafka_archive.formats.records import Record

    per_file = max(1, (mib << 20) // VALUE_BYTES // files)
    urls = []
    for i in range(files):
        path = folder / f"0_3_{i * per_file:020d}.parquet"
        with open(path, "wb") as out:
            writer = KeyValueWriter(out, {"topic": "bench"}, path.name)
            for offset in range(i * per_file, (i + 1) * per_file):
                writer.append(Record(offset, f"k{offset}".encode(), os.urandom(VALUE_BYTES),
                                     1_800_000_000_000 + offset, [("h", b"x")]))
            writer.close()
        urls.append(path.as_uri())
    return urls


def rewrite_here(urls: list[str], output: str) -> dict:
    """In this process: the peak resident memory the rewrite added, and what it wrote."""
    import pyarrow.parquet as pq

    from kafka_archive.archive.table_files import Output, rewrite
    from kafka_archive.storage import Storage

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    entry = rewrite(Storage(), Output(output, tuple(urls)))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    meta = pq.ParquetFile(output.removeprefix("file://")).metadata
    return {"records": entry["records"], "bytes": entry["bytes"],
            "row_groups": meta.num_row_groups, "peak_added_kib": peak - before}


def main(argv: list[str] | None = None) -> int:
    args = argparse.ArgumentParser(description=__doc__)
    args.add_argument("--mib", type=int, default=65, help="the bin's size")
    args.add_argument("--files", type=int, default=26, help="its files")
    args.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    opts = args.parse_args(argv)
    if opts.child:  # the measured process: imports first, so they are not counted
        import pyarrow.parquet  # noqa: F401

        from kafka_archive.archive import table_files  # noqa: F401
        print(json.dumps(rewrite_here(json.loads(opts.child[0]), opts.child[1])))
        return 0
    with tempfile.TemporaryDirectory(prefix="kafka-archive-rewrite-bench-") as folder:
        urls = make_inputs(Path(folder), opts.mib, opts.files)
        size = sum(Path(u.removeprefix("file://")).stat().st_size for u in urls)
        output = (Path(folder) / "out" / "0_3_0.parquet").as_uri()
        (Path(folder) / "out").mkdir()
        done = subprocess.run([sys.executable, "-m", "tests.support.bench.rewrite", "--child",
                               json.dumps(urls), output], capture_output=True, text=True,
                              check=True)
        found = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"bin: {len(urls)} files, {size / 2**20:.1f} MiB, {found['records']} records")
    print(f"output: {found['bytes'] / 2**20:.1f} MiB in {found['row_groups']} row group(s)")
    print(f"peak memory added by the rewrite: {found['peak_added_kib'] / 1024:.0f} MiB "
          f"({found['peak_added_kib'] / 1024 / (size / 2**20):.1f}x the bin)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
