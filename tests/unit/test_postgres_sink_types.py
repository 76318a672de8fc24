"""The PostgreSQL sink's type mapping, value conversion and widening rules, without a server."""

from __future__ import annotations

from decimal import Decimal

import pytest

from cdc.envelope.options import DEBEZIUM_DEFAULTS, READABLE
from sinks.postgres.catalog import deleted_name
from sinks.postgres.plan import MAX_POSITION
from sinks.postgres.types import converter, target_type
from sinks.postgres.widen import is_widening


@pytest.mark.parametrize(
    ("source", "target"),
    [
        ("int4", "integer"),
        ("numeric(12,2)", "numeric(12,2)"),
        ("numeric(5)", "numeric(5,0)"),
        ("numeric", "numeric"),
        ("numeric(5,-2)", "numeric"),  # PostgreSQL 14 takes no negative scale
        ("money", "numeric"),
        ("float(10)", "real"),
        ("character varying(20)", "character varying(20)"),
        ("varchar", "character varying"),
        ("bpchar", "text"),
        ("char(3)", "character(3)"),
        ("timestamp(3) without time zone", "timestamp(3) without time zone"),
        ("timestamptz(3)", "timestamp(3) with time zone"),
        ("timetz", "time with time zone"),
        ("interval day to second(3)", "interval(3)"),
        ("jsonb", "jsonb"),
        ("integer[][]", "integer[]"),
        ("character varying(20)[]", "character varying(20)[]"),
        ("mood", "text"),
        ('"Public"."Mood"[]', "text[]"),
        ("tsrange", "text"),
        ("", "jsonb"),
    ],
)
def test_target_type(source: str, target: str) -> None:
    assert target_type(source) == target
    assert target_type(target) == target  # a column read back maps to itself


@pytest.mark.parametrize(
    ("old", "new", "widens"),
    [
        ("smallint", "integer", True),
        ("integer", "bigint", True),
        ("bigint", "integer", False),
        ("integer", "numeric(10,0)", True),
        ("integer", "numeric(9,0)", False),
        ("numeric(8,2)", "numeric(12,3)", True),
        ("numeric(8,2)", "numeric(8,3)", False),
        ("numeric(8,2)", "numeric", True),
        ("numeric", "numeric(38,10)", False),
        ("real", "double precision", True),
        ("varchar(10)", "varchar(20)", True),
        ("varchar(10)", "text", True),
        ("text", "varchar(10)", False),
        ("char(3)", "text", False),
        ("json", "jsonb", True),
        ("timestamp(3)", "timestamp(6)", True),
        ("timestamp", "timestamptz", False),
        ("integer[]", "bigint[]", True),
        ("integer[]", "integer", False),
        ("mood", "text", True),
    ],
)
def test_is_widening(old: str, new: str, widens: bool) -> None:
    assert is_widening(old, new) is widens


def test_plain_text_passes_through_and_the_rest_is_decoded() -> None:
    numeric = converter("numeric(12,2)", READABLE)
    assert numeric("12.50") == "12.50"
    assert numeric("NAN").is_nan()  # Debezium's name for it, not PostgreSQL's
    precise = converter("numeric(12,2)", DEBEZIUM_DEFAULTS)
    assert precise("BOI=") == Decimal("12.50")  # base64 of the unscaled 1250
    stamp = converter("timestamp with time zone", READABLE)
    assert stamp("2024-03-01T12:00:00.5Z") == "2024-03-01T12:00:00.5Z"
    assert stamp("+294247-01-10T04:00:25.2Z") == "infinity"


def test_intervals_keep_months_days_and_microseconds_apart() -> None:
    interval = converter("interval", READABLE)
    assert interval("P1Y2M-3DT4H5M6.5S") == "14 months -3 days 4:05:06.500000"
    assert interval("PT-1S") == "0 months 0 days -0:00:01.000000"
    assert converter("interval[]", READABLE)(["P1D", None]) == [
        "0 months 1 days 0:00:00.000000",
        None,
    ]


def test_arrays_of_mixed_python_types_become_text() -> None:
    days = converter("date[]", READABLE)(["2024-01-01", "infinity", None])
    assert days == ["2024-01-01", "infinity", None]


def test_texts_of_other_types_and_documents() -> None:
    assert converter("mood", READABLE)("happy") == "happy"
    assert converter("hstore", READABLE)({"a": "1"}) == '{"a":"1"}'
    assert converter("", READABLE)({"x": [1]}) == '{"x":[1]}'


def test_deleted_table_names_stay_within_63_bytes_and_apart() -> None:
    long_a, long_b = "a" * 60 + "x", "a" * 60 + "y"
    assert deleted_name("items") == "items__cdc_deleted"
    assert len(deleted_name(long_a).encode()) <= 63
    assert deleted_name(long_a) != deleted_name(long_b)
    assert MAX_POSITION == 2**63 - 1
