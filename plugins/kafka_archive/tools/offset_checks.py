"""The offset arithmetic of `kafka-archive verify`, pure: from what each file (or each
covered range) holds, per Kafka partition and generation, no offset in two files and no
offset missing between files or between the last one and the token. Offsets Kafka itself
lacks (compaction, transaction markers) are gaps and ranges lost to retention and
accepted are known loss: reported, not errors. Offsets below the first file are not
archived on purpose (retention, start_from) and only noted. tools.verify does the
reading."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Iterable

ERROR, LOST, GAP, INFO = "ERROR", "lost", "gap", "info"  # only ERROR fails the check


Range = tuple[int, int]  # [start, end) offsets
# (start, end) -> the first offset of [start, end) from which Kafka may hold a message:
# below it Kafka holds none (a transaction's markers, an aborted transaction), so a hole
# there is a gap (tools.verify asks Kafka; None: not asked)
FirstMessage = Callable[[int, int], int]


@dataclass(frozen=True)
class Finding:
    level: str
    message: str


@dataclass(frozen=True)
class FileSummary:
    url: str
    name_offset: int                 # the first offset its name promises
    first_offset: int | None = None  # of the records read; None when unusable
    last_offset: int | None = None
    records: int = 0
    problem: str | None = None       # why the file is unusable (unreadable, unordered, empty)


def summarize(url: str, name_offset: int, offsets: Iterable[int]) -> FileSummary:
    """A file's summary from the offsets of its records, in file order."""
    first = last = None
    count = 0
    for offset in offsets:
        if last is not None and offset <= last:
            return FileSummary(url, name_offset, problem=f"offset {offset} follows offset "
                                                         f"{last}: offsets must increase")
        first = offset if first is None else first
        last, count = offset, count + 1
    if first is None:
        return FileSummary(url, name_offset, problem="holds no record")
    return FileSummary(url, name_offset, first, last, count)


def check_partition(files: list[FileSummary], token_offset: int | None,
                    known_gaps: Iterable[Range], retention_skipped: Iterable[Range] = (),
                    elsewhere: Iterable[Range] = (), first_message: FirstMessage | None = None
                    ) -> list[Finding]:
    """Findings for the files of one Kafka partition in one generation.

    token_offset: the next offset to archive, None when not checked against a token.
    known_gaps: offsets Kafka lacks, from the manifests. retention_skipped: offsets a plan
    skipped because retention had deleted them. elsewhere: offsets the partition's other
    generations hold (a generation rewound below where it began fills in up to them).
    first_message: Kafka's word on offsets no file holds and nothing above explains.
    """
    findings = [Finding(ERROR, f"{f.url}: {f.problem}") for f in files if f.problem]
    usable = sorted((f for f in files if not f.problem), key=lambda f: (f.first_offset, f.url))
    # a file is named by its slice's start: a slice starting at offsets Kafka lacks (a
    # transaction's marker) has its first record after them
    findings += [Finding(ERROR, f"{f.url}: first record has offset {f.first_offset}, but the "
                                f"file name says {f.name_offset}")
                 for f in usable if f.first_offset < f.name_offset
                 or _split(f.name_offset, f.first_offset, known_gaps)[1]]
    if not usable:
        if token_offset:
            findings.append(Finding(INFO, f"no readable file; offsets below the token "
                                          f"{token_offset} are not archived here"))
        return findings
    if usable[0].first_offset > 0:
        findings.append(Finding(INFO, f"offsets below {usable[0].first_offset} are not archived "
                                      "here (retention, start_from or an earlier generation)"))
    reach = usable[0]  # the file reaching the highest offset so far
    for f in usable[1:]:
        if f.first_offset <= reach.last_offset:
            findings.append(Finding(ERROR, f"duplicate offsets [{f.first_offset}, "
                                           f"{min(f.last_offset, reach.last_offset)}] are in both "
                                           f"{reach.url} and {f.url}"))
        else:
            findings += _missing(reach.last_offset + 1, f.first_offset,
                                 f"between {reach.url} and {f.url}", known_gaps, retention_skipped,
                                 elsewhere, token_offset, first_message)
        if f.last_offset > reach.last_offset:
            reach = f
    end = reach.last_offset + 1
    if token_offset is not None and token_offset > end:
        findings += _missing(end, token_offset,
                             f"after {reach.url}, below the token {token_offset}",
                             known_gaps, retention_skipped, elsewhere, None, first_message)
    elif token_offset is not None and token_offset < end:
        findings.append(Finding(INFO, f"offsets [{token_offset}, {end}) are archived beyond the "
                                      "token: a run wrote them but has not committed yet"))
    return findings


