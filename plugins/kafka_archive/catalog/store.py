"""The catalog on storage: a log of entries, snapshots of the state, row chunks.

    <root>/_catalog/<group>/log/<seq:020>.json          one entry each, created if absent
    <root>/_catalog/<group>/snapshots/<seq:020>.json    the state after entry seq, and
                                                        per topic the row chunks that hold
                                                        its current rows at that point
    <root>/_catalog/<group>/rows/<topic>/<seq:020>-<n>.json.gz   immutable row chunks
    <root>/_catalog/<group>/_latest.json                the newest snapshot's seq (a hint)

Delta Lake's checkpoint-plus-log, made small: the compare-and-swap is the creation of
log entry seq+1 with `If-None-Match: *`, so of two writers exactly one wins and the other
reads again. A reader takes the newest snapshot and the entries after it (at most
SNAPSHOT_EVERY), so its cost follows partitions and recent runs, never history. Rows are
read only by what needs them (rewinds, replay, backfill, ls, verify), and only from the
chunks whose offset bounds can hold them.

A damaged newest snapshot or chunk is read past from an older snapshot and the log
(cleanup keeps two). Past that, a writer rebuilds the catalog (catalog.rebuild, one at a
time) and a reader fails naming the damage; the rebuild claims the next seq with a
`rebuild` entry and writes its snapshot there.
"""

from __future__ import annotations

import gzip
import json
import logging
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Iterable, NamedTuple

from kafka_archive.catalog.state import OverlapError, State, part_key, row_key
from kafka_archive.errors import TerminalError, VersionConflict
from kafka_archive.storage import Storage, join

log = logging.getLogger(__name__)

FORMAT = 1
SNAPSHOT_EVERY = 16   # log entries after a snapshot before the next is written
CHUNK_ROWS = 20_000   # rows per chunk before a new chunk is started
ATTEMPTS = 5          # lost compare-and-swap races before giving up
KEEP_SNAPSHOTS = 2    # snapshots a cleanup keeps, with the log entries after the older


class CatalogUnreadable(TerminalError):
    """The catalog's files are damaged or of another format: rebuild it from the runs."""


def folder(root: str, group: str) -> str:
    return join(root, "_catalog", group)


def entry_url(root: str, group: str, seq: int) -> str:
    return join(folder(root, group), "log", f"{seq:020d}.json")


def snapshot_url(root: str, group: str, seq: int) -> str:
    return join(folder(root, group), "snapshots", f"{seq:020d}.json")


def latest_url(root: str, group: str) -> str:
    return join(folder(root, group), "_latest.json")


def chunk_url(root: str, group: str, topic: str, seq: int, n: str) -> str:
    return join(folder(root, group), "rows", topic, f"{seq:020d}-{n}.json.gz")


class StoredRow(NamedTuple):
    """A row as a chunk holds it: its JSON text, and what the chunk's index needs."""
    topic: str
    partition: int
    generation: int
    start: int
    end: int
    text: str

    @classmethod
    def of(cls, row: dict) -> StoredRow:
        return cls(row["topic"], row["partition"], row["_generation"], row["start"], row["end"],
                   json.dumps(row, separators=(",", ":")))


@dataclass
class Chunk:
    """An immutable file of rows of one topic, sorted by (partition, generation, start),
    with per partition and generation [lowest start, highest end, rows] to skip it."""
    url: str
    rows: int
    parts: dict[str, list[int]]

    def may_hold(self, partition: int | None, generation: int | None,
                 end_after: int | None, start_before: int | None) -> bool:
        for key, (low, high, _) in self.parts.items():
            p, g = map(int, key.split(":"))
            if ((partition is None or p == partition) and (generation is None or g == generation)
                    and (end_after is None or high > end_after)
                    and (start_before is None or low < start_before)):
                return True
        return False


