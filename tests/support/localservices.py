"""Start, health-check and stop the real services kafka-archive runs against locally.

    .venv/bin/python -m tests.support.localservices start [kafka s3 smtp toxiproxy statsd postgres iceberg-rest schema-registry airflow spark]
    .venv/bin/python -m tests.support.localservices stop [kafka s3 smtp toxiproxy statsd postgres iceberg-rest schema-registry airflow spark]
    .venv/bin/python -m tests.support.localservices status
    eval "$(.venv/bin/python -m tests.support.localservices env)"  # point Airflow/CLI at them
    .venv/bin/python -m tests.support.localservices leftovers [--baseline FILE]

Every service binds to 127.0.0.1 and keeps its data, log and pid file under
.cache/services/<name>/. `start` is idempotent and returns only once the service answers a
real request; `stop` signals only the session (process tree) its pid file names. Ports come
from KAFKA_ARCHIVE_{KAFKA,KAFKA_SASL,S3,SMTP,AIRFLOW,TOXIPROXY,STATSD,POSTGRES,ICEBERG_REST,SCHEMA_REGISTRY}_PORT; credentials from
.cache/local.env (made by scripts/install) or the environment. `start` and `stop` without
names mean kafka, s3, smtp and spark-connect (and postgres where it holds the Airflow
service's metadata: airflow_on_postgres); `airflow` (api-server, scheduler, dag-processor and
triggerer, about half a minute to start) only runs when named, and `stop` without names
stops it too. So do `toxiproxy` (the fault tests' TCP fault proxy), `schema-registry` (Apicurio
Registry, in memory, its Confluent-compatible API; it needs a Java 21+ under
/usr/lib/jvm), `statsd`
(Prometheus's statsd_exporter, which the tests' Airflow sends its metrics to), `postgres` (Debian's
PostgreSQL, a cluster of its own; database `iceberg` for Iceberg's SQL catalog),
`iceberg-rest` (an Iceberg REST catalog: Iceberg's own request handlers over a JdbcCatalog,
tables on the local S3, a bearer token from .cache/local.env) and `spark`: a
standalone Spark cluster (services spark-master, spark-worker-1, spark-worker-2; ports from
KAFKA_ARCHIVE_SPARK_{MASTER,WORKER}_PORT) whose executors run .cache/executor-venv's Python,
with no copy of the project and no AWS_* variables in their environment.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import logging
import os
import re
import shlex
import signal
import smtplib
import ssl
import subprocess
import sys
import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache"
# a second set of services (pytest-xdist's other worker, tests/conftest.py) lives in a
# folder of its own, on ports of its own (KAFKA_ARCHIVE_*_PORT)
SERVICES_DIR = Path(os.environ.get("KAFKA_ARCHIVE_SERVICES_DIR", CACHE / "services"))
START_TIMEOUT_S = 120
STOP_TIMEOUT_S = 30
# --skip-serve-logs: their log servers would listen on every interface; the API server
# reads the task logs from the shared log folder instead
AIRFLOW_COMPONENTS = {"api-server": [], "scheduler": ["--skip-serve-logs"],
                      "dag-processor": [], "triggerer": ["--skip-serve-logs"]}
AIRFLOW_USER = "admin"


class ServiceError(RuntimeError):
    pass


class NotReady(Exception):
    """A probe's answer for "not up yet": only this (and refused connections) is waited out."""


def local_env() -> dict[str, str]:
    """Settings of the local services: .cache/local.env overlaid by the environment."""
    env = {**DEFAULT_PORTS, "KAFKA_ARCHIVE_S3_BUCKET": "kafka-archive"}
    env_file = CACHE / "local.env"
    if env_file.exists():
        for line in env_file.read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                key, _, value = line.partition("=")
                env[key.strip()] = value.strip()
    env.update({k: v for k, v in os.environ.items() if k.startswith("KAFKA_ARCHIVE_")})
    return env


def use_service_set(n: int) -> None:
    """Make this process (and what it starts) use service set n: set 0 is the default
    one; set n >= 1 has its own folder and every port n * 500 above the default. For
    pytest-xdist's workers, before any service starts; ports already given in the
    environment stay."""
    if n == 0:
        return
    global SERVICES_DIR
    SERVICES_DIR = CACHE / f"services-{n}"
    os.environ["KAFKA_ARCHIVE_SERVICES_DIR"] = str(SERVICES_DIR)
    for name, port in DEFAULT_PORTS.items():
        os.environ.setdefault(name, str(int(port) + 500 * n))


DEFAULT_PORTS = {
    "KAFKA_ARCHIVE_KAFKA_PORT": "19092",
    "KAFKA_ARCHIVE_KAFKA_SASL_PORT": "19094",
    "KAFKA_ARCHIVE_S3_PORT": "19000",
    "KAFKA_ARCHIVE_SMTP_PORT": "12525",
    "KAFKA_ARCHIVE_AIRFLOW_PORT": "18080",
    "KAFKA_ARCHIVE_TOXIPROXY_PORT": "18474",
    "KAFKA_ARCHIVE_STATSD_PORT": "18125",  # StatsD over UDP and TCP; its /metrics: the next
    "KAFKA_ARCHIVE_PROXY_PORT": "19100",  # the first port of the proxies tests create
    "KAFKA_ARCHIVE_SPARK_MASTER_PORT": "17077",  # its web UI: the next port
    "KAFKA_ARCHIVE_SPARK_WORKER_PORT": "17170",  # worker n: this + 2(n-1), UI the next
    "KAFKA_ARCHIVE_POSTGRES_PORT": "15432",
    "KAFKA_ARCHIVE_ICEBERG_REST_PORT": "18181",
    "KAFKA_ARCHIVE_SCHEMA_REGISTRY_PORT": "18091",  # its management interface: the next
    "KAFKA_ARCHIVE_SPARK_CONNECT_PORT": "17002",  # spark-connect-cluster: the next, its UI the one after
}


