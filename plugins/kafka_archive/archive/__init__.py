"""Archive: the Spark jobs' bodies, run by spark_jobs/ under spark-submit.

- `job`: the archive job. The plan's slices become Spark tasks; the driver writes
  `manifest.json` (one row per slice, listing its files) for commit.
- `source`: a task's read, exactly [start, end) of one partition with librdkafka, as
  Arrow columns (formats.batch).
- `slice_writer`: one slice's messages to their files at deterministic paths (by offset,
  or by event time through formats.parsers), with quarantine, late data and the audit's
  per-window counts; also used by tools.backfill.
- `progress`: the job's log lines, one per slice and a summary.

Hands to commit: `manifest.json` beside the plan.
"""
