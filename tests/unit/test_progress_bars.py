"""Progress bars only when a person watches a terminal: pipes and task logs get the items
untouched."""

from __future__ import annotations

import io
import sys

from kafka_archive import progress_bars


def test_no_bar_when_stderr_is_not_a_terminal(monkeypatch):
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    items = [1, 2, 3]
    assert progress_bars.terminal_bar(items, "verify") is items
    assert progress_bars.untracked(items, "verify") is items


def test_on_a_terminal_every_item_still_comes_through(monkeypatch):
    class Tty(io.StringIO):
        def isatty(self):
            return True
    monkeypatch.setattr(sys, "stderr", Tty())
    items = list(range(5))
    tracked = progress_bars.terminal_bar(items, "verify")
    assert tracked is not items and list(tracked) == items
