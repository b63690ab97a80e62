"""Freshness: a partition's lag, newest in Kafka minus newest archived; a topic's, its
worst partition's, against the topic's SLA."""

from kafka_archive.monitor.freshness import PartitionFreshness, past_sla, topic_lags

NOW_MS = 1_800_000_000_000


def fresh(topic, partition, archived_to, latest, newest_kafka_s=None, newest_archived_s=None,
          oldest_pending_s=None):
    ms = lambda s: None if s is None else NOW_MS + s * 1000  # noqa: E731
    return PartitionFreshness(topic, partition, archived_to, latest, ms(newest_kafka_s),
                              ms(newest_archived_s), ms(oldest_pending_s))


def test_lag_is_newest_in_kafka_minus_newest_archived():
    assert fresh("t", 0, 10, 10).lag_s(NOW_MS) == 0  # all archived
    assert fresh("t", 0, 5, 20, newest_kafka_s=-60, newest_archived_s=-960).lag_s(NOW_MS) == 900
    # nothing archived yet: the age of the oldest waiting message
    assert fresh("t", 0, 0, 3, newest_kafka_s=-10, oldest_pending_s=-400).lag_s(NOW_MS) == 400
    assert fresh("t", 0, 5, 20, newest_archived_s=-5).lag_s(NOW_MS) is None  # Kafka silent


def test_past_sla_takes_the_worst_partition_against_each_topics_sla():
    partitions = [fresh("orders", 0, 5, 20, -60, -960), fresh("orders", 1, 8, 8),
                  fresh("clicks", 0, 1, 9, -10, -500),  # 490 s behind, SLA 1h: fine
                  fresh("audit", 0, 3, 3)]
    lagging = past_sla(partitions, {"orders": 600, "clicks": 3600, "audit": 1}.get, NOW_MS)
    assert [(t.topic, t.lag_s, t.sla_s) for t in lagging] == [("orders", 900, 600)]
    assert [p.partition for p in lagging[0].partitions] == [0]  # only those with data waiting


def test_topic_lags_take_the_worst_partition_and_leave_out_unknown_ones():
    partitions = [fresh("a", 0, 5, 20, -60, -960), fresh("a", 1, 0, 3, -1, -100),
                  fresh("b", 0, 5, 20, newest_archived_s=-5)]  # Kafka did not answer
    assert topic_lags(partitions, NOW_MS) == {"a": 900}


def test_an_odd_producer_timestamp_cannot_put_a_topic_past_its_sla():
    """By offsets: the archive held everything Kafka had 10 minutes ago, so it is 10
    minutes behind, whatever the pending message's record timestamp says (2001)."""
    ancient = 978_307_200_000  # 2001-01-01
    by_offsets = PartitionFreshness("t", 0, 100, 101, ancient, ancient - 1, None,
                                    caught_up_ms=NOW_MS - 600_000)
    assert by_offsets.lag_s(NOW_MS) == 600
    assert past_sla([by_offsets], lambda t: 3600, NOW_MS) == []
    by_record_time = PartitionFreshness("t", 0, 100, 101, NOW_MS, ancient, None)
    assert by_record_time.lag_s(NOW_MS) > 3600  # what record time alone would say
