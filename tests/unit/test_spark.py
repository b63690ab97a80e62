"""How every launcher submits the archive job: the library zip, the spark-submit settings,
the executors' credentials and scratch space. No Spark runs here."""

import subprocess
import sys
import zipfile

import pytest

from kafka_archive import config, spark, spark_connect


def load(tmp_path, spark_section=""):
    path = tmp_path / "kafka-archive.yaml"
    path.write_text("kafka: {bootstrap_servers: b:9092}\narchive_root: s3://bucket/p\n"
                    + spark_section)
    return config.load(path)


def test_library_zip_is_the_same_bytes_wherever_and_whenever_it_is_built(tmp_path):
    first, second = spark.library_zip(tmp_path / "a"), spark.library_zip(tmp_path / "b")
    assert first.name == second.name and first.read_bytes() == second.read_bytes()
    with zipfile.ZipFile(first) as z:
        names = z.namelist()
        assert names == sorted(names) and "kafka_archive/spark.py" in names
        assert not [n for n in names if "__pycache__" in n or not n.endswith((".py", ".pyc"))]
        assert {n for n in names if n.endswith(".pyc")} == {n + "c" for n in names if n.endswith(".py")}
        assert {i.date_time for i in z.infolist()} == {(1980, 1, 1, 0, 0, 0)}
        assert z.read("kafka_archive/spark.py") == (spark.LIBRARY / "spark.py").read_bytes()


def test_spark_python_zips_get_bytecode_that_imports_load(tmp_path, monkeypatch):
    with zipfile.ZipFile(tmp_path / "pyspark.zip", "w") as archive:
        archive.writestr("fake_spark/__init__.py", "")
        archive.writestr("fake_spark/worker.py", "ANSWER = 42\n")
        archive.writestr("fake_spark/data.txt", "not Python")
    assert spark.precompile_spark_python(tmp_path) == [tmp_path / "pyspark.zip"]
    assert spark.precompile_spark_python(tmp_path) == []  # done once
    names = zipfile.ZipFile(tmp_path / "pyspark.zip").namelist()
    assert {"fake_spark/worker.pyc", "fake_spark/__init__.pyc", "fake_spark/data.txt"} <= set(names)
    monkeypatch.syspath_prepend(str(tmp_path / "pyspark.zip"))
    import fake_spark.worker

    assert fake_spark.worker.ANSWER == 42 and fake_spark.worker.__file__.endswith(".pyc")


def test_library_zip_is_built_once_per_content(tmp_path):
    built = spark.library_zip(tmp_path)
    built.write_bytes(b"marker")  # a rebuild would overwrite it
    assert spark.library_zip(tmp_path) == built and built.read_bytes() == b"marker"
    assert [p.name for p in tmp_path.iterdir()] == [built.name]  # no partial file left


def test_library_zip_alone_provides_the_package(tmp_path):
    """What an executor without the project sees: the package comes from the zip, loaded
    from its compiled modules (not compiled again in every process)."""
    built = spark.library_zip(tmp_path)
    code = f"import sys; sys.path.insert(0, {str(built)!r}); import kafka_archive.errors as e; print(e.__file__)"
    result = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                            cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"{built}/kafka_archive/errors.pyc"