@dataclass
class Catalog:
    """A group's catalog as read at one seq: the state with every entry applied, and
    what reading rows needs (the snapshot's chunks, the entries after it)."""
    storage: Storage
    root: str
    group: str
    state: State
    snapshot_seq: int = 0
    chunks: dict[str, list[Chunk]] = field(default_factory=dict)
    tail: list[dict] = field(default_factory=list)   # entries after the snapshot
    repair: Callable[[str], Catalog] | None = None    # damage -> a rebuilt catalog (or raises)
    read_chunks: dict[str, list[dict]] = field(default_factory=dict)  # url -> rows, read once
    appended: int | None = None  # the seq of the entry append() added to it

    # --- rows -------------------------------------------------------------------------

    def rows(self, topic: str | None = None, partition: int | None = None,
             generation: int | None = None, end_after: int | None = None,
             start_before: int | None = None) -> list[dict]:
        """Current rows, sorted by (topic, partition, generation, start), of one topic
        (None: all), optionally of one partition and generation, and only those ending
        after end_after or starting before start_before. A damaged chunk is read past
        from an older snapshot and the log when those hold its rows; else repaired (a
        writer's catalog is rebuilt, a reader's raises) and the rows read again."""
        try:
            return self._rows(topic, partition, generation, end_after, start_before)
        except CatalogUnreadable as exc:
            damage = str(exc)
        log.warning("catalog of group %s: %s; reading an older snapshot and the log",
                    self.group, damage)
        try:
            older = read(self.storage, self.root, self.group, below=self.snapshot_seq)
            if older is None:
                raise CatalogUnreadable(damage)
            rows = older._rows(topic, partition, generation, end_after, start_before)
        except CatalogUnreadable as exc:
            if self.repair is None:
                raise
            log.warning("catalog of group %s: %s", self.group, exc)
            older = self.repair(damage)
            self.repair = None
            rows = older._rows(topic, partition, generation, end_after, start_before)
        self.state, self.snapshot_seq, self.chunks, self.tail, self.read_chunks = (
            older.state, older.snapshot_seq, older.chunks, older.tail, older.read_chunks)
        return rows

    def _rows(self, topic, partition, generation, end_after, start_before) -> list[dict]:
        def wanted(row: dict) -> bool:
            return ((topic is None or row["topic"] == topic)
                    and (partition is None or row["partition"] == partition)
                    and (generation is None or row["_generation"] == generation)
                    and (end_after is None or row["end"] > end_after)
                    and (start_before is None or row["start"] < start_before))

        found: dict[tuple, dict] = {}
        for name in ([topic] if topic is not None else sorted(self.chunks)):
            for chunk in self.chunks.get(name, ()):
                if chunk.may_hold(partition, generation, end_after, start_before):
                    found.update((row_key(r), r) for r in self._chunk_rows(chunk) if wanted(r))
        for entry in self.tail:
            for row in entry.get("remove", ()):
                found.pop(row_key(row), None)
            found.update((row_key(r), r) for r in entry.get("add", ()) if wanted(r))
        return [found[key] for key in sorted(found)]

    def _chunk_rows(self, chunk: Chunk) -> list[dict]:
        """A chunk's rows; each chunk is read once per catalog read (a plan that rewinds
        every partition asks for each partition's rows)."""
        if chunk.url not in self.read_chunks:
            try:
                self.read_chunks[chunk.url] = json.loads(
                    gzip.decompress(self.storage.get_bytes(chunk.url)))["rows"]
            except (ValueError, KeyError, OSError) as exc:
                raise CatalogUnreadable(f"{chunk.url}: not a readable row chunk ({exc!r})") from None
        return self.read_chunks[chunk.url]

    # --- snapshots --------------------------------------------------------------------

    def write_snapshot(self, url: str | None = None, tag: str = "") -> None:
        """The state at self.state.seq, with the chunks of every topic the entries since
        the last snapshot touched rewritten: its last chunk (while not full) and every
        chunk a removed row was in. Other chunks are shared with the older snapshot."""
        seq = self.state.seq
        # per topic, the entries' changes in order (a row removed, then added again, stays);
        # one pass over the tail, whatever the number of topics
        changes: dict[str, list[tuple[bool, dict]]] = defaultdict(list)
        for entry in self.tail:
            for row in entry.get("remove", ()):
                changes[row["topic"]].append((False, row))
            for row in entry.get("add", ()):
                changes[row["topic"]].append((True, row))
        chunks = {t: list(c) for t, c in self.chunks.items()}
        for topic, changed in sorted(changes.items()):
            removed = [row for added, row in changed if not added]
            kept, redo = [], []
            for i, chunk in enumerate(chunks.get(topic, [])):
                last_open = i == len(chunks[topic]) - 1 and chunk.rows < CHUNK_ROWS
                hit = any(chunk.may_hold(r["partition"], r["_generation"], r["start"],
                                         r["start"] + 1) for r in removed)
                (redo if last_open or hit else kept).append(chunk)
            rows: dict[tuple, dict] = {}
            for chunk in redo:
                rows.update((row_key(r), r) for r in self._chunk_rows(chunk))
            for added, row in changed:
                if added:
                    rows[row_key(row)] = row
                else:
                    rows.pop(row_key(row), None)
            chunks[topic] = kept + self._write_chunks(
                seq, tag, (StoredRow.of(rows[key]) for key in sorted(rows)))[topic]
        self._write_state(chunks, url)

    def write_whole(self, rows: Iterable[StoredRow], url: str, tag: str) -> None:
        """A snapshot of every current row (catalog.rebuild's), the rows streamed in
        (topic, partition, generation, start) order: a chunk in memory at a time. The
        state is written after the rows, so it may be completed while they are read."""
        chunks = self._write_chunks(self.state.seq, tag, rows)
        self.tail = []
        self._write_state(chunks, url)

    def _write_state(self, chunks: dict[str, list[Chunk]], url: str | None) -> None:
        seq = self.state.seq
        snapshot = {"format": FORMAT, "group": self.group, "state": self.state.to_json(),
                    "chunks": {t: [c.__dict__ for c in cs] for t, cs in sorted(chunks.items())}}
        data = json.dumps(snapshot, separators=(",", ":")).encode()
        self.chunks, self.tail, self.snapshot_seq = chunks, [], seq
        if url is not None:  # a rebuild's: its entry names it (catalog.rebuild)
            self.storage.put_bytes(url, data)
            return
        self.storage.put_bytes(snapshot_url(self.root, self.group, seq), data)
        self.storage.put_bytes(latest_url(self.root, self.group), json.dumps({"seq": seq}).encode())

    def _write_chunks(self, seq: int, tag: str, rows: Iterable[StoredRow]
                      ) -> dict[str, list[Chunk]]:
        """Sorted rows in chunks of CHUNK_ROWS per topic; topic -> its new chunks."""
        written: dict[str, list[Chunk]] = defaultdict(list)
        batch: list[StoredRow] = []

        def flush() -> None:
            if batch:
                topic = batch[0].topic
                written[topic].append(self._write_chunk(topic, seq,
                                                         f"{len(written[topic])}{tag}", batch))
                batch.clear()

        for row in rows:
            if len(batch) >= CHUNK_ROWS or (batch and batch[0].topic != row.topic):
                flush()
            batch.append(row)
        flush()
        return written

    def _write_chunk(self, topic: str, seq: int, n: str, rows: list[StoredRow]) -> Chunk:
        parts: dict[str, list[int]] = {}
        for r in rows:
            key = part_key(r.partition, r.generation)
            low, high, count = parts.get(key, [r.start, r.end, 0])
            parts[key] = [min(low, r.start), max(high, r.end), count + 1]
        url = chunk_url(self.root, self.group, topic, seq, n)
        text = '{"rows":[' + ",".join(r.text for r in rows) + "]}"
        self.storage.put_bytes(url, gzip.compress(text.encode(), compresslevel=3))
        return Chunk(url, len(rows), parts)


