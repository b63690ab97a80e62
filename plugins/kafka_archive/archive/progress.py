"""What the archive job tells its log (the Airflow task's, through spark-submit's output):
one line per slice and one summary, instead of Spark's own INFO chatter (the job runs
Spark at spark.SPARK_LOG_LEVEL through `spark.log.level`). Pure functions of the manifest.
"""

from __future__ import annotations

from kafka_archive.manifest import row_files


def slice_line(row: dict) -> str:
    files = row_files(row)
    where = (files[0]["url"] if len(files) == 1 else
             f"{len(files)} files" if files else "no file (Kafka holds no message there)")
    extra = "".join(f", {row[k]} {k}" for k in ("quarantined", "late") if row.get(k))
    return (f"slice {row['topic']} partition {row['partition']} offsets [{row['start']}, "
            f"{row['end']}): {row['records']} records, {row.get('bytes') or 0} bytes{extra} -> {where}")


def summary_line(manifest: dict, seconds: float, startup_s: float | None = None) -> str:
    """`seconds`: from before Spark's session to the manifest written; `startup_s`: the
    part of it spent starting the session (the rest is the job's own work)."""
    rows = manifest["slices"]
    records = sum(r["records"] for r in rows)
    size = sum(r.get("bytes") or 0 for r in rows)
    files = sum(len(row_files(r)) for r in rows)
    rate = size / 1e6 / seconds if seconds > 0 else 0.0
    return (f"archived run {manifest['run_id']}: {len(rows)} slices, {records} records, "
            f"{size} bytes, {files} files in {seconds:.1f} s ({rate:.3g} MB/s)"
            + ("" if startup_s is None else
               f"; Spark session {startup_s:.2f} s, the job without it {seconds - startup_s:.2f} s"))


def lines(manifest: dict, seconds: float, startup_s: float | None = None) -> list[str]:
    ordered = sorted(manifest["slices"], key=lambda r: (r["topic"], r["partition"], r["start"]))
    return [slice_line(r) for r in ordered] + [summary_line(manifest, seconds, startup_s)]