@dataclass
class Service:
    name: str
    command: Callable[[dict[str, str], Path], list[str]]
    ready: Callable[[dict[str, str]], None]  # raises until the service answers
    prepare: Callable[[dict[str, str], Path], None] = lambda env, home: None
    after_ready: Callable[[dict[str, str]], None] = lambda env: None
    process_env: Callable[[dict[str, str]], dict[str, str]] = lambda env: {}
    start_timeout_s: int = START_TIMEOUT_S
    inherit_env: bool = True  # False: process_env is the whole environment
    needs: tuple[str, ...] = ()  # services that must be running first (`start` starts them)

    @property
    def home(self) -> Path:
        return SERVICES_DIR / self.name

    @property
    def pid_file(self) -> Path:
        return self.home / "pid"

    @property
    def log_file(self) -> Path:
        return self.home / "service.log"

    def pid(self) -> int | None:
        """The recorded pid if that process still runs."""
        try:
            pid = int(self.pid_file.read_text())
        except (FileNotFoundError, ValueError):
            return None
        return pid if _alive(pid) else None

    def start(self, env: dict[str, str]) -> bool:
        """Start unless already running; True if this call started it. Concurrent calls
        (two test sessions) take turns: the second finds the first's and waits for it."""
        self.home.mkdir(parents=True, exist_ok=True)
        with open(self.home / "start.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            return self._start(env)

    def _start(self, env: dict[str, str]) -> bool:
        if self.pid() is not None:
            self._wait_ready(env, self.pid())
            return False
        for name in self.needs:
            try:
                SERVICES[name].ready(env)
            except Exception as exc:
                raise ServiceError(f"{self.name} needs {name} running: start it first "
                                   f"(localservices start {name} {self.name}): {exc!r}") from None
        self.prepare(env, self.home)
        with open(self.log_file, "ab") as log:
            proc = subprocess.Popen(
                self.command(env, self.home),
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                cwd=self.home, env={**(os.environ if self.inherit_env else {}),
                                    **self.process_env(env)},
                start_new_session=True,  # own session: stop() ends it whole
            )
        self.pid_file.write_text(str(proc.pid))
        self._wait_ready(env, proc.pid)
        self.after_ready(env)
        return True

    def _wait_ready(self, env: dict[str, str], pid: int) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            try:
                self.ready(env)
                return
            except (NotReady, OSError) as exc:  # anything else is a bug: fail at once
                if not _alive(pid):
                    raise ServiceError(f"{self.name} exited while starting; "
                                       f"last log lines:\n{_tail(self.log_file)}") from exc
                if time.monotonic() > deadline:
                    raise ServiceError(f"{self.name} not ready after {self.start_timeout_s}s: "
                                       f"{exc}; last log lines:\n{_tail(self.log_file)}") from exc
                time.sleep(0.25)

    def stop(self) -> bool:
        """Stop it and wait until its whole session is gone. Holds the start lock: a start
        meanwhile waits, then starts it afresh, instead of finding a process that is
        shutting down and calling it running."""
        self.home.mkdir(parents=True, exist_ok=True)
        with open(self.home / "start.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            return self._stop()

    def _stop(self) -> bool:
        pid = self.pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        # the whole session start() made, not just the process group: Airflow runs each
        # task (and its spark-submit) in a process group of its own
        _signal_session(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while _session_members(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        _signal_session(pid, signal.SIGKILL)
        self.pid_file.unlink(missing_ok=True)
        return True


# --- Kafka: single node, KRaft, broker and controller in one JVM -------------------------

def _kafka_properties(env: dict[str, str], home: Path) -> Path:
    port = int(env["KAFKA_ARCHIVE_KAFKA_PORT"])
    sasl = kafka_sasl_bootstrap(env)
    props = home / "server.properties"
    props.write_text("\n".join([
        "process.roles=broker,controller",
        "node.id=1",
        f"controller.quorum.voters=1@127.0.0.1:{port + 1}",
        f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{port + 1},"
        f"SASL_PLAINTEXT://{sasl}",
        f"advertised.listeners=PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://{sasl}",
        "controller.listener.names=CONTROLLER",
        "inter.broker.listener.name=PLAINTEXT",
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,"
        "SASL_PLAINTEXT:SASL_PLAINTEXT",
        # the authenticated listener: SCRAM users only (_kafka_scram_user makes ours)
        "sasl.enabled.mechanisms=SCRAM-SHA-512",
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config="
        "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        f"log.dirs={home / 'data'}",
        # topics are created on purpose; a typo should not create one
        "auto.create.topics.enable=false",
        "offsets.topic.replication.factor=1",
        "transaction.state.log.replication.factor=1",
        "transaction.state.log.min.isr=1",
        "share.coordinator.state.topic.replication.factor=1",
        "share.coordinator.state.topic.min.isr=1",
        "group.initial.rebalance.delay.ms=0",
        # retention tests shrink retention per topic; let the cleaner notice within seconds
        "log.retention.check.interval.ms=1000",
        "log.segment.delete.delay.ms=0",
        # and the log cleaner of a compacted topic (tests/support/pipeline.compact_log)
        "log.cleaner.backoff.ms=500",
    ]) + "\n")
    (home / "log4j2.properties").write_text("\n".join([
        "status = warn",
        "appender.out.type = Console",
        "appender.out.name = out",
        "appender.out.layout.type = PatternLayout",
        "appender.out.layout.pattern = [%d] %p %m (%c)%n",
        "rootLogger.level = WARN",
        "rootLogger.appenderRef.out.ref = out",
        "logger.version.name = org.apache.kafka.common.utils.AppInfoParser",
        "logger.version.level = INFO",
    ]) + "\n")
    return props


# JVM options of the services' own JVMs (Kafka's tools and broker, the Iceberg REST
# catalog): C1 only and the serial collector. A broker under the tests' load spent half its
# CPU compiling (C2) and collecting (G1's threads): 10.7 CPU-s against 5.5 for the same
# start, 30 topics and 30,000 messages; the suite on 2 cores is CPU-bound (issue 42)
SERVICE_JVM_OPTIONS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")


def _kafka_java(home: Path, main_class: str) -> list[str]:
    return ["java", "-Xms256m", "-Xmx768m", *SERVICE_JVM_OPTIONS, "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={home / 'log4j2.properties'}",
            "-cp", str(CACHE / "jars" / "kafka" / "*"), main_class]


def _kafka_prepare(env: dict[str, str], home: Path) -> None:
    props = _kafka_properties(env, home)
    if (home / "data" / "meta.properties").exists():
        return
    cluster_id = "-"
    while cluster_id.startswith("-"):  # StorageTool would read a leading '-' as an option
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
    subprocess.run(_kafka_java(home, "kafka.tools.StorageTool")
                   + ["format", "-t", cluster_id, "-c", str(props)],
                   check=True, capture_output=True, cwd=home)


@contextlib.contextmanager
def _quiet_kafka_client():
    """kafka-python logs each refused connection of a probe as an ERROR; a probe expects them."""
    logger = logging.getLogger("kafka")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def _kafka_ready(env: dict[str, str]) -> None:
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaConnectionError, RetriableError

    with _quiet_kafka_client():
        try:
            admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap(env),
                                     request_timeout_ms=3000)
        except (KafkaConnectionError, RetriableError) as exc:
            raise NotReady(repr(exc)) from exc
        try:
            admin.list_topics()
        except (KafkaConnectionError, RetriableError) as exc:
            raise NotReady(repr(exc)) from exc
        finally:
            admin.close()


def generated(env: dict[str, str], *names: str) -> tuple[str, ...]:
    """Credentials scripts/install generates into .cache/local.env."""
    missing = [name for name in names if name not in env]
    if missing:
        raise ServiceError(f"{', '.join(missing)} not set: run scripts/install (it writes "
                           ".cache/local.env) or export it")
    return tuple(env[name] for name in names)


def kafka_bootstrap(env: dict[str, str]) -> str:
    return f"127.0.0.1:{env['KAFKA_ARCHIVE_KAFKA_PORT']}"


def kafka_sasl_bootstrap(env: dict[str, str]) -> str:
    """The SASL_PLAINTEXT listener (SCRAM-SHA-512) of the same broker."""
    return f"127.0.0.1:{env['KAFKA_ARCHIVE_KAFKA_SASL_PORT']}"


def kafka_sasl_credentials(env: dict[str, str]) -> tuple[str, str]:
    return generated(env, "KAFKA_ARCHIVE_KAFKA_USER", "KAFKA_ARCHIVE_KAFKA_PASSWORD")


def _kafka_sasl_login(env: dict[str, str]) -> bool:
    """Whether our SCRAM user can log in on the SASL listener."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    user, password = kafka_sasl_credentials(env)
    try:
        with _quiet_kafka_client():
            admin = KafkaAdminClient(bootstrap_servers=kafka_sasl_bootstrap(env),
                                     security_protocol="SASL_PLAINTEXT",
                                     sasl_mechanism="SCRAM-SHA-512", sasl_plain_username=user,
                                     sasl_plain_password=password, request_timeout_ms=3000,
                                     bootstrap_timeout_ms=3000)
    except KafkaError:
        return False
    admin.close()
    return True


def _kafka_scram_user(env: dict[str, str]) -> None:
    """Create the SCRAM user of .cache/local.env (or reset its password) unless it can
    log in already; through the plain listener, with Kafka's admin API."""
    if _kafka_sasl_login(env):
        return
    from kafka import KafkaAdminClient
    from kafka.admin import UserScramCredentialUpsertion

    user, password = kafka_sasl_credentials(env)
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap(env))
    try:
        errors = admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion(user, "SCRAM-SHA-512", password, iterations=8192)])
    finally:
        admin.close()
    if errors.get(user):
        raise ServiceError(f"creating the SCRAM user {user} failed: {errors[user]}")
    deadline = time.monotonic() + START_TIMEOUT_S  # the broker applies it from its metadata log
    while not _kafka_sasl_login(env):
        if time.monotonic() > deadline:
            raise ServiceError(f"SCRAM user {user} still cannot log in on "
                               f"{kafka_sasl_bootstrap(env)} after {START_TIMEOUT_S}s")
        time.sleep(0.25)


