"""Archive: the Spark job's body. Reads exactly the planned slices with Spark's Kafka
source (`job`), writes each slice's records to files at their deterministic paths
(`slice_writer`, `layout`), parsing event times where the group's layout needs them
(`parsers`), and counts what it wrote per audit window.
Hands to commit: `manifest.json` beside the plan, one row per slice.
"""