def test_submit_ships_library_and_config_with_the_config_spark_section(tmp_path, monkeypatch):
    monkeypatch.setenv("KAFKA_ARCHIVE_PY_FILES_DIR", str(tmp_path / "py"))
    monkeypatch.setenv("KAFKA_ARCHIVE_SPARK_CDS", str(tmp_path / "none.jsa"))  # not built
    cfg = load(tmp_path, "spark:\n  master: spark://h:7077\n  conf:\n"
                         "    spark.pyspark.python: /opt/py/bin/python\n"
                         "    spark.eventLog.enabled: true\n"
                         "    spark.ui.port: 4999\n")
    s = spark.archive_submit(cfg)
    assert (s.master, s.deploy_mode) == ("spark://h:7077", None)
    assert s.conf == {"spark.ui.enabled": "false",  # the job's default
                      "spark.ui.port": "4999",
                      "spark.redaction.regex": spark.REDACTION_REGEX,
                      "spark.scheduler.listenerbus.logSlowEvent": "false",
                      "spark.pyspark.python": "/opt/py/bin/python",
                      "spark.eventLog.enabled": "true",
                      "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1",
                      # the executors' Python is not the driver's
                      "spark.pyspark.driver.python": sys.executable}
    assert s.py_files == [str(spark.library_zip(tmp_path / "py"))]
    assert s.files == [str(cfg.path)]  # and no jars: the tasks read Kafka with librdkafka
    assert spark.archive_submit(cfg, master="local[2]").master == "local[2]"  # the caller's
    ui_on = load(tmp_path, "spark:\n  conf:\n    spark.ui.enabled: true\n")
    assert spark.archive_submit(ui_on).conf["spark.ui.enabled"] == "true"  # the config's
    assert spark.archive_submit(load(tmp_path)).master == "local[2]"  # the default

    command = spark.archive_command(cfg, "s3://bucket/p/_runs/backup/r/plan.json",
                                    extra=["--driver-memory", "2g"])
    assert command[1:3] == ["--master", "spark://h:7077"]
    assert "--conf" in command and "spark.eventLog.enabled=true" in command
    assert command[command.index("--py-files") + 1] == s.py_files[0]
    assert command[command.index("--files") + 1] == str(cfg.path)
    assert command[command.index("--driver-memory") + 1] == "2g"
    assert command[-5:] == [str(spark.APPLICATION), "--config", str(cfg.path),
                            "--plan", "s3://bucket/p/_runs/backup/r/plan.json"]
    replay = spark.replay_command(cfg, "s3://bucket/p/_replays/x/replay.json", max_rate=10)
    assert replay[:replay.index("--name")] == command[:command.index("--driver-memory")]
    assert replay[-7:] == [str(spark.REPLAY_APPLICATION), "--config", str(cfg.path), "--replay",
                           "s3://bucket/p/_replays/x/replay.json", "--max-rate", "10"]


def test_a_driver_started_here_gets_c1_and_the_class_archive_before_the_configs_java_options(
        tmp_path, monkeypatch):
    archive, jars = tmp_path / "spark.jsa", tmp_path / "jars"
    jars.mkdir()
    (jars / "spark-sql-kafka.jar").write_bytes(b"")
    monkeypatch.setenv("KAFKA_ARCHIVE_SPARK_JARS_DIR", str(jars))
    monkeypatch.setenv("KAFKA_ARCHIVE_SPARK_CDS", str(archive))
    monkeypatch.setenv("KAFKA_ARCHIVE_PY_FILES_DIR", str(tmp_path / "py"))
    options = "spark:\n  conf: {spark.driver.extraJavaOptions: -Xss4m}\n"
    java = "spark.driver.extraJavaOptions"
    assert spark.archive_submit(load(tmp_path, options)).conf[java] == \
        "-XX:TieredStopAtLevel=1 -Xss4m"
    archive.write_bytes(b"")  # scripts/install made it
    assert spark.archive_submit(load(tmp_path, options)).conf[java] == \
        f"-XX:TieredStopAtLevel=1 -XX:SharedArchiveFile={archive} -Xss4m"
    assert spark.archive_submit(load(tmp_path)).conf[java] == \
        f"-XX:TieredStopAtLevel=1 -XX:SharedArchiveFile={archive}"
    # in cluster deploy mode the driver's JVM starts on a machine without it
    cluster = load(tmp_path, "spark: {master: yarn, deploy_mode: cluster}\n")
    assert "spark.driver.extraJavaOptions" not in spark.archive_submit(cluster).conf


def test_standalone_cluster_mode_is_refused_for_a_python_job(tmp_path):
    cfg = load(tmp_path, "spark: {master: 'spark://h:7077', deploy_mode: cluster}\n")
    with pytest.raises(ValueError, match="client mode only"):
        spark.archive_submit(cfg)


@pytest.mark.parametrize("master, deploy_mode, takes", [
    ("local[2]", None, True), ("spark://h:7077", "client", True), ("yarn", None, False),
    ("yarn", "cluster", False), ("k8s://https://api:6443", "cluster", False)])
