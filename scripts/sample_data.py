"""Produce a little sample data for the demo: JSON log lines on two topics, some keyed,
some with headers, one tombstone.

    .venv/bin/python scripts/sample_data.py BOOTSTRAP [COUNT]
"""

import json
import sys
import time

from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic

TOPICS = {"demo.orders": 4, "demo.clicks": 2}


def main(bootstrap: str, count: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    missing = [NewTopic(t, n, 1) for t, n in TOPICS.items() if t not in admin.list_topics()]
    if missing:
        admin.create_topics(missing)
    admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=10)
    for i in range(count):
        now = time.time()
        producer.send("demo.orders", key=f"customer-{i % 17}".encode(),
                      value=json.dumps({"ts": now, "order": i, "amount_cents": 100 + i}).encode(),
                      headers=[("source", b"demo")])
        producer.send("demo.clicks", value=json.dumps({"ts": now, "page": f"/p/{i % 5}"}).encode())
    producer.send("demo.orders", key=b"customer-0", value=None)  # a tombstone
    producer.flush()
    producer.close()
    print(f"produced {2 * count + 1} messages to {', '.join(TOPICS)}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 500)