KAFKA = Service(
    name="kafka",
    prepare=_kafka_prepare,
    command=lambda env, home: _kafka_java(home, "kafka.Kafka") + [str(home / "server.properties")],
    ready=_kafka_ready,
    after_ready=_kafka_scram_user,
)


# --- S3: MinIO, single node single drive -------------------------------------------------

def s3_endpoint(env: dict[str, str]) -> str:
    return f"https://127.0.0.1:{env['KAFKA_ARCHIVE_S3_PORT']}"


# HTTPS as AWS serves S3: botocore then sends a payload's checksum and no SHA-256 of it.
# scripts/install makes the local CA once and signs the server's certificate with it
TLS_DIR = CACHE / "tls"
S3_CERTS_DIR = TLS_DIR / "s3"  # MinIO's --certs-dir: public.crt, private.key
LOCAL_CA = TLS_DIR / "ca.crt"
TRUSTED_CAS = TLS_DIR / "trusted.pem"  # the system's CAs and the local one
JVM_TRUSTSTORE = TLS_DIR / "truststore.p12"


def trust_env() -> dict[str, str]:
    """The usual settings that make clients trust the local CA: boto3's (AWS_CA_BUNDLE: the
    local CA alone, since boto3 reaches only the local S3 here, and it loads the bundle
    again for every new connection: the system's ~150 CAs took 6% of a job's Python CPU),
    OpenSSL's (SSL_CERT_FILE: Python's ssl, pyarrow's S3 through pyiceberg; the system's
    CAs too, for any other HTTPS)."""
    if not TRUSTED_CAS.is_file():
        raise ServiceError(f"no {TRUSTED_CAS}: run scripts/install")
    return {"AWS_CA_BUNDLE": str(LOCAL_CA), "SSL_CERT_FILE": str(TRUSTED_CAS)}


def jvm_trust_options() -> list[str]:
    """A JVM's options to trust the local CA (Iceberg's S3FileIO in Java)."""
    return [f"-Djavax.net.ssl.trustStore={JVM_TRUSTSTORE}", "-Djavax.net.ssl.trustStoreType=PKCS12"]


def _s3_credentials(env: dict[str, str]) -> tuple[str, str]:
    return generated(env, "KAFKA_ARCHIVE_S3_ACCESS_KEY", "KAFKA_ARCHIVE_S3_SECRET_KEY")


def s3_client(env: dict[str, str], config=None):
    """A boto3 client of the local S3 server (config: a botocore Config)."""
    import boto3

    key, secret = _s3_credentials(env)
    return boto3.client("s3", endpoint_url=s3_endpoint(env), aws_access_key_id=key,
                        aws_secret_access_key=secret, region_name="us-east-1", config=config,
                        verify=trust_env()["AWS_CA_BUNDLE"])


def _s3_ready(env: dict[str, str]) -> None:
    trusting = ssl.create_default_context(cafile=trust_env()["SSL_CERT_FILE"])
    with urllib.request.urlopen(f"{s3_endpoint(env)}/minio/health/ready", timeout=2,
                                context=trusting) as r:
        if r.status != 200:
            raise NotReady(f"health check answered {r.status}")


def _s3_create_bucket(env: dict[str, str]) -> None:
    client = s3_client(env)
    bucket = env["KAFKA_ARCHIVE_S3_BUCKET"]
    if bucket not in {b["Name"] for b in client.list_buckets().get("Buckets", [])}:
        client.create_bucket(Bucket=bucket)


def _s3_process_env(env: dict[str, str]) -> dict[str, str]:
    key, secret = _s3_credentials(env)
    return {"MINIO_ROOT_USER": key, "MINIO_ROOT_PASSWORD": secret,
            "MINIO_BROWSER": "off", "MINIO_UPDATE": "off", "MINIO_SCANNER_SPEED": "slowest"}


S3 = Service(
    name="s3",
    command=lambda env, home: [
        str(CACHE / "bin" / "minio"), "server", "--quiet", "--certs-dir", str(S3_CERTS_DIR),
        "--address", f"127.0.0.1:{env['KAFKA_ARCHIVE_S3_PORT']}",
        "--console-address", f"127.0.0.1:{int(env['KAFKA_ARCHIVE_S3_PORT']) + 1}",
        str(home / "data")],
    ready=_s3_ready,
    after_ready=_s3_create_bucket,
    process_env=_s3_process_env,
)


# --- SMTP: aiosmtpd capturing every message to a file ------------------------------------

def smtp_maildir() -> Path:
    return SERVICES_DIR / "smtp" / "mail"


def _smtp_ready(env: dict[str, str]) -> None:
    with smtplib.SMTP("127.0.0.1", int(env["KAFKA_ARCHIVE_SMTP_PORT"]), timeout=2) as smtp:
        smtp.noop()


SMTP = Service(
    name="smtp",
    command=lambda env, home: [
        sys.executable, str(Path(__file__).with_name("smtp_capture.py")),
        "--port", env["KAFKA_ARCHIVE_SMTP_PORT"], "--maildir", str(smtp_maildir())],
    ready=_smtp_ready,
)


# --- PostgreSQL: Debian's server, a cluster of our own under the service's home ----------
# PostgreSQL refuses to run as root: as root, the cluster belongs to the `postgres` user
# the Debian package makes, and the server runs as that user.

