"""How kafka-archive launches Spark: pyspark's own spark-submit, the library shipped to the executors as a zip (`--py-files`), the
config as a file (`--files`), and S3 credentials handed from the driver to the executors
without any command line holding them.

Every launcher (ArchiveOperator, `archive_command` for the benchmark and tests) takes what
it passes to spark-submit from `archive_submit`, so a job runs alike on `local[2]` and on
a cluster whose executors have only a plain Python (README, "Running on a cluster").
Both launchers, spark-submit and a Spark Connect client (kafka_archive.spark_connect), run
the jobs' one DataFrame job (`mapped`).
"""

from __future__ import annotations

import hashlib
import json
import importlib
import importlib.util
import os
import re
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from kafka_archive.config import Config
from kafka_archive.errors import ArchiveError, TerminalError, TransientError

REPO = Path(__file__).resolve().parents[2]
LIBRARY = Path(__file__).resolve().parent  # the kafka_archive package
# the entry points: inside the installed package (the wheel maps spark_jobs/ there), or
# the checkout's spark_jobs/ beside plugins/ (an editable install); in an executor's zip
# neither is a folder, and nothing there launches a job
JOBS = LIBRARY / "spark_jobs" if (LIBRARY / "spark_jobs").is_dir() else REPO / "spark_jobs"
APPLICATION = JOBS / "archive.py"
REPLAY_APPLICATION = JOBS / "replay.py"
# what the launcher keeps between runs: a checkout's .cache/ (scripts/install fills it),
# else the user's cache folder
CACHE = (REPO / ".cache" if (REPO / "scripts" / "install").is_file()
         else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kafka-archive")
DEFAULT_JARS_DIR = CACHE / "jars" / "spark-kafka"
DEFAULT_PY_FILES_DIR = CACHE / "py-files"
# the JVM class-data sharing archive of Spark's classes (scripts/install builds it)
DEFAULT_CLASS_ARCHIVE = CACHE / "spark-cds" / "spark.jsa"
# Java options of a driver started here (in local mode also the executor), before the
# config's own (the JVM takes the last of a repeated option). C1 only: C2 compiling Spark's
# generated code was half the JVM's CPU of a 256 MiB run on 2 cores (20.5 CPU-s against
# 11.0 with this), and its faster code never paid that back in a run of that size (issue 14)
DRIVER_JAVA_OPTIONS = ("-XX:TieredStopAtLevel=1",)
DEFAULT_MASTER = "local[2]"
# Spark's default plus access_key (the key id): what its UI, event log and logs show redacted
REDACTION_REGEX = r"(?i)secret|password|token|access[._]?key"
SECRET_SAFE_CONF = {
    "spark.redaction.regex": REDACTION_REGEX,
    # a listener event slower than 1 s (a loaded machine) is logged whole at INFO, job
    # properties unredacted: spark.executorEnv.AWS_SECRET_ACCESS_KEY in the driver's log
    "spark.scheduler.listenerbus.logSlowEvent": "false",
}
# Defaults of the archive job a config's `spark.conf` may override (spark-submit --conf,
# unlike a SparkSession builder's setting, yields to the config)
JOB_DEFAULT_CONF = {
    # a batch job nobody browses: no web UI to start (the Airflow task log has it all)
    "spark.ui.enabled": "false",
}
# boto3's variables the executors need to reach S3 as the driver does
EXECUTOR_S3_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                         "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL_S3", "AWS_CA_BUNDLE")
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # the earliest a zip can say: no build time in the bytes


def spark_home() -> Path:
    """pyspark's package folder is a complete SPARK_HOME (bin/, jars/). pyspark-client (the
    Spark provider's, for Spark Connect) installs a `pyspark` without them."""
    try:
        import pyspark
    except ImportError:
        pyspark = None
    home = Path(pyspark.__file__).resolve().parent if pyspark else None
    if home is None or not (home / "bin" / "spark-submit").is_file():
        raise TerminalError("spark-submit is not installed here: a group without "
                            "`spark_connect` runs its job with pyspark's spark-submit (and "
                            "Java 17); pip install 'kafka-archive[spark]', or give the group "
                            "a Spark Connect server (`spark_connect`)")
    return home


