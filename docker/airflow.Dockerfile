# The Airflow image of docker-compose.yml: Airflow 3.3 with kafka-archive's pinned Python
# requirements (pyspark among them: Spark runs inside the task, as `local[2]`; its tasks
# read Kafka with librdkafka, from confluent-kafka's wheel) and a Java 17 runtime for Spark.
# The compose stack's spark-connect service runs on this image too, and its groups without
# `spark_connect` use spark-submit: both need the Java stage. An Airflow image for a
# deployment whose every group has `spark_connect` (its server elsewhere) needs none: its
# tasks are Connect clients in Python (README, "Spark Connect").
# Build context: the repository root.

FROM eclipse-temurin:17-jre AS java

FROM apache/airflow:3.3.2-python3.11
ENV JAVA_HOME=/opt/java/openjdk
ENV PATH=$JAVA_HOME/bin:$PATH
COPY --from=java /opt/java/openjdk /opt/java/openjdk
COPY requirements.txt /tmp/kafka-archive-requirements.txt
RUN pip install --no-cache-dir -r /tmp/kafka-archive-requirements.txt
