"""`kafka-archive tables`: a table group's Iceberg tables as a reader finds them: the
current snapshot (the run that made it), records and files, the snapshot history, and,
with per_hour, a query over the rows: how many messages each hour of Kafka time holds."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone

from kafka_archive.commit import iceberg
from kafka_archive.formats import columns


@dataclass
class TableView:
    name: str
    location: str
    snapshot: int | None
    run: str | None
    records: int
    files: int
    history: list[tuple[str, str]]  # (operation, run id) of each snapshot, oldest first
    per_hour: dict[str, int] = field(default_factory=dict)  # hour (UTC) -> messages
    # a parsed table's field columns, "name type" (a typed table's nested as its schema)
    columns: list[str] = field(default_factory=list)


def describe(tables: iceberg.Tables, group: str, topic: str, per_hour: bool = False,
             dead_letters: bool = False) -> TableView | None:
    """The topic's table (or its dead-letter table); None when it has none yet."""
    table = tables.find(group, topic, dead_letters)
    if table is None:
        return None
    current = table.current_snapshot()
    summary = current.summary if current is not None else {}
    fields = table.schema().fields
    parsed = not dead_letters and any(f.name == columns.EVENT_TIME for f in fields)
    view = TableView(
        iceberg.name(table), table.location(), current.snapshot_id if current else None,
        summary.get(iceberg.RUN_ID) if current else None,
        int(summary.get("total-records", 0)) if current else 0,
        int(summary.get("total-data-files", 0)) if current else 0,
        [(s.summary.operation.value, s.summary.get(iceberg.RUN_ID, "?"))
         for s in table.metadata.snapshots if s.summary is not None],
        columns=[f"{f.name} {columns.shown(iceberg.column_type(f) or str(f.field_type))}"
                 for f in fields if parsed and f.name not in columns.RESERVED])
    if per_hour and current is not None:
        stamps = table.scan(selected_fields=("kafka",)).to_arrow().column("kafka")
        view.per_hour = dict(sorted(Counter(
            _hour(t) for t in stamps.combine_chunks().field("timestamp").to_pylist()).items()))
    return view


def _hour(at: datetime | None) -> str:
    if at is None:
        return "no timestamp"
    return at.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:00Z")


def render(views: list[TableView]) -> str:
    lines = []
    for v in views:
        lines.append(f"{v.name}: {v.records} records in {v.files} files, snapshot {v.snapshot} "
                     f"(run {v.run}); {len(v.history)} snapshots: "
                     + ", ".join(f"{op} {run}" for op, run in v.history[-5:])
                     + (" (last 5)" if len(v.history) > 5 else "") + f"; at {v.location}")
        if v.columns:
            lines.append("  columns: " + ", ".join(v.columns))
        lines += [f"  {hour}\t{count}" for hour, count in v.per_hour.items()]
    return "\n".join(lines) if lines else "no tables yet (the group has committed no run)"
