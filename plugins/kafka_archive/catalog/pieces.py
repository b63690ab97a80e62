"""A compacted row: one catalog row made of several (commit.compaction), that keeps them
as its `pieces` ({start, end, records, audit, ... and `_run`, the run that archived
it}), so a rewind into it treats each piece as it treated the row (plan.rewinds) and
the row a rewind keeps of it sums the pieces it keeps. Pure."""

from __future__ import annotations

from collections import defaultdict

PIECE_FIELDS = ("start", "end", "records", "quarantined", "late", "min_timestamp_ms",
                "max_timestamp_ms", "gaps", "audit", "placed_by", "planned_at", "caught_up_at",
                "last_message", "audit_elsewhere")


def pieces(row: dict) -> list[dict]:
    """The rows a row was made of: its own `pieces` when compacted, else itself."""
    if row.get("pieces"):
        return row["pieces"]
    return [{**{k: row[k] for k in PIECE_FIELDS if k in row}, "_run": row["_run"]}]


def merged(rows: list[dict], files: list[dict], run: str) -> dict:
    """The catalog row that replaces contiguous `rows` (offset order) once their files are
    `files`: their counts summed, their pieces kept."""
    first, last = rows[0], rows[-1]
    audit, elsewhere = _summed(rows, "audit"), _summed(rows, "audit_elsewhere")
    stamps = lambda key, pick: pick((r[key] for r in rows if r.get(key) is not None),  # noqa: E731
                                    default=None)
    row = {"topic": first["topic"], "partition": first["partition"], "start": first["start"],
           "end": last["end"], "cut": last.get("cut", False),
           "records": sum(r["records"] for r in rows),
           "quarantined": sum(r.get("quarantined", 0) for r in rows),
           "late": sum(r.get("late", 0) for r in rows),
           "bytes": sum(f["bytes"] for f in files), "crc32c": None, "url": None,
           "files": files, "errors": [e for r in rows for e in r.get("errors", ())][:10],
           "min_timestamp_ms": stamps("min_timestamp_ms", min),
           "max_timestamp_ms": stamps("max_timestamp_ms", max),
           "gaps": [g for r in rows for g in r.get("gaps", ())],
           "audit": audit,
           "planned_at": max(r.get("planned_at") or "" for r in rows),
           "pieces": [p for r in rows for p in pieces(r)],
           "_run": run, "_generation": first["_generation"]}
    if elsewhere:
        row["audit_elsewhere"] = elsewhere
    if any("placed_by" in r for r in rows):
        row["placed_by"] = [step for r in rows for step in r.get("placed_by", ())]
    if caught := stamps("caught_up_at", max):
        row["caught_up_at"] = caught
    return row


def _summed(rows: list[dict], field: str) -> list[list]:
    """The rows' [source, window, messages] counts of `field` (audit, audit_elsewhere),
    summed."""
    counts: dict[tuple, int] = defaultdict(int)
    for r in rows:
        for source, window, n in r.get(field, ()):
            counts[(source, window)] += n
    return sorted([s, w, n] for (s, w), n in counts.items())
