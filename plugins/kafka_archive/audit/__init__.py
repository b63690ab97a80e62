"""Audit: the Kafka paper's reconciliation of producers' counts with the archive.

- `producer`: AuditedProducer stamps a source header and publishes per-window counts to
  the monitoring topic.
- `gather`: copies those events into the archive (`ingest`) and reads the archived
  counts (the catalog's rows; a rescan of the files when those are in doubt).
- `reconcile`: each window's verdict (OK, MISSING, EXCESS, PENDING, UNAUDITED). Pure.
- `incremental`: an audit that reads only what is new since its checkpoint, and the
  alarms it keeps; `checkpoint` is that memory.
- `reporting`: the report as JSON, CSV and HTML. Pure.
"""
