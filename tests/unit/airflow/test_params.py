"""The archive DAG's trigger params: what Airflow accepts or refuses (checked with the
SDK's own ParamsDict, as the API server does) and how values become plan arguments."""

import pytest
from airflow.sdk import Param
from airflow.sdk.definitions.param import ParamsDict

from kafka_archive.airflow.params import SCHEMAS, epoch_ms, plan_arguments
from kafka_archive.plan.planning import Caps


def validated(conf: dict) -> dict:
    params = ParamsDict({name: Param(default, **schema)
                         for name, (default, schema) in SCHEMAS.items()})
    for name, value in conf.items():
        params[name] = value  # assignment validates the value too
    return params.validate()


def test_defaults_make_a_scheduled_run_plan_as_before():
    assert plan_arguments(validated({})) == {"dry_run": False, "topics": (), "caps": Caps(),
                                             "rewinds": (), "accepting": ()}


def test_a_full_manual_trigger_becomes_plan_arguments():
    args = plan_arguments(validated({
        "topics": ["orders", "clicks"], "max_records": 10, "max_bytes": 4096,
        "rewind": [{"topic": "orders", "partition": 2, "offset": 0},
                   {"topic": "clicks", "timestamp": "2026-05-01T00:00:00Z"},
                   {"topic": "clicks", "timestamp": 1_777_593_600_000}]}))
    assert args["topics"] == ("orders", "clicks")
    assert args["caps"] == Caps(max_records=10, max_bytes=4096)
    assert args["rewinds"] == (
        {"topic": "orders", "partition": 2, "to_offset": 0, "to_time_ms": None},
        {"topic": "clicks", "partition": None, "to_offset": None, "to_time_ms": 1_777_593_600_000},
        {"topic": "clicks", "partition": None, "to_offset": None, "to_time_ms": 1_777_593_600_000})


@pytest.mark.parametrize("name, value", [
    ("topics", "orders"),
    ("topics", ["orders", "orders"]),
    ("max_records", 0),
    ("max_bytes", -1),
    ("max_records", "10"),
    ("rewind", [{"topic": "orders", "offset": 1, "timestamp": 5}]),   # both
    ("rewind", [{"topic": "orders"}]),                                # neither
    ("rewind", [{"topic": "orders", "offset": -1}]),
    ("rewind", [{"topic": "orders", "partition": -1, "offset": 0}]),
    ("rewind", [{"topic": "orders", "timestamp": "yesterday"}]),
    ("rewind", [{"offset": 0}]),
    ("rewind", [{"topic": "orders", "offset": 0, "partiton": 1}]),   # a typo is not ignored
])
def test_bad_values_are_refused_naming_the_param(name, value):
    with pytest.raises(Exception, match=rf"Invalid input for param {name}"):
        validated({name: value})


@pytest.mark.parametrize("stamp, ms", [
    (0, 0),
    ("1777593600000", 1_777_593_600_000),
    ("2026-05-01T00:00:00Z", 1_777_593_600_000),
    ("2026-05-01T02:00:00+02:00", 1_777_593_600_000),
    ("2026-05-01", 1_777_593_600_000),          # no zone: UTC
    ("2026-05-01T00:00:00.250Z", 1_777_593_600_250),
])
def test_epoch_ms(stamp, ms):
    assert epoch_ms(stamp) == ms