POSTGRES_USER = "kafka_archive"
POSTGRES_DATABASES = ("iceberg", "airflow")  # Iceberg's SQL catalog; the airflow service's


def postgres_url(env: dict[str, str], database: str, driver: str = "postgresql+psycopg2") -> str:
    """A SQLAlchemy URL of a local database (pyiceberg's SqlCatalog takes one)."""
    (password,) = generated(env, "KAFKA_ARCHIVE_POSTGRES_PASSWORD")
    return (f"{driver}://{POSTGRES_USER}:{password}@127.0.0.1:"
            f"{env['KAFKA_ARCHIVE_POSTGRES_PORT']}/{database}")


def airflow_on_postgres() -> bool:
    """Whether the Airflow service keeps its metadata on the local PostgreSQL: chosen by
    who starts it, never by what happens to be installed. The tests do
    (KAFKA_ARCHIVE_AIRFLOW_DB=postgres, tests/conftest.py: the LocalExecutor stack as
    deployments run it); the demo and a shell default to SQLite in the service's home."""
    return os.environ.get("KAFKA_ARCHIVE_AIRFLOW_DB", "sqlite") == "postgres"


def _postgres_bin(name: str) -> str:
    found = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))
    if not found:
        raise ServiceError("PostgreSQL is not installed: run scripts/install --for-tests "
                           "(Debian's postgresql package)")
    return str(found[-1])


