"""Archive: the Spark jobs' bodies, run by spark_jobs/ under spark-submit.

- `job`: the archive job. The plan's slices become Spark tasks; the driver writes
  `manifest.json` (one row per slice, listing its files) for commit.
- `source`: a task's read, exactly [start, end) of one partition with librdkafka, as
  Arrow columns (formats.batch).
- `slice_writer`: one slice's messages to their files at deterministic paths (by offset,
  or by event time through formats.parsers), with quarantine, late data and the audit's
  per-window counts; also used by tools.backfill.
- `progress`: the job's log lines, one per slice and a summary.
- `replay_job`: the replay job (spark_jobs/replay.py). One task per source partition
  reads its archived files and produces them to the target through librdkafka's
  idempotent producer, exactly once across crashes (a progress file per partition).
- `archived_files`: reading an archived file back by URL (`read_archived`), a damaged
  file (`DamagedFile`) told apart from a failure to reach it; used by the replay job,
  `cat` and `verify`.

Hands to commit: `manifest.json` beside the plan.
"""