def kafka_source_jars() -> list[str]:
    """The jars of Spark's Kafka source: $KAFKA_ARCHIVE_SPARK_JARS_DIR or the install cache.
    Passed explicitly so nothing is downloaded when a job starts."""
    folder = Path(os.environ.get("KAFKA_ARCHIVE_SPARK_JARS_DIR", DEFAULT_JARS_DIR))
    jars = sorted(str(p) for p in folder.glob("*.jar"))
    if not jars:
        raise FileNotFoundError(f"no Spark Kafka source jars in {folder}: run scripts/install")
    return jars


def library_zip(folder: Path | None = None) -> Path:
    """The kafka_archive package as a zip for `--py-files`: its .py files in name order with
    fixed times and modes, each beside its compiled .pyc for this Python. Python imports
    from a zip compile every module again in every process (a Spark worker spent a fifth
    of its CPU so); with the .pyc it only loads them, and a Python of another version
    ignores them and compiles the source. Named by the hash of the sources and built only
    when no zip of them exists yet ($KAFKA_ARCHIVE_PY_FILES_DIR, default .cache/py-files/)."""
    folder = Path(folder or os.environ.get("KAFKA_ARCHIVE_PY_FILES_DIR", DEFAULT_PY_FILES_DIR))
    sources = sorted((p.relative_to(LIBRARY.parent).as_posix(), p)
                     for p in LIBRARY.rglob("*.py") if "__pycache__" not in p.parts)
    contents = [(name, path.read_bytes()) for name, path in sources]
    digest = hashlib.sha256(b"with .pyc for " + importlib.util.MAGIC_NUMBER)
    for name, data in contents:
        digest.update(f"{name}\0{len(data)}\0".encode() + data)
    target = folder / f"kafka_archive-{digest.hexdigest()[:16]}.zip"
    if target.exists():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    _write_with_bytecode(contents, target)  # concurrent builders write equivalent zips
    return target


def precompile_spark_python(lib: Path | None = None) -> list[Path]:
    """Add each module's .pyc to the zips Spark puts first on its Python workers' path
    (SPARK_HOME/python/lib: pyspark.zip, py4j-*.zip): every executor's Python daemon
    imports pyspark from them, and compiled its ~1,300 modules' sources again at the start
    of every job (~0.9 CPU-s, most of a one-message run's Python). Zips that have them
    already are left alone; the zips that were rewritten are returned (scripts/install).
    `lib`: another folder of such zips."""
    rewritten = []
    for path in sorted((lib or spark_home() / "python" / "lib").glob("*.zip")):
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            if any(name.endswith(".pyc") for name in names):
                continue
            contents = [(name, archive.read(name)) for name in names if not name.endswith("/")]
        _write_with_bytecode(contents, path)
        rewritten.append(path)
    return rewritten


def _write_with_bytecode(contents: list[tuple[str, bytes]], target: Path) -> None:
    """Write (name, bytes) entries to the zip `target` (atomically: a reader sees the old
    zip or the new), with fixed times and modes, each .py beside its compiled .pyc."""
    partial = target.with_name(f".{target.name}.{os.getpid()}")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in contents:
            entries = [(name, data)] + ([(name + "c", _pyc(name, data))] if name.endswith(".py") else [])
            for entry_name, entry_data in entries:
                entry = zipfile.ZipInfo(entry_name, date_time=_ZIP_TIME)
                entry.external_attr = 0o644 << 16
                entry.compress_type = zipfile.ZIP_DEFLATED
                archive.writestr(entry, entry_data)
    os.replace(partial, target)


def _pyc(name: str, source: bytes) -> bytes:
    """A .pyc of `source` that zipimport loads without checking it against the source
    (PEP 552's unchecked hash: the zip's name already changes with every source)."""
    import marshal

    code = compile(source, name, "exec", dont_inherit=True)
    return (importlib.util.MAGIC_NUMBER + (0b01).to_bytes(4, "little")
            + importlib.util.source_hash(source) + marshal.dumps(code))


