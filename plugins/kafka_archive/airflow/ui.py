"""The group pages in the Airflow UI: a FastAPI app the api-server mounts at /kafka-archive
(registered by kafka_archive.airflow.plugin), shown as a "Kafka archive" tab on every DAG's
page and as a menu entry.

Behind Airflow's own login: every page requires the caller's Airflow session (the UI's
JWT cookie, or a bearer token) through the api-server's own security dependencies, and
read access to the group's DAG (runs); a caller without a session is sent to the login
page. The data comes from kafka_archive.monitor.overview, the CLI's functions.
"""

from __future__ import annotations

from datetime import datetime, timezone
from urllib.parse import urlencode

from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.core_api.security import requires_access_dag, requires_authenticated
from fastapi import Depends, FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
from kafka.errors import KafkaError
from starlette.exceptions import HTTPException

from kafka_archive import brokers
from kafka_archive.airflow import connections
from kafka_archive.errors import ArchiveError
from kafka_archive.audit import incremental
from kafka_archive.monitor import overview, page
from kafka_archive.monitor.alerts import dag_id as dag_of

app = FastAPI(title="kafka-archive", docs_url=None, redoc_url=None, openapi_url=None)

# where the Airflow UI shows the pages: a tab on each DAG's page, an entry in Browse
EXTERNAL_VIEWS = [
    {"name": "Kafka archive", "href": f"{page.PREFIX}/dag/{{DAG_ID}}", "destination": "dag",
     "url_route": "kafka-archive-dag"},
    {"name": "Kafka archive", "href": f"{page.PREFIX}/", "destination": "nav",
     "category": "browse", "url_route": "kafka-archive"},
]


@app.exception_handler(HTTPException)
async def _to_login(request: Request, exc: HTTPException):
    """No session (401): the browser goes to Airflow's login and comes back."""
    if exc.status_code == 401:
        from airflow.api_fastapi.app import get_auth_manager

        login = get_auth_manager().get_url_login()
        return RedirectResponse(f"{login}?{urlencode({'next': str(request.url)})}", 303)
    return JSONResponse({"detail": exc.detail}, exc.status_code)


@app.exception_handler(ArchiveError)
async def _unavailable(request: Request, exc: ArchiveError):
    """S3 or a token store failing (classified by the library): a page saying what failed,
    503, instead of a bare 500."""
    return HTMLResponse(page.unavailable(f"{type(exc).__name__}: {exc}"), 503)


def run_state(dag_id: str, run_id: str) -> str | None:
    """Airflow's state of a run ("running", "failed", ...), from the database the
    api-server serves; None when it has no such run."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        state = session.scalar(select(DagRun.state).where(DagRun.dag_id == dag_id,
                                                          DagRun.run_id == run_id))
    return None if state is None else str(state)


def failed_task(dag_id: str, run_id: str) -> tuple[str, int] | None:
    """The run's task that failed first (task id, try number), from Airflow's database."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from airflow.utils.state import TaskInstanceState
    from sqlalchemy import select

    with create_session() as session:
        row = session.execute(
            select(TaskInstance.task_id, TaskInstance.try_number)
            .where(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id,
                   TaskInstance.state == TaskInstanceState.FAILED)
            .order_by(TaskInstance.end_date.nulls_last(), TaskInstance.task_id)).first()
    return None if row is None else (row.task_id, row.try_number or 0)


@app.get("/", response_class=HTMLResponse, dependencies=[Depends(requires_authenticated())])
def index() -> str:
    cfg = connections.load_config()
    storage = connections.storage(cfg.s3_conn_id)
    dag_ids = {g: dag_of(g) for g in cfg.groups}
    airflow = {"run_state": lambda group, run_id: run_state(dag_ids[group], run_id),
               "connect_problem": connections.spark_connect_unreachable}
    consumer = None
    try:  # one metadata call: what each group selects in Kafka now
        consumer = brokers.consumer(cfg)
        return page.index(overview.glance(cfg, storage, consumer, **airflow), dag_ids)
    except (ArchiveError, KafkaError, OSError) as exc:  # the archive's side is still shown
        return page.index(overview.glance(cfg, storage, **airflow), dag_ids,
                          f"{type(exc).__name__}: {exc}")
    finally:
        if consumer is not None:
            consumer.close()


@app.get("/dag/{dag_id}/files/{topic}/{partition}", response_class=HTMLResponse,
         dependencies=[Depends(requires_access_dag("GET", DagAccessEntity.RUN))])
def files_page(dag_id: str, topic: str, partition: int) -> HTMLResponse:
    """One partition's current files (the group page's partition links here)."""
    cfg = connections.load_config()
    group = next((g for g in cfg.groups if dag_of(g) == dag_id), None)
    if group is None:
        return HTMLResponse(page.not_a_group(dag_id, sorted(cfg.groups)), 404)
    return HTMLResponse(page.files_page(overview.partition_files(
        cfg, group, connections.storage(cfg.s3_conn_id), topic, partition), dag_id))


@app.get("/dag/{dag_id}", response_class=HTMLResponse,
         dependencies=[Depends(requires_access_dag("GET", DagAccessEntity.RUN))])
def group_page(dag_id: str) -> HTMLResponse:
    """The page of the group the DAG archives (a plain `def`: FastAPI runs it in a thread,
    so its blocking Kafka and S3 calls do not hold up the api-server)."""
    cfg = connections.load_config()
    group = next((g for g in cfg.groups if dag_of(g) == dag_id), None)
    if dag_id == "kafka_archive_audit":
        storage = connections.storage(cfg.s3_conn_id)
        return HTMLResponse(page.audit_page(
            {g: incremental.alarms(storage, cfg, g) for g in cfg.audit.groups}, sorted(cfg.groups)))
    if group is None:
        return HTMLResponse(page.not_a_group(dag_id, sorted(cfg.groups)))
    consumer = None
    try:
        consumer = brokers.consumer(cfg)
        now_ms = int(datetime.now(timezone.utc).timestamp() * 1000)
        seen = overview.gather(cfg, group, connections.storage(cfg.s3_conn_id),
                               connections.token_store(cfg), consumer, now_ms,
                               run_state=lambda run_id: run_state(dag_id, run_id),
                               failed_task=lambda run_id: failed_task(dag_id, run_id))
    except (ArchiveError, KafkaError, OSError) as exc:
        return HTMLResponse(page.failure(group, f"{type(exc).__name__}: {exc}"), 503)
    finally:
        if consumer is not None:
            consumer.close()
    return HTMLResponse(page.render(seen, f"/dags/{dag_id}"))
