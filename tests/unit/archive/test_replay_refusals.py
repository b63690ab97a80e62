"""What the replay checks before sending a message: a target topic's timestamp window,
as its broker applies it (replay_job.refused_by); pure, no services."""

from kafka_archive.archive.replay_job import refused_by
from kafka_archive.formats.records import Record

NOW = 1_800_000_000_000
KAFKA_4_DEFAULTS = {"message.timestamp.type": "CreateTime",
                    "message.timestamp.after.max.ms": "3600000",
                    "message.timestamp.before.max.ms": "9223372036854775807"}


def at(ms: int) -> Record:
    return Record(offset=7, timestamp_ms=ms, key=b"k", value=b"v")


def test_a_timestamp_too_far_ahead_is_refused_naming_the_setting_and_the_way_out():
    why = refused_by(KAFKA_4_DEFAULTS, at(NOW + 3_600_001), NOW)
    assert "3600 s ahead of the clock" in why
    assert "message.timestamp.after.max.ms 3600000" in why and "LogAppendTime" in why
    assert refused_by(KAFKA_4_DEFAULTS, at(NOW + 3_600_000), NOW) is None  # the edge is kept


def test_a_timestamp_too_old_is_refused_only_where_the_topic_limits_it():
    assert refused_by(KAFKA_4_DEFAULTS, at(0), NOW) is None
    strict = {**KAFKA_4_DEFAULTS, "message.timestamp.before.max.ms": "60000"}
    assert "behind the clock" in refused_by(strict, at(NOW - 60_001), NOW)


def test_log_append_time_and_unknown_settings_refuse_nothing():
    assert refused_by({**KAFKA_4_DEFAULTS, "message.timestamp.type": "LogAppendTime"},
                      at(NOW * 2), NOW) is None
    assert refused_by({}, at(NOW * 2), NOW) is None


def test_a_record_larger_than_the_topics_limit_is_refused_naming_both_sizes():
    from kafka_archive.archive.replay_job import record_size

    r = Record(offset=7, timestamp_ms=NOW, key=b"k", value=b"v" * 1000, headers=[("h", None)])
    limit = {**KAFKA_4_DEFAULTS, "max.message.bytes": str(record_size(r))}
    assert refused_by(limit, r, NOW) is None  # the edge is kept
    limit["max.message.bytes"] = str(record_size(r) - 1)
    why = refused_by(limit, r, NOW)
    assert f"its record is {record_size(r)} bytes" in why
    assert f"max.message.bytes {record_size(r) - 1}" in why


def test_a_record_of_a_few_bytes_reckons_the_batch_and_record_framing():
    # v2 format: 61 bytes of batch header, then length, attributes, two deltas, key
    # length, key, value length, value, header count: 1 + (1 + 1 + 1 + 1+1 + 1+1 + 1)
    from kafka_archive.archive.replay_job import record_size

    assert record_size(Record(offset=0, timestamp_ms=NOW, key=b"k", value=b"v")) == 61 + 1 + 8
    assert record_size(Record(offset=0, timestamp_ms=NOW, key=None, value=None)) == 61 + 1 + 6


def test_a_message_without_a_key_is_refused_by_a_compacted_topic_only():
    keyless = Record(offset=7, timestamp_ms=NOW, key=None, value=b"v")
    why = refused_by({**KAFKA_4_DEFAULTS, "cleanup.policy": "compact,delete"}, keyless, NOW)
    assert "has no key" in why and "cleanup.policy compact,delete" in why
    assert refused_by({**KAFKA_4_DEFAULTS, "cleanup.policy": "delete"}, keyless, NOW) is None
    assert refused_by({**KAFKA_4_DEFAULTS, "cleanup.policy": "compact"}, at(NOW), NOW) is None
