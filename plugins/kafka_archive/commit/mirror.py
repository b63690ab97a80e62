"""The archived offsets, mirrored into a Kafka consumer group after each commit, so that
Kafka's standard lag tools (`kafka-consumer-groups --describe`, Burrow, Kafka UI,
exporters) see how far the archive is behind.

Only a mirror: the token files stay the truth. Nothing ever reads these offsets back;
a failed mirror is logged and changes nothing, and the next commit writes the whole
token again. The group is named `kafka-archive.<archive group>` and never has members
(offsets are committed without joining it), so it shows as "no active members".
"""

from __future__ import annotations

import logging

from kafka import TopicPartition
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata

from kafka_archive import brokers
from kafka_archive.config import Config

log = logging.getLogger(__name__)


def consumer_group(group: str) -> str:
    return f"kafka-archive.{group}"


def offsets_to_commit(tokens: dict[str, dict[int, int]], run_id: str) -> dict:
    """TopicPartition -> OffsetAndMetadata (the token's next offset, the run as metadata)."""
    return {TopicPartition(topic, partition): OffsetAndMetadata(offset, run_id, -1)
            for topic, offsets in sorted(tokens.items())
            for partition, offset in sorted(offsets.items())}


def mirror(config: Config, group: str, tokens: dict[str, dict[int, int]], run_id: str) -> bool:
    """Commit the tokens' offsets to the group's consumer group; False (logged) on failure."""
    if not tokens:
        return True
    try:
        consumer = brokers.group_committer(config, consumer_group(group))
        try:
            consumer.commit(offsets_to_commit(tokens, run_id))
        finally:
            consumer.close(autocommit=False)
    except KafkaError as exc:
        log.warning("could not mirror the tokens of %s into consumer group %s (the tokens "
                    "are committed; standard lag tools lag behind until the next commit): %r",
                    group, consumer_group(group), exc)
        return False
    return True
