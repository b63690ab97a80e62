"""A catalog rebuild's spill (catalog.rebuild.from_run_folders): what each run changed,
per Kafka partition on local disk, then folded a partition at a time, so that a rebuild's
memory follows one partition's rows, not the group's history."""

from __future__ import annotations

import json
import os
import tempfile
from collections import defaultdict
from itertools import groupby
from typing import Iterator

from kafka_archive import layout
from kafka_archive.catalog.state import State, row_key
from kafka_archive.catalog.store import StoredRow
from kafka_archive.manifest import row_files


class Spill:
    """The rows each run added and the files its rewind moved aside, per Kafka partition
    in log order, in files of the local temporary folder (buffered: BUFFER bytes in
    memory at most); then folded a partition at a time into its current rows, written in
    key order to one more file and read back from it. A file moved aside is routed to its
    partition by its name (layout.parse_url); one whose name does not parse goes to every
    partition seen so far. Plain files, not SQLite: its inserts cost 40 us a row here."""

    BUFFER = 64 << 20

    def __init__(self, root: str, spec: layout.LayoutSpec):
        self.root, self.spec = root, spec
        self.folder = tempfile.TemporaryDirectory(prefix="kafka-archive-rebuild-")
        self.parts: dict[tuple[str, int], int] = {}  # (topic, partition) -> its file's number
        self.pending: dict[int, list[str]] = defaultdict(list)  # part -> lines not written
        self.buffered = 0
        self.events = 0

    def _path(self, name) -> str:
        return os.path.join(self.folder.name, str(name))

    def _part(self, topic: str, partition: int) -> int:
        return self.parts.setdefault((topic, partition), len(self.parts))

    def event(self, superseded, missed: set[tuple[str, int]], added: list[dict]) -> None:
        self.events += 1
        for url in superseded:
            where = layout.parse_url(self.root, url, self.spec)
            line = f"{self.events}\tG\t{json.dumps(url)}\n"
            if where is None:
                for key, part in self.parts.items():
                    if key not in missed:
                        self._write(part, line)
            elif (where.topic, where.name.partition) not in missed:
                self._write(self._part(where.topic, where.name.partition), line)
        for r in added:
            self._write(self._part(r["topic"], r["partition"]),
                        f"{self.events}\tA\t{json.dumps(r, separators=(',', ':'))}\n")

    def _write(self, part: int, line: str) -> None:
        self.pending[part].append(line)
        self.buffered += len(line)
        if self.buffered > self.BUFFER:
            self._flush()

    def _flush(self) -> None:
        for part, lines in self.pending.items():
            with open(self._path(part), "a", encoding="utf-8") as out:
                out.writelines(lines)
        self.pending.clear()
        self.buffered = 0

    def fold(self, state: State) -> Iterator[StoredRow]:
        """Each partition's events applied to its rows and to the state's summaries, now;
        the current rows, in key order, read back lazily (the temporary folder is
        removed once they are read)."""
        self._flush()
        with open(self._path("current"), "w", encoding="utf-8") as out:
            for (topic, partition) in sorted(self.parts):
                for row, text in self._fold_one(state, self.parts[(topic, partition)]):
                    out.write(f"{topic}\t{partition}\t{row['_generation']}\t{row['start']}\t"
                              f"{row['end']}\t{text}\n")
        return self._read()

    def _fold_one(self, state: State, part: int) -> list[tuple[dict, str]]:
        rows: dict[tuple, tuple[dict, str]] = {}
        key_of: dict[str, tuple] = {}  # file URL -> the key of the current row holding it
        with open(self._path(part), encoding="utf-8") as lines:
            for _, event in groupby((line.rstrip("\n").split("\t", 2) for line in lines),
                                    key=lambda op: op[0]):
                gone, added = {}, []
                for _, kind, text in event:
                    if kind == "G":
                        if (key := key_of.get(json.loads(text))) is not None:
                            gone[key] = None
                    else:
                        added.append((json.loads(text), text))
                out = {key: rows[key][0] for key in gone}
                out.update((row_key(r), rows[row_key(r)][0]) for r, _ in added
                           if row_key(r) in rows)
                for key in out:
                    for f in row_files(rows.pop(key)[0]):
                        key_of.pop(f["url"], None)
                for row, text in added:
                    rows[row_key(row)] = (row, text)
                    key_of.update((f["url"], row_key(row)) for f in row_files(row))
                state.apply_rows(list(out.values()), [row for row, _ in added])
        return [rows[key] for key in sorted(rows)]

    def _read(self) -> Iterator[StoredRow]:
        try:
            with open(self._path("current"), encoding="utf-8") as lines:
                for line in lines:
                    topic, partition, generation, start, end, text = line.rstrip("\n").split(
                        "\t", 5)
                    yield StoredRow(topic, int(partition), int(generation), int(start),
                                    int(end), text)
        finally:
            self.folder.cleanup()