def _as_postgres_owner(command: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


def _postgres_prepare(env: dict[str, str], home: Path) -> None:
    data = home / "data"
    if (data / "PG_VERSION").exists():
        return
    (password,) = generated(env, "KAFKA_ARCHIVE_POSTGRES_PASSWORD")
    data.mkdir(parents=True, exist_ok=True)
    secret = home / "password"
    secret.write_text(password + "\n")
    if os.geteuid() == 0:
        import shutil

        for path in (home, data, secret):
            shutil.chown(path, "postgres", "postgres")
    try:
        subprocess.run(_as_postgres_owner(
            [_postgres_bin("initdb"), "-D", str(data), "-U", POSTGRES_USER, "--pwfile",
             str(secret), "--auth=scram-sha-256", "--encoding=UTF8", "--no-instructions"]),
            check=True, capture_output=True, timeout=120)
    except subprocess.CalledProcessError as exc:
        raise ServiceError(f"initdb failed: {exc.stderr.decode()[-2000:]}") from None
    finally:
        secret.unlink()


def _postgres_connect(env: dict[str, str], database: str = "postgres"):
    import psycopg2

    (password,) = generated(env, "KAFKA_ARCHIVE_POSTGRES_PASSWORD")
    try:
        return psycopg2.connect(host="127.0.0.1", port=int(env["KAFKA_ARCHIVE_POSTGRES_PORT"]),
                                user=POSTGRES_USER, password=password, dbname=database,
                                connect_timeout=2)
    except psycopg2.OperationalError as exc:
        raise NotReady(str(exc)) from None


def _postgres_ready(env: dict[str, str]) -> None:
    _postgres_connect(env).close()


def create_database(env: dict[str, str], *names: str) -> None:
    """Databases of the local PostgreSQL, made unless they exist."""
    connection = _postgres_connect(env)
    connection.autocommit = True  # CREATE DATABASE cannot run in a transaction
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT datname FROM pg_database")
            have = {row[0] for row in cursor.fetchall()}
            for name in names:
                if name not in have:
                    cursor.execute(f'CREATE DATABASE "{name}"')
    finally:
        connection.close()


POSTGRES = Service(
    name="postgres",
    command=lambda env, home: _as_postgres_owner([
        _postgres_bin("postgres"), "-D", str(home / "data"),
        "-p", env["KAFKA_ARCHIVE_POSTGRES_PORT"], "-c", "listen_addresses=127.0.0.1",
        "-c", f"unix_socket_directories={home}", "-c", "fsync=off"]),  # tests' data only
    ready=_postgres_ready,
    prepare=_postgres_prepare,
    after_ready=lambda env: create_database(env, *POSTGRES_DATABASES),
)


# --- Toxiproxy: a TCP proxy that injects faults (resets, latency, cut connections) ------

def toxiproxy_url(env: dict[str, str]) -> str:
    """Toxiproxy's HTTP API; the proxies themselves are made by whoever needs them."""
    return f"http://127.0.0.1:{env['KAFKA_ARCHIVE_TOXIPROXY_PORT']}"


def _toxiproxy_ready(env: dict[str, str]) -> None:
    with urllib.request.urlopen(f"{toxiproxy_url(env)}/version", timeout=2) as r:
        if r.status != 200:
            raise NotReady(f"/version answered {r.status}")


TOXIPROXY = Service(
    name="toxiproxy",
    command=lambda env, home: [str(CACHE / "bin" / "toxiproxy-server"), "-host", "127.0.0.1",
                               "-port", env["KAFKA_ARCHIVE_TOXIPROXY_PORT"]],
    ready=_toxiproxy_ready,
)


# --- statsd_exporter: Prometheus's StatsD receiver, which Airflow's metrics go to ----------

def statsd_metrics_url(env: dict[str, str]) -> str:
    """What Prometheus would scrape: every metric received, tags as labels."""
    return f"http://127.0.0.1:{int(env['KAFKA_ARCHIVE_STATSD_PORT']) + 1}/metrics"


def _statsd_ready(env: dict[str, str]) -> None:
    with urllib.request.urlopen(statsd_metrics_url(env), timeout=2) as r:
        if r.status != 200:
            raise NotReady(f"/metrics answered {r.status}")


STATSD = Service(
    name="statsd",
    command=lambda env, home: [
        str(CACHE / "bin" / "statsd_exporter"), "--log.level=warn",
        f"--statsd.listen-udp=127.0.0.1:{env['KAFKA_ARCHIVE_STATSD_PORT']}",
        f"--statsd.listen-tcp=127.0.0.1:{env['KAFKA_ARCHIVE_STATSD_PORT']}",
        f"--web.listen-address=127.0.0.1:{int(env['KAFKA_ARCHIVE_STATSD_PORT']) + 1}"],
    ready=_statsd_ready,
)


# --- A Schema Registry: Apicurio Registry's Confluent-compatible API -------------------

def schema_registry_url(env: dict[str, str]) -> str:
    """The Confluent-compatible API, what confluent-kafka's SchemaRegistryClient is given."""
    return f"http://127.0.0.1:{env['KAFKA_ARCHIVE_SCHEMA_REGISTRY_PORT']}/apis/ccompat/v7"


def java_home(at_least: int) -> Path:
    """A JDK of this major version or newer under /usr/lib/jvm (the newest): Apicurio 3.3
    needs Java 21, the machines' default is 17."""
    found = []
    for release in Path("/usr/lib/jvm").glob("*/release"):
        match = re.search(r'^JAVA_VERSION="(\d+)', release.read_text(), re.M)
        if match and int(match[1]) >= at_least and (release.parent / "bin" / "java").exists():
            found.append((int(match[1]), release.parent))
    if not found:
        raise ServiceError(f"no Java {at_least} or newer under /usr/lib/jvm (the schema "
                           f"registry needs it): install one, e.g. a Temurin JDK")
    return max(found)[1]


def _schema_registry_ready(env: dict[str, str]) -> None:
    with urllib.request.urlopen(f"{schema_registry_url(env)}/subjects", timeout=2) as r:
        if r.status != 200:
            raise NotReady(f"/subjects answered {r.status}")


def _schema_registry_compatibility(env: dict[str, str]) -> None:
    """BACKWARD, Confluent's default (Apicurio's is NONE): an incompatible schema is refused
    at registration, as producers meet it in production."""
    request = urllib.request.Request(
        f"{schema_registry_url(env)}/config", method="PUT",
        data=json.dumps({"compatibility": "BACKWARD"}).encode(),
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    with urllib.request.urlopen(request, timeout=10) as r:
        if r.status != 200:
            raise ServiceError(f"the schema registry refused BACKWARD compatibility: {r.status}")


SCHEMA_REGISTRY = Service(
    name="schema-registry",
    command=lambda env, home: [
        str(java_home(21) / "bin" / "java"), "-Xmx384m", "-XX:+UseSerialGC",
        "-Dquarkus.http.host=127.0.0.1",
        f"-Dquarkus.http.port={env['KAFKA_ARCHIVE_SCHEMA_REGISTRY_PORT']}",
        "-Dquarkus.management.host=127.0.0.1",  # else 0.0.0.0:9000
        f"-Dquarkus.management.port={int(env['KAFKA_ARCHIVE_SCHEMA_REGISTRY_PORT']) + 1}",
        "-jar", str(CACHE / "schema-registry" / "quarkus-run.jar")],  # in-memory storage
    ready=_schema_registry_ready,
    after_ready=_schema_registry_compatibility,
)


# --- An Iceberg REST catalog: Iceberg's own handlers over a JdbcCatalog (SQLite) ---------

REST_CATALOG_SOURCE = ROOT / "tests" / "support" / "iceberg_rest" / "RestCatalogServer.java"


def iceberg_rest_url(env: dict[str, str]) -> str:
    return f"http://127.0.0.1:{env['KAFKA_ARCHIVE_ICEBERG_REST_PORT']}"


def iceberg_rest_token(env: dict[str, str]) -> str:
    return generated(env, "KAFKA_ARCHIVE_ICEBERG_REST_TOKEN")[0]


def _iceberg_rest_classpath(home: Path) -> str:
    # Iceberg's Spark runtime and AWS bundle (scripts/install --for-tests), with Spark's
    # own jars for what the runtime leaves to Spark (SLF4J, Hadoop's classes)
    return ":".join([str(home / "classes"), str(CACHE / "jars" / "spark-iceberg" / "*"),
                     str(_spark_home() / "jars" / "*")])


def _iceberg_rest_prepare(env: dict[str, str], home: Path) -> None:
    """Compile the server when its source is newer than its classes (javac: ~2 s)."""
    built = home / "classes" / "org" / "apache" / "iceberg" / "rest" / "RestCatalogServer.class"
    if built.exists() and built.stat().st_mtime >= REST_CATALOG_SOURCE.stat().st_mtime:
        return
    subprocess.run(["javac", "-d", str(home / "classes"), "-cp", _iceberg_rest_classpath(home),
                    str(REST_CATALOG_SOURCE)], check=True, capture_output=True)


def _iceberg_rest_ready(env: dict[str, str]) -> None:
    request = urllib.request.Request(f"{iceberg_rest_url(env)}/v1/config", headers={
        "Authorization": f"Bearer {iceberg_rest_token(env)}"})
    with urllib.request.urlopen(request, timeout=2) as r:
        if r.status != 200:
            raise NotReady(f"/v1/config answered {r.status}")


def _iceberg_rest_env(env: dict[str, str]) -> dict[str, str]:
    key, secret = _s3_credentials(env)
    return {"AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret, "AWS_REGION": "us-east-1",
            "ICEBERG_REST_TOKEN": iceberg_rest_token(env)}


ICEBERG_REST = Service(
    name="iceberg-rest",
    command=lambda env, home: [
        "java", *SERVICE_JVM_OPTIONS, *jvm_trust_options(), "-cp", _iceberg_rest_classpath(home),
        "org.apache.iceberg.rest.RestCatalogServer",
        env["KAFKA_ARCHIVE_ICEBERG_REST_PORT"], str(home / "catalog.db"),
        f"s3://{env['KAFKA_ARCHIVE_S3_BUCKET']}", s3_endpoint(env)],
    ready=_iceberg_rest_ready,
    prepare=_iceberg_rest_prepare,
    process_env=_iceberg_rest_env,
    needs=("s3",),
)


# --- Airflow: api-server, scheduler, dag-processor and triggerer -------------------------

def airflow_url(env: dict[str, str]) -> str:
    return f"http://127.0.0.1:{env['KAFKA_ARCHIVE_AIRFLOW_PORT']}"


def airflow_password(env: dict[str, str]) -> str:
    """The password of the Airflow user `admin` (SimpleAuthManager)."""
    return generated(env, "KAFKA_ARCHIVE_AIRFLOW_PASSWORD")[0]


def airflow_config_file() -> Path:
    """The kafka-archive config the running Airflow uses (recorded when it started)."""
    return Path((SERVICES_DIR / "airflow" / "kafka-archive-config").read_text().strip())


def _airflow_process_env(env: dict[str, str]) -> dict[str, str]:
    home = SERVICES_DIR / "airflow"
    url = airflow_url(env)
    [jwt_secret] = generated(env, "KAFKA_ARCHIVE_AIRFLOW_JWT_SECRET")
    return {
        **client_env(env, home),
        "KAFKA_ARCHIVE_CONFIG": env.get("KAFKA_ARCHIVE_CONFIG",
                                        str(ROOT / "config" / "kafka-archive.yaml")),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": airflow_database(env),
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": "4",
        "AIRFLOW__CORE__AUTH_MANAGER":
            "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{AIRFLOW_USER}:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
        # one secret for every component: the scheduler signs task tokens the API checks
        "AIRFLOW__API_AUTH__JWT_SECRET": jwt_secret,
        "AIRFLOW__API__SECRET_KEY": jwt_secret,
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": env["KAFKA_ARCHIVE_AIRFLOW_PORT"],
        # the log servers of the scheduler's tasks and the triggerer: beside the API's port,
        # so two checkouts' Airflows can run side by side
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(int(env["KAFKA_ARCHIVE_AIRFLOW_PORT"]) + 1),
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(int(env["KAFKA_ARCHIVE_AIRFLOW_PORT"]) + 2),
        "AIRFLOW__API__BASE_URL": url,
        "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{url}/execution/",
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
        # fast enough for tests: new DAG files found within 10 s, heartbeats every 2 s; a
        # file parsed again every 5 minutes only (each parse costs ~0.5 s of CPU, ~10% of a
        # core at 10 s): a test that changes the config asks for a parse (REST parseDagFile)
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "10",
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "300",
        "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
        "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
        "AIRFLOW__SCHEDULER__JOB_HEARTBEAT_SEC": "2",
        "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "2",
        "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
        # Airflow's metrics, ours among them, with tags (InfluxDB's way, which statsd_exporter
        # reads as labels) to the statsd service: lost while it is not running, as UDP is
        "AIRFLOW__METRICS__STATSD_ON": "True",
        "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
        "AIRFLOW__METRICS__STATSD_PORT": env["KAFKA_ARCHIVE_STATSD_PORT"],
        "AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED": "True",
        # the repo's DAGs, and the tests' own downstream DAGs (tests/dags) beside them
        "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps([
            {"name": "dags-folder", "classpath": LOCAL_BUNDLE, "kwargs": {}},
            {"name": "test-dags", "classpath": LOCAL_BUNDLE,
             "kwargs": {"path": str(ROOT / "tests" / "dags")}}]),
    }


