"""The archive and replay jobs as Spark Connect clients (a group's `spark_connect`): the
deployment's server session, reattached by an id made from its archive root, a secret
kept under it and the library zip, and each job's operations tagged, so that a retry interrupts what its killed
attempt left running and nothing else. The job itself is the one spark-submit runs
(kafka_archive.spark.mapped); README, "Spark Connect"."""

from __future__ import annotations

import hashlib
import secrets
import uuid
from contextlib import contextmanager
from pathlib import Path

from kafka_archive import layout, spark
from kafka_archive.config import Config
from kafka_archive.errors import TerminalError, TransientError, VersionConflict
from kafka_archive.storage import Storage

# the session setting that says which library zip a Connect session holds as an artifact
LIBRARY_CONF = "spark.kafka_archive.library"
CONNECT_RETRIES = 3  # a Connect call tries this often more (~3 s): a server down is named at once


def connect_session(url: str, name: str):
    """A Spark Connect client session at `url` (sc://host:port/;token=..., as the Spark
    provider's SparkConnectHook builds it) for a deployment's jobs (`name`: its archive
    root). One server session per name and library version, reattached by its id: its
    Python workers stay warm from run to run (and Spark 4.1 ends a session's workers only
    with the server: a session per run would leave ~300 MiB of them behind each time),
    and the library (a session artifact, `pyfile`) is sent only when the session lacks it.
    TransientError naming the server when it cannot be reached; TerminalError when it
    refuses the credentials (a wrong token: retries would only repeat it)."""
    from pyspark.sql.connect.client.retries import DefaultPolicy
    # the Connect client's own builder: pyspark's generic one refuses a remote session in a
    # process with a classic one, and marks the process (SPARK_CONNECT_MODE_ENABLED) so
    # that a spark-submit it starts later cannot make a classic one
    from pyspark.sql.connect.session import SparkSession

    library = spark.library_zip()
    base, _, params = url.partition("/;")
    remote = f"{base.rstrip('/')}/;" + ";".join(
        filter(None, [params, f"session_id={session_id(name, library)}"]))
    session = SparkSession.builder.remote(remote).create()
    session.client.set_retry_policies([DefaultPolicy(max_retries=CONNECT_RETRIES,
                                                     max_backoff=2000)])
    try:
        if session.conf.get(LIBRARY_CONF, None) != library.name:
            session.addArtifacts(str(library), pyfile=True)
            session.conf.set(LIBRARY_CONF, library.name)
    except Exception as exc:  # noqa: BLE001  grpc's and pyspark's own: unreachable, refused
        close_client(session)
        where = base.removeprefix('sc://').rstrip('/')
        if refused := spark.credentials_refused(exc):  # no retry helps: not transient
            raise TerminalError(f"the Spark Connect server at {where} refused this client's "
                                f"credentials ({refused}): check the token of the group's "
                                "Spark Connect connection") from exc
        why = spark.connection_lost(exc) or str(exc).splitlines()[0]  # (grpc's repr: not the text)
        raise TransientError(f"the Spark Connect server at {where} cannot be reached: "
                             f"{why[:300]}") from exc
    return session


def session_id(name: str, library: Path) -> uuid.UUID:
    """The Connect session id of a deployment's jobs (`name`) with one library zip."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"kafka-archive/{name}/{library.name}")


def job_tag(job: str) -> str:
    """The Connect operation tag of a job's every attempt (Spark's tags allow no comma)."""
    return "job-" + hashlib.sha256(job.encode()).hexdigest()[:32]


def close_client(session) -> None:
    """Close a Connect client, its server session kept (warm for the next job)."""
    session.release_session_on_close = False
    session.stop()


def session_name(config: Config, storage: Storage) -> str:
    """A deployment's Connect session name: its archive root (no other deployment's) and
    a secret kept under it, created once. A session id made from the root alone could be
    made by any client of the server (its token is shared): that client could attach to
    the deployment's session, add artifacts to its workers or interrupt its jobs. The
    secret needs the archive root's credentials. Never logged."""
    url = layout.connect_secret(config.archive_root)
    secret = storage.get_or_none(url)
    if secret is None:
        try:
            storage.put_if(url, secrets.token_hex(32).encode(), None)
        except VersionConflict:  # another task created it first: that one it is
            pass
        secret = storage.get_bytes(url)
    return f"{config.archive_root.rstrip('/')}#{secret.decode().strip()}"


@contextmanager
def connected(url: str, config: Config, job: str, storage: Storage):
    """The deployment's Connect session (connect_session, named by session_name) for
    one job: `job` (its plan's URL) tags the job's operations, so that what an earlier
    attempt of the same job (a killed task) left running is interrupted first and cannot
    write beside this one, while other groups' jobs in the session run on. The client is
    closed at the end (close_client)."""
    session = connect_session(url, session_name(config, storage))
    try:
        session.interruptTag(job_tag(job))
        session.addTag(job_tag(job))
        yield session
    finally:
        close_client(session)
