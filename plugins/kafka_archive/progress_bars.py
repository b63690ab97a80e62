"""Progress bars for the operators' long commands (verify, backfill, an audit rescan):
drawn on stderr only when a person watches a terminal, never in pipes or task logs."""

from __future__ import annotations

import sys
from typing import Callable, Iterable, Sequence, TypeVar

T = TypeVar("T")
Track = Callable[[Sequence[T], str], Iterable[T]]


def untracked(items: Sequence[T], what: str) -> Iterable[T]:
    return items


def terminal_bar(items: Sequence[T], what: str) -> Iterable[T]:
    if not sys.stderr.isatty():
        return items
    from rich.console import Console  # only here: the library imports no UI otherwise
    from rich.progress import track
    return track(items, description=what, console=Console(stderr=True), transient=True)