LOCAL_BUNDLE = "airflow.dag_processing.bundles.local.LocalDagBundle"


def _airflow_prepare(env: dict[str, str], home: Path) -> None:
    if airflow_on_postgres():  # the database, unless it exists (PostgreSQL started elsewhere)
        create_database(env, "airflow")
    process_env = _airflow_process_env(env)
    (home / "kafka-archive-config").write_text(process_env["KAFKA_ARCHIVE_CONFIG"] + "\n")
    passwords = home / "passwords.json"  # SimpleAuthManager's file, kept in step with local.env
    passwords.touch(mode=0o600)
    passwords.write_text(json.dumps({AIRFLOW_USER: airflow_password(env)}) + "\n")
    result = subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
                            env={**os.environ, **process_env}, cwd=home, capture_output=True,
                            text=True)
    (home / "migrate.log").write_text(result.stdout + result.stderr)
    if result.returncode != 0:
        raise ServiceError(f"airflow db migrate exited {result.returncode}; see "
                           f"{home / 'migrate.log'}:\n{_tail(home / 'migrate.log')}")


def _airflow_ready(env: dict[str, str]) -> None:
    with urllib.request.urlopen(f"{airflow_url(env)}/api/v2/monitor/health", timeout=5) as r:
        health = json.load(r)
    components = ("metadatabase", "scheduler", "triggerer", "dag_processor")
    unhealthy = {c: (health.get(c) or {}).get("status") for c in components
                 if (health.get(c) or {}).get("status") != "healthy"}
    if unhealthy:
        raise NotReady(f"not healthy yet: {unhealthy}")


def run_airflow_components() -> int:
    """The airflow service's main process: runs the four components, each logging to
    components/<name>.log. When one ends, it ends the others (half an Airflow is not a
    running one), so the pid file speaks for all of them."""
    airflow = str(Path(sys.executable).parent / "airflow")
    logs = SERVICES_DIR / "airflow" / "components"
    logs.mkdir(parents=True, exist_ok=True)
    procs = {}
    for name, args in AIRFLOW_COMPONENTS.items():
        with open(logs / f"{name}.log", "ab") as log:
            procs[name] = subprocess.Popen([airflow, name, *args], stdin=subprocess.DEVNULL,
                                           stdout=log, stderr=subprocess.STDOUT)
    stopping = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.append(signum))
    while not stopping and all(p.poll() is None for p in procs.values()):
        time.sleep(0.5)
    if not stopping:  # a component died: say which, then end the rest
        for name, proc in procs.items():
            if proc.poll() is not None:
                print(f"airflow {name} exited {proc.returncode}; last lines of "
                      f"{logs / name}.log:\n{_tail(logs / f'{name}.log')}", flush=True)
            else:
                proc.terminate()
    # on stop, every process of the group already has its SIGTERM
    deadline = time.monotonic() + STOP_TIMEOUT_S - 5
    for proc in procs.values():
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
    return 0 if stopping else 1


AIRFLOW = Service(
    name="airflow",
    needs=("postgres",) if airflow_on_postgres() else (),  # airflow_database
    prepare=_airflow_prepare,
    command=lambda env, home: [sys.executable, str(Path(__file__).resolve()), "run-airflow"],
    ready=_airflow_ready,
    process_env=_airflow_process_env,
    start_timeout_s=240,
)

# --- Spark: a standalone cluster of pyspark's own distribution, a master and two workers --

SPARK_WORKERS = 2
SPARK_WORKER_MEMORY = "1g"  # one executor of Spark's default 1g each
# what workers (and so executors) may inherit: no AWS_*, no Airflow connection, no PYTHONPATH
_SPARK_INHERITED = ("PATH", "HOME", "USER", "LANG", "LC_ALL", "TZ", "JAVA_HOME", "TMPDIR")


def spark_master_url(env: dict[str, str]) -> str:
    return f"spark://127.0.0.1:{env['KAFKA_ARCHIVE_SPARK_MASTER_PORT']}"


def spark_master_ui(env: dict[str, str]) -> str:
    return f"http://127.0.0.1:{int(env['KAFKA_ARCHIVE_SPARK_MASTER_PORT']) + 1}"


def spark_worker_ports(env: dict[str, str], n: int) -> tuple[int, int]:
    """(port, web UI port) of worker n (1-based)."""
    port = int(env["KAFKA_ARCHIVE_SPARK_WORKER_PORT"]) + 2 * (n - 1)
    return port, port + 1


def executor_python() -> Path:
    """The executors' interpreter: scripts/install's small venv without the project."""
    return CACHE / "executor-venv" / "bin" / "python"


def spark_cluster_conf(env: dict[str, str]) -> dict[str, str]:
    """Spark conf a job needs on this cluster: its executors' Python (Spark takes the
    executors' interpreter from the driver's settings, not from the workers)."""
    return {"spark.pyspark.python": str(executor_python())}


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _spark_process_env(home: Path) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if k in _SPARK_INHERITED},
            "SPARK_HOME": str(_spark_home()),
            "SPARK_CONF_DIR": str(home / "conf"),   # empty: no stray spark-defaults.conf
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOCAL_DIRS": str(home / "local"),  # executors' scratch space (slice files)
            "SPARK_WORKER_DIR": str(home / "work"),  # executors' logs, shipped files
            "SPARK_DAEMON_MEMORY": "256m",
            # finished applications' folders (their copies of the jars) go after a day
            "SPARK_WORKER_OPTS": "-Dspark.worker.cleanup.enabled=true "
                                 "-Dspark.worker.cleanup.appDataTtl=86400",
            "PYSPARK_PYTHON": str(executor_python())}