# --- reading ----------------------------------------------------------------------------

def read(storage: Storage, root: str, group: str, below: int | None = None) -> Catalog | None:
    """The catalog as stored, or None when the group has none. CatalogUnreadable when
    its files are damaged past what the log can make up for. With `below`, from the
    newest snapshot before that seq (one found damaged) and the log after it."""
    catalog, seq = None, below
    if below is None:  # the newest snapshot, as the hint names it
        seq = _latest_hint(storage, root, group)
        try:
            catalog = _from_snapshot(storage, root, group, seq) if seq else None
        except CatalogUnreadable as exc:  # a hint naming a lost or damaged snapshot
            log.warning("catalog of %s: %s; reading an older snapshot and the log", group, exc)
    if catalog is None:
        catalog = _newest_readable_snapshot(storage, root, group, below=seq)
    seq = catalog.snapshot_seq
    entries = [(url, size) for url, size in storage.list(
        join(folder(root, group), "log"), start_after=entry_url(root, group, seq))
        if seq_of(url) > seq]
    if not seq and not entries:
        return None
    if entries and seq_of(entries[0][0]) != seq + 1:
        raise CatalogUnreadable(f"{entries[0][0]}: the log has no entry {seq + 1}, the first "
                                "after the snapshot read")
    for url, _ in entries:
        entry = _load_json(storage, url)
        if entry.get("kind") == "rebuild":  # a rebuild's snapshot replaces all before it
            catalog = _from_snapshot(storage, root, group, entry["seq"], entry["snapshot"])
            continue
        catalog.state.apply(entry)
        catalog.tail.append(entry)
    return catalog


