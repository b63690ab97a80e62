# The Airflow image of docker-compose.yml: Airflow 3.3 with kafka-archive's pinned Python
# requirements (pyspark among them: Spark runs inside the task, as `local[2]`), a Java 17
# runtime for Spark, and Spark's Kafka source jars resolved from the repo's own pom.
# Build context: the repository root.

FROM maven:3.9-eclipse-temurin-17 AS spark-kafka-jars
COPY scripts/jars /jars
RUN cd /jars/spark-kafka \
 && mvn -q -B -s ../settings.xml dependency:copy-dependencies -DoutputDirectory=/spark-kafka

FROM eclipse-temurin:17-jre AS java

FROM apache/airflow:3.3.2-python3.11
ENV JAVA_HOME=/opt/java/openjdk \
    KAFKA_ARCHIVE_SPARK_JARS_DIR=/opt/spark-kafka-jars
ENV PATH=$JAVA_HOME/bin:$PATH
COPY --from=java /opt/java/openjdk /opt/java/openjdk
COPY --from=spark-kafka-jars /spark-kafka /opt/spark-kafka-jars
COPY requirements.txt /tmp/kafka-archive-requirements.txt
RUN pip install --no-cache-dir -r /tmp/kafka-archive-requirements.txt
