"""kafka-archive: archive Kafka topics to S3 in scheduled micro-batches.

The packages follow one run's data flow:

    plan/     what to archive: per Kafka partition the slice [start, end), from tokens,
              Kafka's offsets and the policy                        -> plan.json
    archive/  the Spark job: read exactly the planned slices, write the files
              (layout, parsers, slice writer)                       -> files + manifest.json
    formats/  how records become bytes: SequenceFile, text, Baldr, the record key
    commit/   check the manifest against the plan, advance the tokens by compare-and-swap,
              add the run to the group's catalog; finalize time partitions
    monitor/  after commit: freshness, status and lag, alert messages, preflight
    audit/    producers' counts against what was archived: producer, events, verdicts, reports
    tools/    operators' commands over the archive: verify, backfill, cat
    airflow/  the only package that imports Airflow: DAGs, task bodies, operators,
              connections, alert sending

under a shared base: config, errors, storage (S3 or local files), tokens (the offset
token files), layout (every path under the archive root, and back), catalog (what is
where: every current file of a group, read by everything after the commit), brokers
(Kafka clients) and spark (how a job is launched). Airflow puts plugins/ on sys.path; tests and the CLI
import the package through the editable install.
"""