def test_credentials_go_to_spark_submit_only_where_it_runs_the_driver(master, deploy_mode, takes):
    s = spark.Submit(master, deploy_mode, {}, [], [])
    assert s.takes_credentials() is takes


def test_executors_get_exactly_the_s3_variables_the_driver_has():
    environ = {"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "s3cret",
               "AWS_ENDPOINT_URL_S3": "http://127.0.0.1:9000", "HOME": "/root", "AWS_PROFILE": "x"}
    assert spark.executor_env_conf(environ) == {
        "spark.executorEnv.AWS_ACCESS_KEY_ID": "id",
        "spark.executorEnv.AWS_SECRET_ACCESS_KEY": "s3cret",
        "spark.executorEnv.AWS_ENDPOINT_URL_S3": "http://127.0.0.1:9000"}
    assert spark.executor_env_conf({"HOME": "/root"}) == {}  # instance roles: nothing to hand on


def test_redaction_covers_every_credential_setting():
    import re

    hidden = [n for n in spark.EXECUTOR_S3_VARIABLES if re.search(spark.REDACTION_REGEX, f"spark.executorEnv.{n}")]
    assert hidden == ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"]


def test_scratch_space_is_sparks_local_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("SPARK_LOCAL_DIRS", f"{tmp_path}/a,{tmp_path}/b")
    assert spark.local_dir() == f"{tmp_path}/a"
    monkeypatch.delenv("SPARK_LOCAL_DIRS")
    assert spark.local_dir() is None  # outside Spark (backfill): the system's temp dir


def test_shipped_config_is_found_where_the_driver_runs(tmp_path):
    path = tmp_path / "kafka-archive.yaml"
    path.write_text("")
    assert spark.shipped_file(str(path)) == str(path)


# what Spark hands the driver when a task raises: its traceback quoted in the Java error
SPARK_FAILURE = """An error occurred while calling z:org.apache.spark.api.python.PythonRDD.collectAndServe.
: org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 0.0 failed 1 times, most recent failure: Lost task 0.0 in stage 0.0 (TID 0) (127.0.0.1 executor driver): org.apache.spark.api.python.PythonException: Traceback (most recent call last):
  File "/tmp/kafka_archive/storage.py", line 106, in upload_file
botocore.exceptions.ClientError: An error occurred (SlowDown) when calling the PutObject operation (reached max retries: 4): Please reduce your request rate.

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/tmp/kafka_archive/archive/job.py", line 160, in __call__
{last}

\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(PythonRunner.scala:572)
\tat java.base/java.lang.Thread.run(Thread.java:840)

Driver stacktrace:
\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(DAGScheduler.scala:2856)
Caused by: org.apache.spark.api.python.PythonException: Traceback (most recent call last):
{last}
"""


def test_a_task_s_error_of_ours_reaches_the_driver_as_itself():
    from kafka_archive.errors import TransientError

    failure = Exception(SPARK_FAILURE.format(
        last="kafka_archive.errors.TransientError: cannot upload s3://b/k: SlowDown (HTTP 503)"))
    error = spark.task_failure(failure, "the archive job")
    assert type(error) is TransientError
    assert str(error) == "cannot upload s3://b/k: SlowDown (HTTP 503)"


def test_a_task_s_error_that_needs_more_than_a_message_comes_back_as_its_family():
    from kafka_archive.errors import TerminalError

    failure = Exception(SPARK_FAILURE.format(
        last="kafka_archive.tokens.TokenConflictError: token g/t changed under us"))
    error = spark.task_failure(failure, "the archive job")
    assert type(error) is TerminalError
    assert str(error) == "TokenConflictError: token g/t changed under us"


def test_any_other_task_failure_is_terminal_and_names_what_was_raised():
    from kafka_archive.errors import TerminalError

    failure = Exception(SPARK_FAILURE.format(last="KeyError: 'partition'"))
    error = spark.task_failure(failure, "the archive job")
    assert type(error) is TerminalError
    assert str(error) == "the archive job: a Spark task failed: KeyError: 'partition'"
    lost = spark.task_failure(Exception("\nExecutor lost\n"), "the replay")
    assert str(lost) == "the replay: a Spark task failed: Executor lost"
    assert str(spark.task_failure(RuntimeError(), "x")) == "x: a Spark task failed: RuntimeError"


