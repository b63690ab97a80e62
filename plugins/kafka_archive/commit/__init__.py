"""Commit: make a run's output the archive's truth. `protocol` checks the manifest
against the plan (every slice, every file with its recorded size), then advances each
token by compare-and-swap and marks the run committed; `finalizing` writes `_SUCCESS` into
time partitions that can receive no more data; `current` answers which manifest rows
of a group are current after rewinds and backfills.
Hands to monitor, audit and tools: committed runs and advanced tokens.
"""
