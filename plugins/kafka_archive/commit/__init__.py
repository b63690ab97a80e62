"""Commit: make a run's output the archive's truth. `protocol` checks the manifest
against the plan (every slice, every file with its recorded size), then advances each
token by compare-and-swap, adds the run's rows to the group's catalog and marks the run
committed; `finalizing` writes `_SUCCESS` into time partitions that can receive no more
data (the open ones, from the catalog); `losses` records ranges lost to retention and
accepted; `mirror` copies the tokens into a Kafka consumer group for lag tools.
Hands to monitor, audit and tools: committed runs and advanced tokens.
"""