def test_each_deployment_has_its_connect_session_and_each_job_its_tag(tmp_path):
    """Two deployments (another archive root) share a Connect server: their sessions
    differ. In a session, a job's attempts share a tag (a retry interrupts what a killed
    attempt left running) that no other job has (other groups' runs go on). A session id
    cannot be made from the root alone (issue 56: another client of the server could
    attach): a secret under the root, created once, goes into it."""
    from kafka_archive import layout
    from kafka_archive.storage import Storage

    def session(root: str) -> str:
        path = tmp_path / "c.yaml"
        path.write_text(f"kafka: {{bootstrap_servers: b:9092}}\narchive_root: {root}\n")
        return str(spark_connect.session_id(spark_connect.session_name(config.load(path), Storage()),
                                            spark.library_zip()))

    prod, dev = (f"file://{tmp_path}/{name}/archive" for name in ("prod", "dev"))
    ids = {session(root) for root in (prod, dev, prod + "/")}
    assert len(ids) == 2  # a trailing slash is the same root
    assert session(prod) in ids  # the secret is created once, then read
    secret = Storage().get_bytes(layout.connect_secret(prod))
    assert len(secret) == 64 and session(prod) != str(spark_connect.session_id(
        prod, spark.library_zip()))
    plans = [f"s3://prod/archive/_runs/{g}/scheduled__2026-01-01T00:00:00+00:00/plan.json"
             for g in ("backup", "tables")]
    tags = {spark_connect.job_tag(plan) for plan in plans}
    assert len(tags) == 2 and spark_connect.job_tag(plans[0]) in tags
    assert not any("," in tag for tag in tags)


def test_a_connect_clients_parallelism_is_the_clusters_not_a_default_of_two():
    """Issue 56, defect 12: a Connect client (no SparkContext) whose server sets no
    spark.default.parallelism took 2; it now asks the cluster how it splits a range."""
    class Frame:
        def selectExpr(self, expression):
            assert expression in ("spark_partition_id() AS p", "max(p)")
            return self

        def first(self):
            return [47]  # the highest partition id of a range on 48 cores

    class ConnectSession:
        conf = type("Conf", (), {"get": staticmethod(lambda key, default=None: default)})()

        @property
        def sparkContext(self):
            raise RuntimeError("[JVM_ATTRIBUTE_NOT_SUPPORTED] not supported in Spark Connect")

        def range(self, start, end):
            assert end - start >= 1 << 20  # enough rows for every core to get some
            return Frame()

    assert spark.parallelism(ConnectSession()) == 48
    configured = ConnectSession()
    configured.conf = type("Conf", (), {"get": staticmethod(lambda key, default=None: "12")})()
    assert spark.parallelism(configured) == 12


def test_a_connect_server_refusing_the_credentials_is_told_from_one_that_cannot_be_reached():
    """Issue 56 (a suspect, real): an UNAUTHENTICATED answer (a wrong token) was reported
    as "cannot be reached" and retried. pyspark's own exceptions, as its client raises
    them (a server's answer wrapped by the caller's)."""
    import grpc
    from pyspark.errors.exceptions.connect import SparkConnectGrpcException

    def raised(status):
        try:
            try:
                raise SparkConnectGrpcException("refused", grpc_status_code=status)
            except SparkConnectGrpcException as inner:
                raise RuntimeError("addArtifacts failed") from inner
        except RuntimeError as outer:
            return outer

    for status in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
        assert spark.credentials_refused(raised(status)) == f"gRPC status {status.name}"
        assert spark.connection_lost(raised(status)) is None
    assert spark.credentials_refused(raised(grpc.StatusCode.UNAVAILABLE)) is None
    assert spark.connection_lost(raised(grpc.StatusCode.UNAVAILABLE)) == "gRPC status UNAVAILABLE"
