"""Parsing of PostgreSQL's text output, case by case: arrays, intervals, timestamptz offsets,
bytea's escape format and exact JSON numbers. Captured values are in ``test_pg_types.py``.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest

from connectors.postgres.types import ConversionError, TypeRegistry, interval_to_iso, parse_json
from tests.unit.pg_types_kit import to_json


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{{{1,2}},{{3,NULL}}}", [[[1, 2]], [[3, None]]]),
        ('{"1",NULL}', [1, None]),
        ("{{1,2},{3,4}}", [[1, 2], [3, 4]]),
        ("[-1:0][2:2]={{1},{2}}", [[1], [2]]),
    ],
)
def test_int_array_shapes(text: str, expected: list[Any]) -> None:
    assert TypeRegistry().converter(1007)(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"}","{","\\\\",","}', ["}", "{", "\\", ","]),
        ('{{"a b",NULL},{"",c}}', [["a b", None], ["", "c"]]),
        ('{"multi\nline"}', ["multi\nline"]),
        ("{null}", ["null"]),  # only NULL in capitals is a null in output text
    ],
)
def test_text_array_quoting(text: str, expected: list[Any]) -> None:
    assert TypeRegistry().converter(1009)(text) == expected


@pytest.mark.parametrize("text", ["", "{1,2", "1,2", "{1}x", '{"a}', "{{1},2"])
def test_malformed_arrays(text: str) -> None:
    with pytest.raises(ConversionError):
        TypeRegistry().converter(1007)(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1 year", "P1Y"),
        ("-2 mons", "P-2M"),
        ("1 day -00:00:01", "P1DT-1S"),
        ("-1 days", "P-1D"),
        ("00:01:00", "PT1M"),
        ("-12:00:00", "PT-12H"),
        ("2 years 00:00:00.000001", "P2YT0.000001S"),
        ("P1Y2M", "P1Y2M"),  # IntervalStyle iso_8601 passes through
    ],
)
def test_intervals(text: str, expected: str) -> None:
    assert interval_to_iso(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-01-01 00:30:00-01", "2024-01-01T01:30:00.000000Z"),
        ("2024-03-01 01:00:00+02", "2024-02-29T23:00:00.000000Z"),
        ("2000-01-01 00:00:00.000001+14", "1999-12-31T10:00:00.000001Z"),
        ("0001-01-01 00:00:00+00:00:01", "0000-12-31T23:59:59.000000Z"),
        ("0044-03-15 12:00:00+00 BC", "-0043-03-15T12:00:00.000000Z"),
        ("0001-01-01 01:00:00+02 BC", "-0001-12-31T23:00:00.000000Z"),
    ],
)
def test_timestamptz_offsets(text: str, expected: str) -> None:
    assert TypeRegistry().converter(1184)(text) == expected


def test_bytea_escape_format() -> None:
    # bytea_output=escape: octal escapes and a doubled backslash
    assert (
        TypeRegistry().converter(17)("a\\000\\\\\\377") == base64.b64encode(b"a\x00\\\xff").decode()
    )
    with pytest.raises(ConversionError):
        TypeRegistry().converter(17)("\\9")


def test_parse_json_fast_and_exact_paths() -> None:
    assert parse_json('{"a": 1}') == {"a": 1}
    assert parse_json("[1234567890123456]") == [1234567890123456]  # exact in 64 bits
    assert parse_json('["1234567890123456789012"]') == ["1234567890123456789012"]  # a string
    exact = parse_json("[-0.30000000000000004, 0.30000000000000001, 1e-400, 123e30]")
    assert to_json(exact) == b"[-0.30000000000000004,0.30000000000000001,1e-400,1.23e+32]"
    assert to_json(parse_json("[" + "9" * 5000 + "]")) == b"[" + b"9" * 5000 + b"]"
    # Beyond the double range: rejected the same way on both paths.
    for text in ("[1e400]", "[1e400, 1234567890123456789]"):
        with pytest.raises(ValueError, match=r"infinity|out of range"):
            parse_json(text)