def class_archive() -> Path | None:
    """The JVM class-data sharing archive of Spark's classes ($KAFKA_ARCHIVE_SPARK_CDS or
    the install cache), if there is one. A driver started with it maps the classes Spark
    loads instead of looking each up in ~250 jars and verifying it: about 40% less CPU
    before the job's first record (issue 14). A JVM other than the one that made it, or a
    different class path, makes the JVM warn and start without it."""
    path = Path(os.environ.get("KAFKA_ARCHIVE_SPARK_CDS", DEFAULT_CLASS_ARCHIVE))
    return path if path.is_file() else None


@dataclass(frozen=True)
class Submit:
    """What a launcher passes to spark-submit for the archive job."""
    master: str
    deploy_mode: str | None
    conf: dict[str, str]
    py_files: list[str]
    files: list[str]

    @property
    def client_mode(self) -> bool:
        return self.deploy_mode != "cluster"

    def takes_credentials(self) -> bool:
        """Whether the driver may hand the S3 credentials of spark-submit's environment
        to the executors: only where spark-submit's own process runs the driver (local,
        or a standalone cluster in client mode). On YARN and Kubernetes the Spark
        provider would put environment variables on spark-submit's command line; there
        the cluster's own credentials serve (instance profiles, IRSA)."""
        return self.client_mode and self.master.startswith(("local", "spark://"))


def archive_submit(config: Config, master: str | None = None) -> Submit:
    """spark-submit settings of the archive job: the master (argument, else the config's
    `spark.master`, else local[2]), deploy mode and extra conf from the config's `spark:`
    section, the library zip, the config file."""
    master = master or config.spark.master or DEFAULT_MASTER
    deploy_mode = config.spark.deploy_mode
    if master.startswith("spark://") and deploy_mode == "cluster":
        raise ValueError(f"{config.path}: Spark standalone ({master}) runs Python jobs in client "
                         "mode only: set spark.deploy_mode to client or leave it out")
    conf = {**JOB_DEFAULT_CONF, **SECRET_SAFE_CONF, **dict(config.spark.conf)}
    if deploy_mode != "cluster" and "spark.pyspark.python" in conf:
        # that setting names the executors' Python; the driver here keeps this one
        conf.setdefault("spark.pyspark.driver.python", sys.executable)
    if deploy_mode != "cluster":  # the driver's JVM starts here
        archive = class_archive()
        options = [*DRIVER_JAVA_OPTIONS, f"-XX:SharedArchiveFile={archive}" if archive else None,
                   conf.get("spark.driver.extraJavaOptions")]
        conf["spark.driver.extraJavaOptions"] = " ".join(o for o in options if o)
    return Submit(master=master, deploy_mode=deploy_mode, conf=conf,
                  py_files=[str(library_zip())], files=[str(config.path)])


def launcher_env() -> dict[str, str]:
    """What pyspark's own spark-submit needs to start. Without SPARK_HOME, its launcher asks
    whatever `python3` is first on PATH to find Spark, which outside the venv finds nothing;
    the Spark provider runs a bare `spark-submit`: PATH makes it pyspark's own."""
    bin_dir = str(spark_home() / "bin")
    return {"SPARK_HOME": str(spark_home()),
            "PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", "")])}


def submit_env() -> dict[str, str]:
    """Environment for spark-submit running the driver here (local, or client mode): this
    interpreter for the driver (and, unless spark.pyspark.python says otherwise, for the
    executors)."""
    return {**launcher_env(), "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            # the driver and its web UI bind here (the UI's default is every interface)
            "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")}


def archive_command(config: Config, plan_url: str, master: str | None = None,
                    extra: list[str] = ()) -> list[str]:
    """The archive job's spark-submit command line, for running it outside Airflow
    (benchmark, tests); ArchiveOperator passes the same `archive_submit` settings through
    the Spark provider. `extra`: more spark-submit options (--driver-memory ...)."""
    return job_command(config, APPLICATION, ["--plan", plan_url], "kafka-archive", master, extra)


def replay_command(config: Config, replay_url: str, master: str | None = None,
                   max_rate: int | None = None, extra: list[str] = ()) -> list[str]:
    """The replay job's (spark_jobs/replay.py) command line, as the CLI runs it."""
    return job_command(config, REPLAY_APPLICATION, replay_args(replay_url, max_rate),
                       "kafka-archive-replay", master, extra)


