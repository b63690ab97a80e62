"""Audit: the Kafka paper's reconciliation of producers' counts with the archive.
`producer` (AuditedProducer) stamps a source header and publishes per-window counts to
the monitoring topic; `gather` copies those events into the archive and collects the
archived counts and how far each topic is archived; `reconcile` gives each window its
verdict (OK, MISSING, EXCESS, PENDING, UNAUDITED); `reporting` writes JSON, CSV and HTML.
"""
