"""The benchmarks. Each prints its figures with `uptime` beside them; none is a test.

    .venv/bin/python -m tests.support.bench.archive   # one archive run against Kafka's consumer and the peer query
    .venv/bin/python -m tests.support.bench.catalog   # what a group's history costs each operator call
    .venv/bin/python -m tests.support.bench.audit     # reconciling a large audit

- kafka_data: the JSON log lines, Kafka's ProducerPerformance and ConsumerPerformance;
- processes: psutil figures of a process tree (peak RSS and CPU by kind), the services' CPU,
  the load, py-spy profile summaries;
- peer: the Structured Streaming query a user would write instead (spark-submitted by path).
"""
