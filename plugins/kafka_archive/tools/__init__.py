"""Tools: operators' commands over a group's archive, outside the scheduled run.

- `verify`: every file readable, each offset in exactly one file, no hole below the token.
- `listing`: `kafka-archive ls`, the current files with their offsets, from the catalog.
- `cat`: the records of one archived file, as text, JSON or raw.
- `backfill`: rebuild an event-time group's slices from the backup group.
- `replay`: which archived files put a range back into Kafka (the plan of a replay);
  its Spark side is `archive.replay_job`.
"""
