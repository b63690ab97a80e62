"""Commit: make a run's output the archive's truth.

- `protocol`: check the manifest against the plan (every slice, every file with its
  recorded size), advance each token by compare-and-swap, add the run's rows to the
  group's catalog, mark the run committed.
- `finalizing`: `_SUCCESS` into time partitions that can receive no more data, from how
  far each topic is archived in time (`archived_through`, which the audit uses too).
- `mirror`: the tokens copied into a Kafka consumer group, for Kafka's lag tools.

Hands to audit, monitor and tools: committed runs, advanced tokens, the catalog.
"""