def check_scattered(files: list[tuple[FileSummary, list[int]]], token_offset: int | None,
                    known_gaps: Iterable[Range], retention_skipped: Iterable[Range] = (),
                    elsewhere: Iterable[Range] = (), first_message: FirstMessage | None = None
                    ) -> list[Finding]:
    """The event-time layout's check of one Kafka partition: its offsets are spread over
    many files (per slice and time partition, quarantine, late), none consecutive. Every
    offset must be in one file only; the runs of consecutive offsets are then checked
    like the files of the partition layout. files: (summary, offsets read)."""
    findings = [Finding(ERROR, f"{f.url}: {f.problem}") for f, _ in files if f.problem]
    usable = [(f, offsets) for f, offsets in files if not f.problem]
    findings += [Finding(ERROR, f"{f.url}: first record has offset {f.first_offset}, but the "
                                f"file name says {f.name_offset}")
                 for f, _ in usable if f.first_offset != f.name_offset]
    owner: dict[int, str] = {}
    twice: dict[tuple[str, str], list[int]] = defaultdict(list)
    for f, offsets in usable:
        for offset in offsets:
            if offset in owner:
                twice[(owner[offset], f.url)].append(offset)
            else:
                owner[offset] = f.url
    findings += [Finding(ERROR, f"duplicate offsets {_few(found)} are in both {a} and {b}")
                 for (a, b), found in sorted(twice.items())]
    runs: list[FileSummary] = []
    for offset in sorted(owner):
        if runs and runs[-1].last_offset + 1 == offset:
            last = runs[-1]
            runs[-1] = FileSummary(f"offsets [{last.first_offset}, {offset}]", last.first_offset,
                                   last.first_offset, offset, last.records + 1)
        else:
            runs.append(FileSummary(f"offsets [{offset}, {offset}]", offset, offset, offset, 1))
    return findings + check_partition(runs, token_offset, known_gaps, retention_skipped,
                                      elsewhere, first_message)


def _few(offsets: list[int]) -> str:
    shown = ", ".join(map(str, offsets[:5]))
    return shown + (f" (+{len(offsets) - 5} more)" if len(offsets) > 5 else "")


def _missing(start: int, end: int, where: str, known_gaps: Iterable[Range],
             retention_skipped: Iterable[Range], elsewhere: Iterable[Range] = (),
             token_offset: int | None = None, first_message: FirstMessage | None = None
             ) -> list[Finding]:
    """Findings for offsets [start, end) that no file holds: each part is a Kafka gap,
    held by another generation, at or past the token (a rewind in progress, capped by
    max_records, archives them next: files beyond the token are what it has not reached
    yet, and below them may lie offsets never archived, as under start_from: latest), a
    recorded retention loss, offsets Kafka holds no message at (first_message: a token
    put past a transaction's marker no slice covered) or a hole."""
    gaps, rest = _split(start, end, known_gaps)
    held, rest = _split_all(rest, elsewhere)
    pending, rest = _split_all(rest, [] if token_offset is None else [(token_offset, end)])
    lost, rest = _split_all(rest, retention_skipped)
    empty, holes = _split_all(rest, [(a, first_message(a, b)) for a, b in rest]
                              if first_message else [])
    return ([Finding(GAP, f"offsets {_show(r)} {where}: gap (Kafka has no such offsets)")
             for r in gaps]
            + [Finding(GAP, f"offsets {_show(r)} {where}: gap (Kafka holds no message there: "
                            "a transaction's marker or an aborted transaction)") for r in empty]
            + [Finding(INFO, f"offsets {_show(r)} {where}: held by another generation's files")
               for r in held]
            + [Finding(INFO, f"offsets {_show(r)} {where}: not archived yet (at or past the "
                             f"token {token_offset}: the next runs archive them)")
               for r in pending]
            + [Finding(LOST, f"known loss: offsets {_show(r)} {where}: deleted by retention "
                             "before they were archived, loss accepted") for r in lost]
            + [Finding(ERROR, f"hole: offsets {_show(r)} {where} are in no file") for r in holes])


def _split_all(parts: list[Range], ranges: Iterable[Range]) -> tuple[list[Range], list[Range]]:
    """_split of each part."""
    ranges = list(ranges)
    covered, uncovered = [], []
    for a, b in parts:
        c, u = _split(a, b, ranges)
        covered, uncovered = covered + c, uncovered + u
    return covered, uncovered


def _split(start: int, end: int, ranges: Iterable[Range]) -> tuple[list[Range], list[Range]]:
    """[start, end) cut into the parts covered by ranges and the parts not covered."""
    covered: list[Range] = []
    pos = start
    for a, b in sorted(ranges):
        a, b = max(a, pos), min(b, end)
        if a >= b:
            continue
        if covered and covered[-1][1] == a:  # ranges that touch read as one
            covered[-1] = (covered[-1][0], b)
        else:
            covered.append((a, b))
        pos = b
    uncovered, pos = [], start
    for a, b in covered:
        if a > pos:
            uncovered.append((pos, a))
        pos = b
    if pos < end:
        uncovered.append((pos, end))
    return covered, uncovered


def _show(r: Range) -> str:
    return f"[{r[0]}, {r[1]})"