def _spark_prepare(env: dict[str, str], home: Path) -> None:
    for sub in ("conf", "local", "work"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    if not executor_python().exists():
        raise ServiceError(f"{executor_python()} is missing: run scripts/install")


def _spark_json(url: str) -> dict:
    with urllib.request.urlopen(f"{url}/json/", timeout=5) as r:
        return json.load(r)


def _spark_master_ready(env: dict[str, str]) -> None:
    if (status := _spark_json(spark_master_ui(env)).get("status")) != "ALIVE":
        raise NotReady(f"master status {status}")


def spark_alive_workers(env: dict[str, str]) -> dict[int, dict]:
    """The master's live workers, by port."""
    return {w["port"]: w for w in _spark_json(spark_master_ui(env)).get("workers", [])
            if w.get("state") == "ALIVE"}


def _spark_worker(n: int) -> Service:
    def command(env: dict[str, str], home: Path) -> list[str]:
        port, ui = spark_worker_ports(env, n)
        return [str(_spark_home() / "bin" / "spark-class"), "org.apache.spark.deploy.worker.Worker",
                spark_master_url(env), "--host", "127.0.0.1", "--port", str(port),
                "--webui-port", str(ui), "--cores", "1", "--memory", SPARK_WORKER_MEMORY,
                "--work-dir", str(home / "work")]

    def ready(env: dict[str, str]) -> None:
        if spark_worker_ports(env, n)[0] not in spark_alive_workers(env):
            raise NotReady(f"worker {n} not registered with the master yet")

    return Service(name=f"spark-worker-{n}", command=command, ready=ready, prepare=_spark_prepare,
                   process_env=lambda env: _spark_process_env(SERVICES_DIR / f"spark-worker-{n}"),
                   inherit_env=False)


SPARK_MASTER = Service(
    name="spark-master",
    command=lambda env, home: [
        str(_spark_home() / "bin" / "spark-class"), "org.apache.spark.deploy.master.Master",
        "--host", "127.0.0.1", "--port", env["KAFKA_ARCHIVE_SPARK_MASTER_PORT"],
        "--webui-port", str(int(env["KAFKA_ARCHIVE_SPARK_MASTER_PORT"]) + 1)],
    ready=_spark_master_ready,
    prepare=_spark_prepare,
    process_env=lambda env: _spark_process_env(SERVICES_DIR / "spark-master"),
    inherit_env=False,
)
SPARK_SERVICES = (SPARK_MASTER, *(_spark_worker(n) for n in range(1, SPARK_WORKERS + 1)))

# --- Spark Connect: pyspark's own server, the archive jobs' executors --------------------
# `spark-connect` on local[2] (the demo's and the tests'); `spark-connect-cluster` on the
# standalone cluster (`start spark spark-connect-cluster`), with its web UI and an event
# log, as a deployment's server has them

def spark_connect_url(env: dict[str, str], cluster: bool = False) -> str:
    return f"sc://127.0.0.1:{_spark_connect_port(env, cluster)}"


def _spark_connect_port(env: dict[str, str], cluster: bool) -> int:
    return int(env["KAFKA_ARCHIVE_SPARK_CONNECT_PORT"]) + (1 if cluster else 0)


def spark_connect_cluster_ui(env: dict[str, str]) -> str:
    return f"http://127.0.0.1:{_spark_connect_port(env, True) + 1}"


def spark_connect_events() -> Path:
    """The cluster server's event log folder."""
    return SERVICES_DIR / "spark-connect-cluster" / "events"


def _spark_connect_env(env: dict[str, str]) -> dict[str, str]:
    """The local server's environment: its Python workers on the project's venv
    (scripts/install without --for-tests has no executor venv), and the local S3's
    credentials as the server's own (a shared server's executors use theirs: an instance
    profile, IRSA), never a client's."""
    key, secret = _s3_credentials(env)
    return {**_spark_process_env(SERVICES_DIR / "spark-connect"), **trust_env(),
            "PYSPARK_PYTHON": str(ROOT / ".venv" / "bin" / "python"),
            "AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret,
            "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL_S3": s3_endpoint(env),
            **_SPARK_CONNECT_MEMORY}


# Spark's launcher gives its servers the daemons' heap: the driver's (on local[2] with the
# executors in it)
_SPARK_CONNECT_MEMORY = {"SPARK_DAEMON_MEMORY": "1g"}


def _spark_connect_cluster_prepare(env: dict[str, str], home: Path) -> None:
    """The cluster's executors get the local S3's credentials from the server's
    spark-defaults.conf (readable by its owner alone), as a deployment keeps them; Spark
    shows them redacted. The server process itself has none: it writes nothing to S3."""
    _spark_prepare(env, home)
    (home / "events").mkdir(exist_ok=True)
    key, secret = _s3_credentials(env)
    executor_env = {"AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret,
                    "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL_S3": s3_endpoint(env),
                    **trust_env()}
    defaults = home / "conf" / "spark-defaults.conf"
    defaults.touch(mode=0o600)
    defaults.chmod(0o600)
    defaults.write_text("".join(f"spark.executorEnv.{k} {v}\n" for k, v in executor_env.items()))


def _spark_connect_ready(cluster: bool) -> Callable[[dict[str, str]], None]:
    def ready(env: dict[str, str]) -> None:
        """Its gRPC server takes a channel (an HTTP/2 connection, not only an open port)."""
        import grpc

        with grpc.insecure_channel(f"127.0.0.1:{_spark_connect_port(env, cluster)}") as channel:
            try:
                grpc.channel_ready_future(channel).result(timeout=2)
            except grpc.FutureTimeoutError:
                raise NotReady("the Spark Connect server takes no gRPC channel yet") from None
    return ready


def _spark_connect_command(cluster: bool) -> Callable[[dict[str, str], Path], list[str]]:
    def command(env: dict[str, str], home: Path) -> list[str]:
        from kafka_archive.spark import REDACTION_REGEX

        conf = {"spark.connect.grpc.binding.address": "127.0.0.1",
                "spark.connect.grpc.binding.port": str(_spark_connect_port(env, cluster)),
                "spark.log.level": "WARN", "spark.redaction.regex": REDACTION_REGEX}
        if cluster:
            conf |= {**spark_cluster_conf(env), "spark.ui.port": str(_spark_connect_port(env, True) + 1),
                     "spark.eventLog.enabled": "true", "spark.eventLog.compress": "false",
                     "spark.eventLog.dir": f"file://{home / 'events'}"}
        else:
            conf["spark.ui.enabled"] = "false"
        return [str(_spark_home() / "bin" / "spark-submit"),
                "--master", spark_master_url(env) if cluster else "local[2]",
                "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
                "--name", "kafka-archive-connect",
                *(arg for k, v in conf.items() for arg in ("--conf", f"{k}={v}")),
                "--driver-java-options", " ".join(SERVICE_JVM_OPTIONS), "spark-internal"]
    return command


SPARK_CONNECT = Service(
    name="spark-connect",
    command=_spark_connect_command(cluster=False),
    ready=_spark_connect_ready(cluster=False),
    prepare=lambda env, home: [(home / sub).mkdir(parents=True, exist_ok=True)
                               for sub in ("conf", "local", "work")],
    process_env=_spark_connect_env,
    inherit_env=False,
)
SPARK_CONNECT_CLUSTER = Service(
    name="spark-connect-cluster",
    command=_spark_connect_command(cluster=True),
    ready=_spark_connect_ready(cluster=True),
    prepare=_spark_connect_cluster_prepare,
    process_env=lambda env: {**_spark_process_env(SERVICES_DIR / "spark-connect-cluster"),
                             **_SPARK_CONNECT_MEMORY},
    inherit_env=False,
    needs=("spark-master",),
)

SERVICES = {s.name: s for s in (KAFKA, S3, SMTP, TOXIPROXY, STATSD, POSTGRES, ICEBERG_REST,
                                SCHEMA_REGISTRY, AIRFLOW,
                                *SPARK_SERVICES, SPARK_CONNECT,
                                SPARK_CONNECT_CLUSTER)}
# what `start` without names starts: with PostgreSQL where it holds Airflow's database
DEFAULT_SERVICES = ("kafka", "s3", "smtp", "spark-connect",
                    *(("postgres",) if airflow_on_postgres() else ()))
ALIASES = {"spark": [s.name for s in SPARK_SERVICES]}  # `start spark`: master, then workers


def shell_env(env: dict[str, str]) -> dict[str, str]:
    """`env`'s variables: the CLI, `airflow dags test` and the demo use the metadata DB of
    the Airflow service (`start airflow`), and their mails link to its UI, so a run they
    make is one the running UI shows."""
    return {**client_env(env, SERVICES_DIR / "airflow"),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": airflow_database(env),
            "AIRFLOW__API__BASE_URL": airflow_url(env)}


def airflow_database(env: dict[str, str]) -> str:
    """The Airflow service's metadata database: the local PostgreSQL for the tests, as
    deployments and docker-compose.yml have it; SQLite in the service's home for the demo
    (airflow_on_postgres)."""
    if airflow_on_postgres():
        return postgres_url(env, "airflow")
    return f"sqlite:///{SERVICES_DIR / 'airflow' / 'airflow.db'}"


def client_env(env: dict[str, str], airflow_home: Path) -> dict[str, str]:
    """The environment under which Airflow, the kafka-archive CLI and Spark jobs use the
    local services: config references, Airflow connections, a SQLite-backed AIRFLOW_HOME
    with DAGs from dags/ and the library from plugins/."""
    key, secret = _s3_credentials(env)
    s3_conn = {"conn_type": "aws", "login": key, "password": secret,
               "extra": {"endpoint_url": s3_endpoint(env), "region_name": "us-east-1"}}
    smtp_conn = {"conn_type": "smtp", "host": "127.0.0.1", "port": int(env["KAFKA_ARCHIVE_SMTP_PORT"]),
                 "extra": {"disable_tls": True, "disable_ssl": True,
                           "from_email": "kafka-archive@localhost"}}
    # the SASL listener's SCRAM user, for configs that log in with ${KAFKA_ARCHIVE_KAFKA_*}
    # and the local PostgreSQL's, for ${KAFKA_ARCHIVE_POSTGRES_PASSWORD} in a catalog's uri
    kafka_user = {k: env[k] for k in ("KAFKA_ARCHIVE_KAFKA_USER", "KAFKA_ARCHIVE_KAFKA_PASSWORD",
                                      "KAFKA_ARCHIVE_POSTGRES_PASSWORD") if k in env}
    return {
        **kafka_user,
        **trust_env(),
        "KAFKA_ARCHIVE_BOOTSTRAP": kafka_bootstrap(env),
        "KAFKA_ARCHIVE_ROOT": f"s3://{env['KAFKA_ARCHIVE_S3_BUCKET']}/archive",
        "AIRFLOW_CONN_KAFKA_ARCHIVE_S3": json.dumps(s3_conn),
        "AIRFLOW_CONN_KAFKA_ARCHIVE_SMTP": json.dumps(smtp_conn),
        "AIRFLOW_CONN_KAFKA_ARCHIVE_SPARK": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        # the registry (`start schema-registry`) as a deployment keeps it: the URL its host
        "AIRFLOW_CONN_KAFKA_ARCHIVE_SCHEMA_REGISTRY": json.dumps(
            {"conn_type": "http", "host": schema_registry_url(env)}),
        "KAFKA_ARCHIVE_SCHEMA_REGISTRY_URL": schema_registry_url(env),
        "AIRFLOW_CONN_KAFKA_ARCHIVE_SPARK_CONNECT": json.dumps(
            {"conn_type": "spark_connect", "host": "127.0.0.1",
             "port": int(env["KAFKA_ARCHIVE_SPARK_CONNECT_PORT"])}),
        "AIRFLOW_HOME": str(airflow_home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{airflow_home}/airflow.db",
    }


# --- process helpers ---------------------------------------------------------------------

def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended
    except (FileNotFoundError, IndexError):
        return False


def _session_members(sid: int) -> list[int]:
    """Live processes of the session `sid`."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, IndexError, ProcessLookupError):
            continue
        if fields[3] == str(sid) and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def _signal_session(sid: int, sig: int) -> None:
    for pid in _session_members(sid):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def our_processes() -> dict[int, str]:
    """Processes whose command line names this checkout (services, Spark, Airflow), but
    not this process and its ancestors."""
    exclude, pid = set(), os.getpid()
    while pid > 1:
        exclude.add(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (FileNotFoundError, IndexError, ValueError):
            break
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in exclude:
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(ROOT) in cmdline and _alive(int(entry.name)):
            found[int(entry.name)] = cmdline.strip()
    return found


def main(argv: list[str]) -> int:
    if argv == ["run-airflow"]:  # the airflow service's own process, started by `start`
        return run_airflow_components()
    if not argv or argv[0] not in {"start", "stop", "status", "env", "leftovers", "pids"}:
        print(__doc__, file=sys.stderr)
        return 2
    action, names = argv[0], argv[1:]
    env = local_env()
    if action == "env":  # for eval in a shell; holds secrets, so never print it to a log
        for key, value in shell_env(env).items():
            print(f"export {key}={shlex.quote(value)}")
        return 0
    if action == "pids":
        print(json.dumps(sorted(our_processes())))
        return 0
    if action == "leftovers":
        baseline = set()
        if names[:1] == ["--baseline"]:
            baseline = set(json.loads(Path(names[1]).read_text()))
        deadline = time.monotonic() + 15  # a process still exiting is not left running
        while (left := {p: c for p, c in our_processes().items() if p not in baseline}) \
                and time.monotonic() < deadline:
            time.sleep(0.2)
        for pid, cmd in left.items():
            print(f"leftover process {pid}: {cmd[:300]}", file=sys.stderr)
        return 1 if left else 0
    names = [n for name in names for n in ALIASES.get(name, [name])]
    if action == "start":  # what a service needs, before it
        names = list(dict.fromkeys(n for name in names
                                   for n in (*getattr(SERVICES.get(name), "needs", ()), name)))
    unknown = set(names) - set(SERVICES)
    if unknown:
        print(f"unknown service(s): {', '.join(sorted(unknown))}; known: {', '.join(SERVICES)}",
              file=sys.stderr)
        return 2
    default = DEFAULT_SERVICES if action == "start" else SERVICES
    selected = [SERVICES[n] for n in (names or default)]
    if action == "stop":
        selected.reverse()
    for service in selected:
        if action == "start":
            started = service.start(env)
            print(f"{service.name}: {'started' if started else 'already running'} (pid {service.pid()})")
        elif action == "stop":
            print(f"{service.name}: {'stopped' if service.stop() else 'not running'}")
        elif action == "status":
            pid = service.pid()
            print(f"{service.name}: {f'running (pid {pid})' if pid else 'stopped'}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except ServiceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
