"""A column's converter, chosen once for a table (:func:`cdc.records.normalize.converter`), is
:func:`cdc.records.normalize.canonical` for its type: ``cdc verify`` compares by it."""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal
from typing import Any

import pytest

from cdc.records.normalize import canonical, converter
from cdc.records.values import Interval

UTC = dt.UTC
PLUS_TWO = dt.timezone(dt.timedelta(hours=2))
VALUES: list[Any] = [
    None,
    0,
    -7,
    True,
    False,
    1.5,
    float("nan"),
    float("inf"),
    float("-inf"),
    "12",
    "1.50",
    "NaN",
    "-Infinity",
    "POSITIVE_INFINITY",
    "t",
    "text",
    "",
    "infinity",
    "0044-03-15 12:00:00 BC",
    "2024-01-01T10:00:00Z",
    "2024-01-01 10:00:00+02",
    "24:00:00+02",
    "13:45:30.5",
    "P1Y2M3DT4H5M6.5S",
    '{"b": 1, "a": [1, "x", null]}',
    '"str"',
    "null",
    "[1, 2]",
    "not json",
    b"\x00\xffbytes",
    bytearray(b"ba"),
    Decimal("1.500"),
    Decimal("NaN"),
    Decimal("-Infinity"),
    dt.datetime(2024, 1, 1, 10, 0, 0, 123456),
    dt.datetime(2024, 1, 1, 10, 0, tzinfo=PLUS_TWO),
    dt.date(2024, 2, 29),
    dt.time(13, 45, 30),
    dt.time(13, 45, tzinfo=PLUS_TWO),
    dt.timedelta(days=1, seconds=5, microseconds=7),
    Interval(1, 2, 3),
    uuid.UUID("12345678-1234-5678-1234-56781234ABCD"),
    "12345678-1234-5678-1234-56781234ABCD",
    {"b": 1, "a": {"c": [1, 2]}},
    [1, "2", None, [3]],
    [["a", None], ["b", "c"]],
    10**30,
]
TYPES = [
    "",
    "smallint",
    "integer",
    "bigint",
    "oid",
    "double precision",
    "real",
    "numeric(12,2)",
    "decimal",
    "boolean",
    "timestamp with time zone",
    "timestamptz(3)",
    "timestamp without time zone",
    "timestamp",
    "date",
    "time",
    "timetz",
    "time with time zone",
    "interval",
    "json",
    "jsonb",
    "bytea",
    "uuid",
    "text",
    "character varying(20)",
    "USER-DEFINED",
    "integer[]",
    "text[]",
    "jsonb[]",
    "numeric(5,1)[][]",
    "timestamptz[]",
]


def _outcome(convert: Any, value: Any) -> tuple[str, Any]:
    try:
        result = convert(value)
    except Exception as exc:  # the same error, or the same value, both ways
        return "raises", type(exc)
    return "value", (type(result), repr(result))


@pytest.mark.parametrize("type_name", TYPES)
def test_a_columns_converter_is_canonical_for_its_type(type_name: str) -> None:
    convert, values_only = converter(type_name), converter(type_name, nulls=False)
    for value in VALUES:
        expected = _outcome(lambda v: canonical(v, type_name), value)
        assert _outcome(convert, value) == expected, (type_name, value)
        if value is not None:
            assert _outcome(values_only, value) == expected, (type_name, value)


@pytest.mark.parametrize("type_name", ["integer[]", "text[]", "jsonb[]", "numeric(5,1)[][]"])
def test_an_array_columns_converter_reads_array_text_and_lists_alike(type_name: str) -> None:
    convert = converter(type_name)
    for value in (["1", None, "2.50"], [["1"], ["2"]], '["1", null]', "[[1], [2]]", []):
        assert _outcome(convert, value) == _outcome(lambda v: canonical(v, type_name), value)
