# The Airflow image of docker-compose.yml: Airflow's own image with kafka-archive's wheel
# installed the way docs/deploy/airflow.md installs it (pip, Airflow's version named so
# that nothing up- or downgrades it; no test tools, no requirements.txt), with the extras
# the compose stack uses: spark (spark-submit in the task, and the stack's spark-connect
# service, which runs on this image) and tables (Iceberg). Both need the Java stage. An
# image for a deployment whose every group has `spark_connect` (its server elsewhere)
# needs neither Java nor the spark extra: its tasks are Spark Connect clients in Python.
# Build context: the repository root.

FROM python:3.11-slim AS wheel
COPY . /src
RUN pip install --no-cache-dir build==1.3.0 && python -m build --wheel --outdir /dist /src

FROM eclipse-temurin:17-jre AS java

FROM apache/airflow:3.3.2-python3.11
ENV JAVA_HOME=/opt/java/openjdk
ENV PATH=$JAVA_HOME/bin:$PATH
COPY --from=java /opt/java/openjdk /opt/java/openjdk
COPY --from=wheel /dist /tmp/dist
RUN pip install --no-cache-dir "apache-airflow==${AIRFLOW_VERSION}" \
      "$(ls /tmp/dist/kafka_archive-*.whl)[spark,tables]"
