"""Where a task's bytes come from: exactly [start, end) of one Kafka partition, read with
librdkafka (brokers.range_consumer) and handed on as formats.batch.Batch columns.

The Python work per message is a few attribute reads into lists; the columns are built
from the lists' buffers (formats.batch.binary_array), so the encoders see whole batches.
Offsets the reader never sees (compacted away, transaction markers, an aborted
transaction under read_committed) are gaps the slice writer records; a range that ends in such offsets ends
at the partition's end-of-partition event or at the first message past it, never at a
timeout. A head that retention deleted since the plan starts the read at the earliest
offset left (the job then records the loss, job.retention_losses).
"""

from __future__ import annotations

import time
from typing import Iterator

from kafka_archive import retries
from kafka_archive.errors import TransientError

BATCH_MESSAGES = 20_000  # per consume() call: large enough that per-call costs vanish
STALL_S = 120.0          # no message and no end of partition for this long: fail, retryable


class Stalled(TransientError):
    """A range read made no progress: the broker is unreachable or the partition offline."""


def read(consumer, topic: str, partition: int, start: int, end: int,
         stall_s: float = STALL_S) -> Iterator:
    """The messages of [start, end) in offset order, as Batches of up to BATCH_MESSAGES."""
    import numpy as np
    from confluent_kafka import KafkaError, TopicPartition

    from kafka_archive.formats.batch import Batch, binary_array, headers_array

    # errors that no retry mends: fail the task at once
    refused = {KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED,
               KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError._SSL}
    consumer.assign([TopicPartition(topic, partition, start)])
    position, last_progress, last_error = start, time.monotonic(), None
    try:
        while position < end:
            # consume() waits until it has as many messages as asked for, or the timeout:
            # never ask for more than the range can hold, nor wait long for the last ones
            messages = consumer.consume(min(BATCH_MESSAGES, end - position), timeout=0.1)
            offsets, keys, values, stamps, headers = [], [], [], [], []
            progressed = False
            for m in messages:
                error = m.error()
                if error is None:
                    progressed, offset = True, m.offset()
                    if offset >= end:
                        position = end
                        break
                    if offset >= start:  # not: a reset to the earliest of a truncated log
                        offsets.append(offset)
                        keys.append(m.key())
                        values.append(m.value())
                        stamps.append(m.timestamp()[1])
                        headers.append(m.headers())
                elif error.code() == KafkaError._PARTITION_EOF:
                    # the rest of the range holds no message (markers, compaction), or
                    # the log now ends before the plan did: either way a trailing gap
                    progressed, position = True, end
                elif error.fatal() or error.code() in refused:
                    raise retries.librdkafka_error(error, f"reading {topic} partition {partition}")
                else:  # librdkafka retries by itself; named if the read stalls
                    last_error = error
            if offsets:
                position = max(position, offsets[-1] + 1)
                yield Batch(np.array(offsets, np.int64), binary_array(keys),
                            binary_array(values), np.array(stamps, np.int64),
                            headers_array(headers))
            if progressed:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > stall_s:
                raise Stalled(f"{topic} partition {partition}: reading offsets [{start}, {end}) "
                              f"made no progress at offset {position} for {stall_s:.0f} s"
                              + (f" (last error: {last_error.str()})" if last_error else ""))
    finally:
        consumer.unassign()