def replay_args(replay_url: str, max_rate: int | None = None) -> list[str]:
    return ["--replay", replay_url, *(["--max-rate", str(max_rate)] if max_rate else [])]


def job_command(config: Config, application: Path, args: list[str], name: str,
                master: str | None = None, extra: list[str] = ()) -> list[str]:
    """spark-submit of one of spark_jobs/ with the `archive_submit` settings."""
    s = archive_submit(config, master)
    command = [str(spark_home() / "bin" / "spark-submit"), "--master", s.master]
    if s.deploy_mode:
        command += ["--deploy-mode", s.deploy_mode]
    for key, value in sorted(s.conf.items()):
        command += ["--conf", f"{key}={value}"]
    return [*command, *extra, "--name", name, "--py-files", ",".join(s.py_files), "--files", ",".join(s.files),
            str(application), "--config", str(config.path), *args]


# --- inside the job (spark_jobs/archive.py) ----------------------------------------------

SPARK_LOG_LEVEL = "WARN"  # Spark's own logging in the jobs: its INFO lines would bury theirs

def job_session(name: str):
    """The SparkSession of a job of spark_jobs/: Spark's own log at the job's level (its
    INFO lines would bury the job's), and the driver's S3 credentials handed to the
    executors (never on a command line)."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(name).config("spark.log.level", SPARK_LOG_LEVEL)
    for key, value in executor_env_conf(dict(os.environ)).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


# each Spark task's output: one JSON text per row (a manifest row, a replay's summary)
TASK_OUTPUT = "row string"


def mapped(session, tasks: int, task: Callable[[int], Iterable[dict]], what: str) -> list[dict]:
    """task(i) for each i in range(tasks), one Spark task each, and the rows they yield,
    on Spark's DataFrame API (a range mapped by mapInArrow): what a Spark Connect client
    runs as well as a classic driver. A failed task is raised as the error it raised
    (task_failure)."""
    def over(batches):
        import pyarrow as pa

        for batch in batches:
            for i in batch.column(0).to_pylist():
                for row in task(i):  # a batch per row: the rows stream as slices finish
                    yield pa.RecordBatch.from_pydict({"row": [json.dumps(row)]})
    frame = session.range(0, tasks, 1, numPartitions=tasks).mapInArrow(over, TASK_OUTPUT)
    try:
        return [json.loads(r.row) for r in frame.collect()]
    except ArchiveError:
        raise
    except Exception as exc:  # Spark's PythonException (or Py4JJavaError), quoting the task's
        if lost := connection_lost(exc):
            raise TransientError(f"{what}: the Spark Connect server stopped answering "
                                 f"({lost}); the run is done again") from exc
        raise task_failure(exc, what) from exc


# what a Connect server's shutdown (SIGTERM: its SparkContext stops first) does to a job
_SERVER_STOPPING = ("stopped SparkContext", "SparkContext was shut down")


def _grpc_statuses(exc: BaseException | None):
    """Each error of exc's chain (its causes, then contexts) with its gRPC status name, as
    pyspark's Connect errors (getGrpcStatusCode) and grpc's own (code()) give it; None
    for an error without one."""
    while exc is not None:
        status = getattr(exc, "getGrpcStatusCode", None) or getattr(exc, "code", None)
        try:
            status = status() if callable(status) else None
        except Exception:  # noqa: BLE001  an exception's own code() of another kind
            status = None
        yield exc, getattr(status, "name", None)
        exc = exc.__cause__ or exc.__context__


def connection_lost(exc: BaseException) -> str | None:
    """What a Connect client's error says when the server went away (restarted, killed,
    a network cut): the gRPC status, or the client's retries given up; None otherwise."""
    for error, status in _grpc_statuses(exc):
        if status in ("UNAVAILABLE", "CANCELLED"):
            return f"gRPC status {status}"
        if type(error).__name__ == "RetriesExceeded":
            return "the client's retries given up"
        if type(error).__module__.startswith("pyspark.errors.exceptions.connect") and any(
                stopped in str(error) for stopped in _SERVER_STOPPING):
            return "its Spark stopped under the job"
    return None


