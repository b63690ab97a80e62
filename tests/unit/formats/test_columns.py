"""The parsed table shape's columns: what a field's value becomes, or why it cannot."""

from __future__ import annotations

from datetime import date

import pytest

from kafka_archive.formats import columns
from kafka_archive.formats.columns import Misfit, convert, fit, infer

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


@pytest.mark.parametrize("value, kind", [(True, "boolean"), (3, "long"), (2.5, "double"),
                                         ("x", "string"), ({"a": 1}, "string"), ([1], "string"),
                                         (None, None)])
def test_a_new_column_is_typed_by_its_value(value, kind):
    assert infer(value) == kind


@pytest.mark.parametrize("value, kind, held", [
    (3, "double", 3.0), (3, "int", 3), (2 ** 40, "long", 2 ** 40), (True, "boolean", True),
    ({"b": [1, "é"]}, "string", '{"b":[1,"é"]}'), ("2026-01-01T00:00:01Z", "timestamp", T0 + 1000),
    (T0, "timestamp", T0), ("2026-02-03", "date", date(2026, 2, 3))])
def test_values_that_fit_or_widen(value, kind, held):
    assert convert("f", value, kind) == held


@pytest.mark.parametrize("value, kind, why", [
    (2.5, "long", "does not fit column type long"), ("3", "long", "does not fit"),
    (True, "long", "does not fit"), (2 ** 31, "int", "out of range for int"),
    (2 ** 63, "long", "out of range"), (2 ** 60, "double", "loses digits"),
    (3, "string", "does not fit column type string"), ("soon", "timestamp", "not ISO 8601"),
    ("2026-13-01", "date", "not an ISO date"), (1, "boolean", "does not fit")])
def test_values_that_do_not_fit_name_field_value_and_type(value, kind, why):
    with pytest.raises(Misfit, match=why) as caught:
        convert("amount", value, kind)
    assert "'amount'" in str(caught.value)


def test_a_file_widens_its_own_new_column_but_never_a_known_one():
    values, types = fit({"n": 1}, T0, {})
    assert (values, types) == ({"n": 1}, {"n": "long"})
    values, types = fit({"n": 1.5}, T0, types)
    assert (values, types) == ({"n": 1.5}, {"n": "double"})
    with pytest.raises(Misfit):
        fit({"n": 1.5}, T0, {"n": "long"}, frozenset({"n"}))
    with pytest.raises(Misfit):  # text never widens a number
        fit({"n": "x"}, T0, {"n": "long"})


def test_a_misfit_changes_nothing_and_nulls_type_nothing():
    types = {"a": "long"}
    with pytest.raises(Misfit):
        fit({"b": 1.5, "a": "x"}, T0, types, frozenset({"a"}))
    assert types == {"a": "long"}
    assert fit({"c": None}, T0, types) == ({}, {"a": "long"})


def test_the_tables_own_names():
    # the parser's own field is the event_time column; any other use of the names is not
    assert fit({"event_time": "2026-01-01T00:00:00Z", "x": 1}, T0, {})[0] == {"x": 1}
    with pytest.raises(Misfit, match="table's own column event_time"):
        fit({"event_time": "yesterday"}, T0, {})
    with pytest.raises(Misfit, match="table's own column kafka"):
        fit({"kafka": 1}, T0, {})


def test_declared_columns_are_checked():
    columns.check_declared({"amount": "double", "at": "timestamp"})
    with pytest.raises(ValueError, match="unknown type 'money'"):
        columns.check_declared({"amount": "money"})
    with pytest.raises(ValueError, match="the table's own"):
        columns.check_declared({"kafka": "string"})
