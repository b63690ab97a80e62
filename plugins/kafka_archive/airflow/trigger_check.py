"""Closed trigger params: a manual run of a kafka-archive DAG whose conf names a param the
DAG does not have (a typo: `max_recrods`), or a topic its group does not archive, is
refused with a 400 naming it, before a run exists. Airflow itself takes unknown conf keys
as extra params and topics are only checked when the plan runs, so this is an ASGI
middleware of the api-server (registered by kafka_archive.airflow.plugin) in front of
`POST /api/v2/dags/<dag id>/dagRuns`, which the REST API and the UI's trigger form use.
"""

from __future__ import annotations

import asyncio
import difflib
import json
import logging
import re

from starlette.responses import JSONResponse

from kafka_archive import brokers
from kafka_archive.airflow import connections
from kafka_archive.config import Config
from kafka_archive.monitor.alerts import dag_id as dag_of

log = logging.getLogger(__name__)

_TRIGGER = re.compile(r".*/api/v2/dags/(?P<dag_id>[^/]+)/dagRuns/?")


def unknown_params(dag_id: str, conf: dict, params: list[str]) -> str | None:
    """Why conf names a param the DAG lacks, or None. Pure."""
    unknown = sorted(set(conf) - set(params))
    if not unknown:
        return None
    hints = [f"{u!r} (did you mean {close[0]!r}?)" if (close := difflib.get_close_matches(
        u, params, n=1)) else repr(u) for u in unknown]
    return (f"DAG {dag_id} has no trigger param {', '.join(hints)}; its params are "
            f"{', '.join(sorted(params))}")


def unarchived_topics(cfg: Config, group: str, topics, existing: set[str] | None) -> str | None:
    """Why a run's `topics` names one its group does not archive, or None. existing: the
    topics Kafka has (None: Kafka not asked). Pure."""
    g = cfg.group(group)
    wrong = [t for t in topics if isinstance(t, str)
             and (not g.selects(t) or (existing is not None and t not in existing))]
    if not wrong:
        return None
    return (f"group {group} does not archive topic(s) {', '.join(wrong)}: not in Kafka, or not "
            f"selected by its include {list(g.include)} / exclude {list(g.exclude)}")


def problem(dag_id: str, conf: dict) -> str | None:
    """Why a trigger of dag_id with conf must be refused, or None (also for DAGs that are
    not kafka-archive's)."""
    from kafka_archive.airflow.dags import all_dags

    cfg = connections.load_config()
    dag = all_dags(cfg).get(dag_id)
    if dag is None:
        return None
    if found := unknown_params(dag_id, conf, list(dag.params.keys())):
        return found
    group = next((g for g in cfg.groups if dag_of(g) == dag_id), None)
    if group is None or not isinstance(conf.get("topics"), list) or not conf["topics"]:
        return None
    consumer = None
    try:
        consumer = brokers.consumer(cfg)
        existing = set(consumer.topics())
    except Exception as exc:  # Kafka unreachable: the plan says so, not the trigger
        log.warning("trigger check of %s: Kafka not asked (%s)", dag_id, exc)
        existing = None
    finally:
        if consumer is not None:
            consumer.close()
    return unarchived_topics(cfg, group, conf["topics"], existing)


class ClosedTriggerParams:
    """The ASGI middleware: reads a trigger's body, refuses it (400) or passes it on."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        match = (_TRIGGER.fullmatch(scope.get("path", ""))
                 if scope["type"] == "http" and scope.get("method") == "POST" else None)
        if match is None:
            return await self.app(scope, receive, send)
        messages, more = [], True
        while more:
            message = await receive()
            messages.append(message)
            more = message.get("more_body", False) and message["type"] == "http.request"
        try:
            conf = json.loads(b"".join(m.get("body", b"") for m in messages) or b"{}").get("conf")
        except (ValueError, AttributeError):
            conf = None  # Airflow answers a malformed body itself
        found = None
        if isinstance(conf, dict) and conf:
            try:
                found = await asyncio.to_thread(problem, match["dag_id"], conf)
            except Exception as exc:  # the check must not break triggering
                log.warning("trigger check of %s failed: %r", match["dag_id"], exc)
        if found:
            return await JSONResponse({"detail": found}, 400)(scope, receive, send)

        async def replay():
            return messages.pop(0) if messages else await receive()
        return await self.app(scope, replay, send)