def credentials_refused(exc: BaseException) -> str | None:
    """What a Connect client's error says when the server refused its credentials (the
    connection's token): the gRPC status; None otherwise. No retry helps then."""
    return next((f"gRPC status {status}" for _, status in _grpc_statuses(exc)
                 if status in ("UNAUTHENTICATED", "PERMISSION_DENIED")), None)


def parallelism(session) -> int:
    """How many tasks the session runs at once (its default parallelism). A Connect client
    has no SparkContext: the server's setting where it has one, else the cluster's own
    default parallelism (its executors' cores), read from how it splits a range (a small
    job); `spark.default.parallelism` unset used to mean 2, so 2,000 slices became 128
    tasks on any cluster (issue 56, defect 12)."""
    try:
        return session.sparkContext.defaultParallelism
    except Exception:  # noqa: BLE001  a Connect client
        configured = session.conf.get("spark.default.parallelism", None)
        if configured:
            return int(configured)
        # (spark_partition_id() named first: an aggregate may not take it directly)
        split = session.range(0, 1 << 20).selectExpr("spark_partition_id() AS p")
        return split.selectExpr("max(p)").first()[0] + 1


# an exception's line, as Spark quotes a failed task's traceback: `module.Class: text`
_RAISED = re.compile(r"^([A-Za-z_][\w.]*): (.*)$", re.M)
_JVM = ("org.", "java.", "scala.", "py4j.")


def task_failure(exc: BaseException, what: str) -> ArchiveError:
    """A Spark job's failure as the error its task raised. Spark hands the driver an
    exception (PythonException, Py4JJavaError) whose text quotes the Python worker's traceback, ending in
    `kafka_archive.errors.TransientError: <message>`: a class of ours comes back with the
    task's message (or as its family, transient or terminal, where the class needs more
    than a message to build). Anything else (a bug in a task, an executor lost) is
    terminal, naming the last exception quoted."""
    quoted = [(name, message) for name, message in _RAISED.findall(str(exc))
              if not name.startswith(_JVM)]
    for name, message in reversed(quoted):
        if cls := _error_class(name):
            try:
                return cls(message)
            except TypeError:
                family = TransientError if issubclass(cls, TransientError) else TerminalError
                return family(f"{cls.__name__}: {message}")
    last = (": ".join(quoted[-1]) if quoted
            else (str(exc).strip().splitlines() or [type(exc).__name__])[0][:500])
    return TerminalError(f"{what}: a Spark task failed: {last}")


def _error_class(name: str) -> type[ArchiveError] | None:
    """kafka_archive's error class of that dotted name; None for any other name."""
    module, _, attribute = name.rpartition(".")
    if not module.startswith("kafka_archive."):
        return None
    try:
        found = getattr(importlib.import_module(module), attribute, None)
    except ImportError:
        return None
    return found if isinstance(found, type) and issubclass(found, ArchiveError) else None


def executor_env_conf(environ: dict[str, str]) -> dict[str, str]:
    """spark.executorEnv.* handing the driver's S3 credentials and endpoint (from
    spark-submit's environment) to the executors, whose workers have none. Set from
    inside the driver, so no command line holds them; Spark shows the values redacted
    (spark.redaction.regex). Nothing when the environment has none (instance roles)."""
    return {f"spark.executorEnv.{name}": environ[name]
            for name in EXECUTOR_S3_VARIABLES if environ.get(name)}


def shipped_file(path: str) -> str:
    """A file spark-submit shipped with --files: at its path where the driver runs beside
    the launcher (client mode), else the driver's copy (cluster mode)."""
    if Path(path).exists():
        return path
    from pyspark import SparkFiles

    return SparkFiles.get(Path(path).name)


def local_dir() -> str | None:
    """A scratch folder of Spark's own (spark.local.dir, which Spark hands its Python
    workers as SPARK_LOCAL_DIRS, and removes with the application); None outside Spark."""
    dirs = [d for d in os.environ.get("SPARK_LOCAL_DIRS", "").split(",") if d]
    return dirs[0] if dirs else None