def _latest_hint(storage: Storage, root: str, group: str) -> int | None:
    hint = storage.get_or_none(latest_url(root, group))
    try:
        return json.loads(hint)["seq"] if hint is not None else None
    except (ValueError, KeyError, TypeError):
        return None


def seq_of(url: str) -> int:
    return int(url.rsplit("/", 1)[-1].split(".")[0].split("-")[0])


def _newest_readable_snapshot(storage: Storage, root: str, group: str,
                              below: int | None = None) -> Catalog:
    """The newest snapshot that reads whole (below `below`, a damaged one's seq), or an
    empty catalog at seq 0 when none does: the log then makes up the rest."""
    listed = sorted((seq_of(url) for url, _ in storage.list(join(folder(root, group),
                                                                   "snapshots"))), reverse=True)
    for seq in listed:
        if below is not None and seq >= below:
            continue
        try:
            return _from_snapshot(storage, root, group, seq)
        except CatalogUnreadable as exc:
            log.warning("catalog of %s: %s; trying an older snapshot", group, exc)
    return Catalog(storage, root, group, State())


def _from_snapshot(storage: Storage, root: str, group: str, seq: int,
                   url: str | None = None) -> Catalog:
    url = url or snapshot_url(root, group, seq)
    data = _load_json(storage, url)
    if data.get("format") != FORMAT:
        raise CatalogUnreadable(f"{url}: catalog format {data.get('format')!r}, this "
                                f"version reads {FORMAT}")
    try:
        return Catalog(storage, root, group, State.from_json(data["state"]), seq,
                       {t: [Chunk(**c) for c in cs] for t, cs in data["chunks"].items()})
    except (KeyError, TypeError) as exc:
        raise CatalogUnreadable(f"{url}: not a catalog snapshot ({exc!r})") from None


def _load_json(storage: Storage, url: str) -> dict:
    data = storage.get_or_none(url)
    if data is None:
        raise CatalogUnreadable(f"{url}: missing")
    try:
        return json.loads(data)
    except ValueError as exc:
        raise CatalogUnreadable(f"{url}: not readable JSON ({exc})") from None


# --- writing ----------------------------------------------------------------------------

