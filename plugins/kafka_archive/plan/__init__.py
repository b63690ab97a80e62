"""Plan: decide, before any data moves, what one run archives.

From the group's config, Kafka's earliest and latest offsets and the token files, the
planner cuts per Kafka partition a slice [start, end) under the topic's policy, records
anomalies (data lost to retention, a token ahead of Kafka), moves aside the files a
rewind replaces (the catalog's rows at or beyond a slice's start, in any layout), and
writes `plan.json` marked in flight (`runs`; the mark is read through `inflight`).
`rewinds` moves tokens back on request; `params` validates what a manual trigger may ask
for.
Hands to archive: the plan's URL.
"""
