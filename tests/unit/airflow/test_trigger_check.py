"""Closed trigger params, the pure part: an unknown param is named with the one meant; a
topic the group does not archive is named with the group's selection."""

from kafka_archive import config
from kafka_archive.airflow.trigger_check import unarchived_topics, unknown_params


def test_an_unknown_param_is_named_with_the_closest_known_one():
    found = unknown_params("kafka_archive_backup", {"max_recrods": 5, "topics": []},
                           ["max_records", "max_bytes", "topics"])
    assert found == ("DAG kafka_archive_backup has no trigger param 'max_recrods' (did you mean "
                     "'max_records'?); its params are max_bytes, max_records, topics")
    assert unknown_params("d", {"topics": ["a"]}, ["topics"]) is None


def test_a_topic_not_selected_or_not_in_kafka_is_named(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("kafka: {bootstrap_servers: 'b:9092'}\narchive_root: s3://b/a\n"
                    "groups: {backup: {topics: {include: ['orders.*'], exclude: ['orders-tmp']}}}\n")
    cfg = config.load(path)
    assert unarchived_topics(cfg, "backup", ["orders-eu"], {"orders-eu"}) is None
    found = unarchived_topics(cfg, "backup", ["orders-eu", "orders-tmp", "no.such.topic",
                                              "orders-gone"], {"orders-eu", "orders-tmp"})
    assert found == ("group backup does not archive topic(s) orders-tmp, no.such.topic, "
                     "orders-gone: not in Kafka, or not selected by its include ['orders.*'] / "
                     "exclude ['orders-tmp']")
