"""AuditedProducer: kafka-python's KafkaProducer with the Kafka paper's audit counts.

Same send API. Every message gets a source header (`kafka-archive-source` by default,
before the caller's headers) and an explicit timestamp; once the broker acknowledges it,
it counts towards its (topic, window) by the timestamp the broker stored (its own, on a
LogAppendTime topic), the one the archive counts by. Counts of closed windows are published to the monitoring topic as
MonitoringEvents on the next send and by a background thread once per window (so an idle
producer still reports), and every count (closed or not) on flush() and close(). Events are deltas with a per-producer sequence number, so a window whose late
acknowledgements arrive after it was reported gets a second event, and a retried event
is recognised by (producer_id, seq) and counted once.

Before its first message of a (topic, window) by the send time, a producer publishes an
opening event for that window (count 0) and waits for it to be acknowledged: a producer
killed before it published the window's count has left that opening behind, so the audit
knows the window's count is incomplete (UNAUDITED where more was archived, not EXCESS).
One such wait per topic and window; an opening that cannot be delivered fails the send
before the message is sent.

The monitoring topic must exist: the constructor checks it (within CHECK_TIMEOUT_S) and
fails naming it, before any message is sent or counted, or creates it with
`create_monitoring_topic=True` (the broker's default partitions and replication).
"""

from __future__ import annotations

import socket
import threading
import time
import uuid

from kafka import KafkaProducer
from kafka.admin import NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError

from kafka_archive import brokers
from kafka_archive.audit.reconcile import MonitoringEvent
from kafka_archive.config import Audit
from kafka_archive.errors import TerminalError
from kafka_archive.formats.audit_counts import window_start

DEFAULTS = Audit()
CHECK_TIMEOUT_S = 5
OPEN_TIMEOUT_S = 30  # a window's opening event stored, or the send fails


class MonitoringTopicMissing(TerminalError):
    pass


class AuditedProducer:
    def __init__(self, *, source: str | None = None, monitoring_topic: str = DEFAULTS.topic,
                 window_s: int = DEFAULTS.window_s, source_header: str = DEFAULTS.source_header,
                 create_monitoring_topic: bool = False, **producer_configs):
        check_monitoring_topic(monitoring_topic, create_monitoring_topic, producer_configs)
        self.source = source or socket.gethostname()
        self.monitoring_topic = monitoring_topic
        self.window_ms = window_s * 1000
        self.producer_id = f"{self.source}/{uuid.uuid4()}"
        self._header = (source_header, self.source.encode())
        self._producer = KafkaProducer(**producer_configs)
        self._lock = threading.Lock()
        self._acked: dict[tuple[str, int], int] = {}  # (topic, window start) -> acknowledged
        self._seq = 0
        self._opened: set[tuple[str, int]] = set()  # (topic, window start) announced
        self._closing = threading.Event()
        self._reporter = threading.Thread(target=self._report_closed_windows, daemon=True,
                                          name=f"audit-reporter-{self.source}")
        self._reporter.start()

    def send(self, topic: str, value=None, key=None, headers=None, partition=None,
             timestamp_ms=None):
        timestamp_ms = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        window = (topic, window_start(timestamp_ms, self.window_ms))
        if window not in self._opened:
            self._open(window)
        # its own source header first: the archive counts by the first one, and a relay's
        # caller may pass on the original message's (kept, after it)
        future = self._producer.send(topic, value=value, key=key, partition=partition,
                                     timestamp_ms=timestamp_ms,
                                     headers=[self._header, *(headers or ())])
        # counted in the window of the timestamp the broker stored, as the archive will
        # count it: the broker's own on a topic with message.timestamp.type=LogAppendTime
        future.add_callback(lambda metadata: self._count(
            (topic, window_start(metadata.timestamp, self.window_ms))))
        self._publish(closed_before=window_start(int(time.time() * 1000), self.window_ms))
        return future

    def flush(self, timeout=None) -> None:
        """Deliver pending messages, then publish every count so far and deliver that too."""
        self._producer.flush(timeout)
        futures = self._publish(closed_before=None)
        self._producer.flush(timeout)
        for f in futures:
            f.get(timeout=timeout)  # a monitoring event that failed must not pass silently

    def close(self, timeout=None) -> None:
        self._closing.set()
        self._reporter.join()
        self.flush(timeout)
        self._producer.close(timeout)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _report_closed_windows(self) -> None:
        while not self._closing.wait(self.window_ms / 1000):
            self._publish(closed_before=window_start(int(time.time() * 1000), self.window_ms))

    def _open(self, window: tuple[str, int]) -> None:
        """Publish the window's opening event (count 0) and wait until it is stored."""
        with self._lock:
            self._seq += 1
            event = MonitoringEvent(self.source, window[0], window[1], self.window_ms, 0,
                                    self.producer_id, self._seq)
        self._producer.send(self.monitoring_topic, key=self.source.encode(),
                            value=event.to_json()).get(timeout=OPEN_TIMEOUT_S)
        # windows well behind this one need no memory: a send there opens it again (a
        # second opening event is harmless)
        self._opened = {w for w in self._opened if w[1] >= window[1] - 2 * self.window_ms}
        self._opened.add(window)

    def _count(self, window: tuple[str, int]) -> None:
        with self._lock:  # callbacks run on the producer's I/O thread
            self._acked[window] = self._acked.get(window, 0) + 1

    def _publish(self, closed_before: int | None) -> list:
        with self._lock:
            due = {w: n for w, n in self._acked.items()
                   if closed_before is None or w[1] + self.window_ms <= closed_before}
            for w in due:
                del self._acked[w]
            events = []
            for (topic, start), count in sorted(due.items()):
                self._seq += 1
                events.append(MonitoringEvent(self.source, topic, start, self.window_ms, count,
                                              self.producer_id, self._seq))
        futures = []
        for event in events:
            future = self._producer.send(self.monitoring_topic, key=self.source.encode(),
                                         value=event.to_json())
            # a lost event must not lose its count: put it back for the next publish
            future.add_errback(lambda _exc, e=event: self._restore(e))
            futures.append(future)
        return futures

    def _restore(self, event: MonitoringEvent) -> None:
        with self._lock:
            window = (event.topic, event.window_start_ms)
            self._acked[window] = self._acked.get(window, 0) + event.count


def check_monitoring_topic(topic: str, create: bool, client_configs: dict,
                           timeout_s: float = CHECK_TIMEOUT_S) -> None:
    """Fail (MonitoringTopicMissing, naming it) unless `topic` exists, or create it.
    `client_configs`: a Kafka client's (the connection and security settings are used)."""
    where = client_configs.get("bootstrap_servers", "localhost:9092")
    timeout_ms = int(timeout_s * 1000)
    try:
        admin = brokers.admin_client(client_configs, timeout_ms)
    except KafkaError as exc:
        raise MonitoringTopicMissing(f"cannot check the monitoring topic {topic!r}: Kafka at "
                                     f"{where} is unreachable ({exc!r})") from exc
    try:
        if topic in admin.list_topics():
            return
        if not create:
            raise MonitoringTopicMissing(
                f"the monitoring topic {topic!r} does not exist on {where}: create it (see the "
                "README, 'Audit') or pass create_monitoring_topic=True; nothing was sent")
        try:
            admin.create_topics([NewTopic(topic, -1, -1)], timeout_ms=timeout_ms)
        except TopicAlreadyExistsError:
            pass  # another producer created it meanwhile
    except KafkaError as exc:
        raise MonitoringTopicMissing(f"cannot check the monitoring topic {topic!r} on {where}: "
                                     f"{exc!r}") from exc
    finally:
        admin.close()
