"""Tools: operators' commands over a group's archive, outside the scheduled run.

- `verify`: no hole below the token, from the catalog's summaries; with --files, every
  file readable and each offset in exactly one file.
- `offset_checks`: verify's offset arithmetic (pure).
- `listing`: `kafka-archive ls`, the current files with their offsets, from the catalog.
- `cat`: the records of one archived file, as text, JSON or raw.
- `backfill`: rebuild an event-time group's slices from the backup group.
- `replay`: which archived files put a range back into Kafka (the plan of a replay);
  its Spark side is `archive.replay_job`.
"""