def append(opener: Callable[[], Catalog], make_entry: Callable[[Catalog], dict | None]
           ) -> Catalog:
    """Add one entry by compare-and-swap: read the catalog (opener), make the entry
    from it (None: nothing to add), check it (OverlapError) and create log entry seq+1;
    a writer that lost the race reads again. A snapshot follows every SNAPSHOT_EVERY
    entries; failing to write one loses nothing (the log has it all)."""
    for attempt in range(1, ATTEMPTS + 1):
        catalog = opener()
        entry = make_entry(catalog)
        if entry is None:
            return catalog
        entry = {**entry, "seq": catalog.state.seq + 1}
        catalog.state.apply(entry, check=True)
        try:
            catalog.storage.put_if(entry_url(catalog.root, catalog.group, entry["seq"]),
                                   json.dumps(entry, separators=(",", ":")).encode(), None)
        except VersionConflict:
            log.warning("catalog of %s: entry %d was written by another writer; again (%d)",
                        catalog.group, entry["seq"], attempt)
            continue
        catalog.tail.append(entry)
        catalog.appended = entry["seq"]
        if entry["seq"] - catalog.snapshot_seq >= SNAPSHOT_EVERY:
            try:
                catalog.write_snapshot()
            except CatalogUnreadable as exc:
                # a damaged chunk: no snapshot can be made past it, and the log's tail
                # would grow with every entry; the rebuild writes a whole new one
                log.warning("catalog of %s: snapshot at %d not written (%s); rebuilding",
                            catalog.group, entry["seq"], exc)
                if catalog.repair is not None:
                    repaired = catalog.repair(str(exc))
                    # from the run folders, where some writers record their entry only
                    # after this append (a compaction's done-record): made again against
                    # the rebuilt state, an entry it lacks is added again
                    if make_entry(repaired) is not None:
                        continue
                    repaired.appended = entry["seq"]
                    return repaired
            except Exception as exc:  # the entry is durable: a later writer snapshots
                log.warning("catalog of %s: snapshot at %d not written (%r); the log holds "
                            "every entry", catalog.group, entry["seq"], exc)
            else:
                try:  # the snapshot stands: a cleanup that fails leaves garbage, no damage
                    clean(catalog.storage, catalog.root, catalog.group)
                except Exception as exc:  # (an older snapshot damaged: a later one drops it)
                    log.warning("catalog of %s: cleanup after snapshot %d left for later "
                                "(%s)", catalog.group, entry["seq"], exc)
        return catalog
    raise TerminalError(f"catalog of group {catalog.group}: lost the race for a new entry "
                        f"{ATTEMPTS} times; run again")


def clean(storage: Storage, root: str, group: str) -> int:
    """Delta's log cleanup: keep the newest KEEP_SNAPSHOTS snapshots and the log entries
    after the oldest of them (a reader that opened the older one still finds its entries;
    one that finds the newer gone falls back to the older), delete the entries, snapshots
    and rebuild snapshots before it and every row chunk no kept snapshot names that an
    older snapshot wrote (a snapshot being written now writes chunks of a later seq).
    So the catalog stays about two snapshots and their chunks, whatever the history.
    Returns the objects deleted; a failure leaves garbage for the next cleanup, no damage."""
    base = folder(root, group)
    snapshots = sorted(seq_of(url) for url, _ in storage.list(join(base, "snapshots")))
    if len(snapshots) < KEEP_SNAPSHOTS:
        return 0
    floor, keep = snapshots[-KEEP_SNAPSHOTS], snapshots[-KEEP_SNAPSHOTS:]
    named = set()
    for seq in keep:
        named |= {c["url"] for chunks in _load_json(storage, snapshot_url(root, group, seq))
                  ["chunks"].values() for c in chunks}
    doomed = [url for url, _ in storage.list(join(base, "log")) if seq_of(url) <= floor]
    doomed += [snapshot_url(root, group, seq) for seq in snapshots if seq < floor]
    doomed += [url for url, _ in storage.list(join(base, "rebuilds")) if seq_of(url) < floor]
    doomed += [url for url, _ in storage.list(join(base, "rows"))
               if url not in named and seq_of(url) < floor]
    for url in doomed:
        storage.delete(url)
    if doomed:
        log.info("catalog of %s: cleaned %d objects before entry %d", group, len(doomed), floor)
    return len(doomed)


def entries_after(storage: Storage, root: str, group: str, seq: int) -> Iterable[dict]:
    """Every log entry after seq, in order (the audit folds in what is new)."""
    for url, _ in storage.list(join(folder(root, group), "log"),
                               start_after=entry_url(root, group, seq)):
        yield _load_json(storage, url)


__all__ = ["Catalog", "CatalogUnreadable", "OverlapError", "append", "read", "entries_after"]
