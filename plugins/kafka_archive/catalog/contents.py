"""The current rows of a group as the tools take them: rows with the plan each came
from (read on first use) and the ranges lost to retention."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Mapping

from kafka_archive.catalog.rebuild import AcceptedLoss
from kafka_archive.catalog.state import lost_ranges

Range = tuple[int, int]


class Plans(Mapping):
    """Run folder -> its plan.json, read once when first asked for."""

    def __init__(self, storage, known: dict[str, dict] | None = None):
        self._storage, self._plans = storage, dict(known or {})

    def __getitem__(self, run: str) -> dict:
        if run not in self._plans:
            data = self._storage.get_or_none(f"{run}/plan.json") if self._storage else None
            if data is None:
                raise KeyError(run)
            self._plans[run] = json.loads(data)
        return self._plans[run]

    def __iter__(self):
        return iter(self._plans)

    def __len__(self) -> int:
        return len(self._plans)


@dataclass(frozen=True)
class Contents:
    """Current rows sorted by (topic, partition, generation, start). Each row is its
    manifest (or backfill) row plus `_run`, the folder of the run whose plan made the
    slice, and `_generation`, that plan's generation."""
    rows: list[dict]
    plans: Mapping[str, dict] = field(default_factory=dict)
    lost: dict[tuple[str, int], list[Range]] = field(default_factory=dict)
    accepted: tuple[AcceptedLoss, ...] = ()

    @classmethod
    def of(cls, catalog, rows: list[dict]) -> Contents:
        return cls(rows, Plans(catalog.storage), lost_ranges(catalog.state),
                   tuple(AcceptedLoss(**a) for a in catalog.state.accepted))

    def of_topic(self, topic: str) -> list[dict]:
        return [row for row in self.rows if row["topic"] == topic]

    def format_of(self, row: dict) -> dict:
        """The format a row's files were written in: its plan's, for the row's topic
        (planning.Plan.format_for on the plan as stored)."""
        plan = self.plans.get(row["_run"], {})
        return plan.get("topic_formats", {}).get(row["topic"], plan.get("format", {}))

    def gaps(self) -> dict[tuple[str, int], list[Range]]:
        """(topic, partition) -> offsets Kafka itself lacks, as the rows recorded them."""
        found: dict[tuple[str, int], list[Range]] = defaultdict(list)
        for row in self.rows:
            found[(row["topic"], row["partition"])] += [(a, b) for a, b in row.get("gaps", ())]
        return found
