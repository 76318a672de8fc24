"""``cdc verify``'s canonical form, and the DuckDB staging, of values past the ordinary.

BC dates and timestamps, years past 9999 and the infinities in every form a side hands them
over (PostgreSQL's text, ISO-8601 with a signed year as Debezium writes it, DuckDB's read-back),
numeric's special values under Debezium's names, and JSON scalars beside SQL NULL.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from cdc.records.normalize import canonical
from cdc.records.values import numeric_value
from sinks.duckdb.types import conversion

SAME_INSTANTS = [
    ("timestamp", ["0044-03-15 13:45:30.123456 BC", "-0043-03-15T13:45:30.123456Z"]),
    ("timestamp", ["12345-01-01 00:00:00", "+12345-01-01T00:00:00Z"]),
    ("timestamp", ["0001-01-01 00:00:00.5 BC", "0000-01-01T00:00:00.5Z"]),
    (
        "timestamptz",
        ["0044-03-15 10:00:00+00 BC", "0044-03-15 12:00:00+02 BC", "-0043-03-15T10:00:00Z"],
    ),
    ("timestamptz", ["12345-06-30 12:00:00+00", "+12345-06-30T12:00:00Z"]),
    ("timestamptz", ["0001-01-01 00:00:00+05", "0001-12-31 19:00:00+00 BC"]),
    ("date", ["0044-03-15 BC", "-0043-03-15"]),
    ("date", ["12345-01-01", "+12345-01-01Z"]),
    (
        "timestamptz",
        [dt.datetime(2024, 2, 29, 13, 45, 30, tzinfo=dt.UTC), "2024-02-29 15:45:30+02"],
    ),
]


@pytest.mark.parametrize(("kind", "forms"), SAME_INSTANTS)
def test_one_instant_in_every_form_is_one_canonical_value(kind: str, forms: list[object]) -> None:
    assert len({canonical(form, kind) for form in forms}) == 1, [canonical(f, kind) for f in forms]


@pytest.mark.parametrize(
    ("kind", "one", "other"),
    [
        ("timestamp", "0044-03-15 13:45:30.123456 BC", "0044-03-15 13:45:30.123457 BC"),
        ("timestamp", "0044-03-15 13:45:30 BC", "0044-03-15 13:45:30"),  # BC is not AD
        ("timestamptz", "0044-03-15 10:00:00+00 BC", "0044-03-15 10:00:00+01 BC"),
        ("timestamptz", "12345-06-30 12:00:00+00", "12345-06-30 12:00:01+00"),
        ("date", "0044-03-15 BC", "0045-03-15 BC"),
        ("date", "infinity", "-infinity"),
        ("timestamp", "infinity", "9999-12-31 23:59:59.999999"),
    ],
)
def test_different_instants_stay_different(kind: str, one: str, other: str) -> None:
    assert canonical(one, kind) != canonical(other, kind)


def test_the_infinities_stay_themselves() -> None:
    for kind in ("date", "timestamp", "timestamptz"):
        assert canonical("infinity", kind) == "infinity"
        assert canonical("-infinity", kind) == "-infinity"


def test_numeric_special_values_under_every_decimal_mode() -> None:
    for forms, want in [
        (["POSITIVE_INFINITY", "Infinity", Decimal("Infinity")], "infinity"),
        (["NEGATIVE_INFINITY", "-Infinity", Decimal("-Infinity")], "-infinity"),
        (["NAN", "NaN", Decimal("NaN")], "nan"),
    ]:
        assert {canonical(f, "numeric") for f in forms} == {want}
    assert numeric_value("POSITIVE_INFINITY", None) == Decimal("Infinity")
    assert numeric_value("NEGATIVE_INFINITY", None) == Decimal("-Infinity")


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ('"str"', None),
        ("42", 42),
        ("true", True),
        ("null", None),
        ('{"b":1,"a":[1]}', {"a": [1], "b": 1}),
    ],
)
def test_json_scalars_as_text_and_parsed(text: str, parsed: object) -> None:
    assert canonical(text, "jsonb") == canonical(text.encode(), "json")
    if parsed is not None:
        assert canonical(parsed, "jsonb") == canonical(text, "jsonb")


def test_a_json_string_scalar_is_not_parsed_twice() -> None:
    assert canonical('"str"', "jsonb") == '"str"'
    assert canonical("str", "jsonb") != canonical('"str"', "jsonb")  # no JSON: kept, no crash


def test_json_null_is_not_sql_null() -> None:
    assert canonical("null", "jsonb") == "null"
    assert canonical(None, "jsonb") is None


def test_duckdb_stages_far_years_and_bc_in_iso_as_postgresql_text() -> None:
    dates = conversion("DATE").python
    stamps = conversion("TIMESTAMP").python
    instants = conversion("TIMESTAMPTZ").python
    assert dates is not None and stamps is not None and instants is not None
    assert dates(["+12345-01-01Z", "-0043-03-15Z", "-5877611-06-21Z"]) == [
        "12345-01-01",
        "0044-03-15 (BC)",
        "infinity",
    ]
    assert stamps(["+12345-01-01T00:00:00Z"]) == ["12345-01-01 00:00:00"]
    assert instants(["+12345-06-30T12:00:00Z", "-0043-03-15T10:00:00Z"]) == [
        "12345-06-30 12:00:00+00",
        "0044-03-15 (BC) 10:00:00+00",
    ]


def test_duckdb_stages_a_json_column_as_text_so_json_null_stays_a_document() -> None:
    staged = conversion("JSON", "jsonb")
    assert (staged.stage, staged.expr) == ("VARCHAR", "CAST({c} AS JSON)")


def test_a_value_of_a_column_without_a_type_keeps_its_json_type() -> None:
    # A MongoDB field: the number 5, the string "5" and true are three values, so verify finds
    # a sink that turned one into another (as text they were all one).
    values = [5, "5", 5.5, "5.5", True, "True", "true", None, [5], {"a": 5}]
    forms = [canonical(v, "") for v in values]
    assert [type(f) for f in forms] == [type(v) for v in values]
    assert canonical(None, "") is None
    assert len({repr(f) for f in forms}) == len(values)
    assert canonical(b"\x00\xff", "") == "AP8="
