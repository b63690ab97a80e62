"""The archive DAG's manual-trigger parameters.

Each is a JSON schema: Airflow checks a trigger's conf against it (the REST API answers
400 naming the bad parameter, and creates no run) and the UI renders it as a form field.
`plan_arguments` turns the validated values into the arguments of `tasks.plan`. No
Airflow imports, so the schemas and the conversion are unit-tested as plain data.
"""

from __future__ import annotations

from datetime import datetime, timezone

from kafka_archive.plan.planning import Caps

_ISO_8601 = (r"^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?)?"
             r"(Z|[+-]\d{2}:?\d{2})?$")
_CAP = {"type": ["null", "integer"], "minimum": 1}
# a time: ISO-8601 text (UTC unless it names a zone) or epoch milliseconds
# the topic and optional partition (none: every partition) a rewind or accepted loss names
TOPIC_PARTITION = {"topic": {"type": "string", "minLength": 1},
                   "partition": {"type": ["null", "integer"], "minimum": 0}}
TIME = {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": _ISO_8601}]}

# name -> (default, JSON schema with title and description for the form)
SCHEMAS: dict[str, tuple[object, dict]] = {
    "dry_run": (False, {"type": "boolean", "title": "Dry run",
                        "description": "Only compute and print the plan; nothing is archived "
                                       "and no rewind is applied"}),
    "topics": ([], {
        "type": "array", "items": {"type": "string", "minLength": 1}, "uniqueItems": True,
        "title": "Topics",
        "description": "Archive only these topics, one per line (each must be one the group "
                       "selects); empty: every topic of the group"}),
    "max_records": (None, {**_CAP, "title": "Max records per partition",
                           "description": "This run's cap on messages per partition, instead of "
                                          "the configured max_records; empty: as configured"}),
    "max_bytes": (None, {**_CAP, "title": "Max bytes per partition",
                         "description": "This run's cap on bytes per partition, instead of the "
                                        "configured max_bytes; empty: as configured"}),
    "rewind": ([], {
        "type": "array", "title": "Rewind",
        "description": 'Before planning, move tokens back so this run archives again from '
                       'there, e.g. [{"topic": "orders", "partition": 0, "offset": 1200}] or '
                       '[{"topic": "orders", "timestamp": "2026-05-01T00:00:00Z"}]. Without '
                       'partition: every partition of the topic. Exactly one of offset and '
                       'timestamp (ISO-8601, UTC unless it names a zone; or epoch ms)',
        "items": {
            "type": "object",
            "properties": {
                **TOPIC_PARTITION,
                "offset": {"type": "integer", "minimum": 0},
                "timestamp": TIME,
            },
            "required": ["topic"],
            "additionalProperties": False,
            "oneOf": [{"required": ["offset"]}, {"required": ["timestamp"]}],
        },
    }),
    "accept_loss": ([], {
        "type": "array", "title": "Accept loss",
        "description": 'Before planning, accept data retention deleted before it was archived: '
                       'record the lost range (who, when, why) and move the token past it, e.g. '
                       '[{"topic": "orders", "partition": 0, "reason": "outage, agreed with '
                       'owners"}]. Without partition: every partition of the topic with a gap',
        "items": {
            "type": "object",
            "properties": {
                **TOPIC_PARTITION,
                "reason": {"type": "string", "minLength": 1},
            },
            "required": ["topic", "reason"],
            "additionalProperties": False,
        },
    }),
}


def plan_arguments(params: dict) -> dict:
    """Keyword arguments of `tasks.plan` from a run's validated params (defaults, for a
    scheduled run, give a plan like any other)."""
    return {
        "dry_run": bool(params.get("dry_run")),
        "topics": tuple(params.get("topics") or ()),
        "caps": Caps(max_records=params.get("max_records"), max_bytes=params.get("max_bytes")),
        "rewinds": tuple(rewind_arguments(item) for item in params.get("rewind") or ()),
        "accepting": tuple(params.get("accept_loss") or ()),
    }


def rewind_arguments(item: dict) -> dict:
    """Keyword arguments of `rewinds.rewind` for one validated rewind item."""
    stamp = item.get("timestamp")
    return {"topic": item["topic"], "partition": item.get("partition"),
            "to_offset": item.get("offset"),
            "to_time_ms": None if stamp is None else epoch_ms(stamp)}


def epoch_ms(stamp: int | str) -> int:
    """Epoch milliseconds of an ISO-8601 time (UTC unless it says otherwise) or of an
    epoch-ms number (also as a string)."""
    if isinstance(stamp, int) or str(stamp).isdigit():
        return int(stamp)
    when = datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return int(when.timestamp() * 1000)
