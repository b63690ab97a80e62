"""kafka-archive: archive Kafka topics to S3 in scheduled micro-batches.

One run's data flow, package by package:

    plan/     what to archive: per Kafka partition the slice [start, end), from the tokens,
              Kafka's offsets and the policy; rewinds and accepted losses  -> plan.json
    archive/  the Spark job: each task reads its slices' exact offset ranges with
              librdkafka and writes their files; the replay job    -> files + manifest.json
    commit/   the manifest checked against the plan, tokens advanced by compare-and-swap,
              the run added to the group's catalog; time partitions finalized
    audit/    producers' counts against what was archived
    monitor/  what operators watch: status, freshness, the group page, alert mails
    tools/    operators' commands over the archive: verify, ls, cat, backfill, replay
    airflow/  the only package that imports Airflow: DAGs, tasks, operator, UI plugin
    cli.py    the `kafka-archive` command

They stand on `formats/` (bytes in, bytes out: SequenceFile, text, Baldr, the record key,
event-time parsers, the audit's per-window counting) and on the base modules: errors and
retries (the one classification of failures), config and config_schema, storage (S3 or
local files), tokens (the offset token files), layout (every path under the archive root,
and back), manifest (what a run wrote, one typed row per slice), catalog (what is
where), brokers (every Kafka client), spark (how a job is launched) and spark_connect
(the jobs as Spark Connect clients).

Imports only look down, in this order (tests/unit/test_imports.py checks every import,
inside functions too): errors, retries < formats < base < plan < archive < commit < audit
< monitor < tools < airflow, cli.

Where to add:
- a file format: a `Format` in formats/__init__.py's registry (writer, reader,
  extensions); config validates `format.kind` against it;
- an event-time parser: a `Parser` subclass, named in the config by dotted path, or a
  built-in in formats/parsers.py;
- a layout (how files are laid out under a topic): layout.py (`LayoutSpec`, the paths and
  their parsing back), the `layout.kind` config_schema accepts, and how
  archive/slice_writer.py cuts a slice's files by it;
- a storage backend: storage.py (`Storage`: get, put, conditional put, list, delete).

Airflow puts plugins/ on sys.path; tests and the CLI import the package through the
editable install.
"""
