"""The Kafka broker is real: what kafka-python produces, kafka-python consumes back."""

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic


def test_produce_and_consume_round_trip(kafka, unique):
    topic = f"smoke-{unique}"
    admin = KafkaAdminClient(bootstrap_servers=kafka)
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
    admin.close()

    sent = {(i % 2, f"key-{i}".encode(), f"value-{i}".encode()) for i in range(20)}
    producer = KafkaProducer(bootstrap_servers=kafka, acks="all")
    for partition, key, value in sent:
        producer.send(topic, key=key, value=value, partition=partition)
    producer.flush()
    producer.close()

    consumer = KafkaConsumer(bootstrap_servers=kafka, enable_auto_commit=False,
                             consumer_timeout_ms=10000)
    partitions = [TopicPartition(topic, p) for p in (0, 1)]
    consumer.assign(partitions)
    consumer.seek_to_beginning(*partitions)
    received = set()
    for record in consumer:
        received.add((record.partition, record.key, record.value))
        if len(received) == len(sent):
            break
    consumer.close()
    assert received == sent
