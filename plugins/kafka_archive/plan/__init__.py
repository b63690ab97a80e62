"""Plan: decide, before any data moves, what one run archives.

- `planning`: from the group's config, Kafka's offsets and the token files, per Kafka
  partition a slice [start, end) under the topic's policy, and the anomalies (data lost
  to retention, a token ahead of Kafka). `decide` is pure.
- `runs`: start a run: resume the plan still in flight, or make, store and mark a new one.
- `inflight`: the in-flight mark (the one plan made and not committed).
- `rewinds`: move tokens back on request, and the files a rewind moves aside (the
  catalog's rows at or beyond a slice's start, in any layout).
- `losses`: ranges lost to retention, accepted (by a person or by the group's policy)
  and recorded, so planning can move past them.

Hands to archive: the plan's URL.
"""
