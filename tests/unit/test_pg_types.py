"""Text-format conversion, on output captured from PostgreSQL 15 (data/pgoutput/types.json).

Each fixture case is the server's text output of one value (what pgoutput sends), with the
session settings of ``TEXT_FORMAT_SETTINGS``; the expected values below are written by hand.
Row conversion and the registry are in ``test_pg_types_rows.py``, the text parsers case by
case in ``test_pg_types_text.py``.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest

from connectors.postgres.types import (
    TEXT_FORMAT_SETTINGS,
    TYPE_QUERY,
    TypeEntry,
    TypeRegistry,
    type_name,
)
from tests.unit.pg_types_kit import captured_registry, to_json, types_fixture


def _case(name: str) -> dict[str, Any]:
    return next(case for case in types_fixture()["cases"] if case["name"] == name)


EXPECTED: dict[str, Any] = {
    "int2_min": -32768,
    "int4": 2147483647,
    "int8_max": 9223372036854775807,
    "oid": 4294967295,
    "numeric_big": "12345678901234567890.000000000012345",
    "numeric_scaled": "1234.50",
    "numeric_nan": "NAN",
    "numeric_inf": "POSITIVE_INFINITY",
    "numeric_neg_inf": "NEGATIVE_INFINITY",
    "float4": 1.1,
    "float8": 0.1,
    "float8_exp": 1e300,
    "float8_neg_zero": -0.0,
    "float8_nan": "NaN",
    "float8_inf": "Infinity",
    "float4_neg_inf": "-Infinity",
    "bool_true": True,
    "bool_false": False,
    "text": "héllo wörld",
    "varchar": "abc",
    "bpchar": "ab   ",
    "name": "a_name",
    "char": "z",
    "bytea": base64.b64encode(b"\x00\xff\x10").decode(),
    "bytea_empty": "",
    "date": "2024-02-29Z",
    "date_infinity": "-5877611-06-21Z",  # Debezium's POSITIVE_INFINITY_LOCAL_DATE
    "date_bc": "-0043-03-15Z",  # the proleptic year, as Debezium streams it
    "date_far": "+12345-06-07Z",
    "time": "04:05:06Z",
    "time_frac": "23:59:59.999999Z",
    "timetz": "22:35:06.789Z",
    "timetz_hours": "12:05:06Z",
    "timestamp": "2024-01-02T03:04:05Z",
    "timestamp_frac": "2024-01-02T03:04:05.5Z",
    "timestamp_bc": "-0043-03-15T12:00:00Z",
    "timestamp_infinity": "+294247-01-10T04:00:25.2Z",  # pgjdbc's sentinel, read as µs
    "timestamptz_utc": "2024-01-02T03:04:05.123456Z",
    "timestamptz_kolkata": "2024-01-02T03:04:05.123456Z",
    "timestamptz_new_york": "2024-01-01T02:00:00.000000Z",
    "timestamptz_st_johns": "2024-07-01T00:00:00.500000Z",
    "timestamptz_lmt": "1900-01-01T00:00:00.000000Z",
    "timestamptz_neg_inf": "-infinity",
    "timestamptz_far": "+10000-01-01T00:30:00.000000Z",
    "interval_full": "P1Y2M3DT4H5M6.5S",
    "interval_mixed": "P-1Y-2M3DT-4H-5M-6.25S",
    "interval_neg_day": "P0Y0M-1DT2H3M0S",
    "interval_zero": "P0Y0M0DT0H0M0S",
    "interval_neg_frac": "P0Y0M0DT0H0M-0.5S",
    "interval_days": "P0Y0M3DT0H0M0S",
    "interval_hours": "P0Y0M0DT100H0M0S",
    "uuid": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
    "json": '{"a": [1, 2.5, null], "b": "x"}',
    "jsonb": '{"a": [1, "two"], "b": {"c": true}}',
    "money": "1234.56",
    "inet": "192.168.0.1/24",
    "cidr": "10.0.0.0/8",
    "macaddr": "08:00:2b:01:02:03",
    "int4range": "[1,10)",
    "box": "(1,1),(0,0)",
    "point": "(1.5,-2)",
    "bit": "1010",
    "mood": "happy",
    "posint": 5,
    "int4_arr": [1, 2, None],
    "int4_arr_empty": [],
    "int4_arr_2d": [[1, 2], [3, 4]],
    "int4_arr_bounds": [1, 2],
    "int4_arr_2d_bounds": [[7], [8]],
    "text_arr_quoted": ["a,b", 'c"d', None, "NULL", "", "back\\slash", " sp ", "{x}"],
    "text_arr_unicode": ["héllo", "wörld"],
    "varchar_arr": ["abc", "def"],
    "numeric_arr": ["1.5", None, "NAN"],
    "float8_arr": [1.5, "NaN", "-Infinity"],
    "bool_arr": [True, False, None],
    "box_arr": ["(1,1),(0,0)", "(3,3),(2,2)"],
    "mood_arr": ["sad", "happy"],
    "posint_arr": [1, 2],
    "timestamptz_arr": ["2024-01-01T21:34:05.000000Z", "infinity"],
    "date_arr": ["2024-01-01Z", None],
    "interval_arr": ["P0Y0M1DT0H0M0S", "P0Y0M0DT0H0M-1S"],
    "jsonb_arr": ['{"k": 1}', "[]"],
    "bytea_arr": ["AQ==", None],
    "uuid_arr": ["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"],
    "int4range_arr": ["[1,3)", "empty"],
    "composite_arr": ['(1,"a b")', "(2,)"],
    "bool_arr_2d": [[True], [False]],
}
# json and jsonb are strings holding the server's text (io.debezium.data.Json): every number
# stays exact; compared by their JSON encoding.
EXPECTED_JSON: dict[str, bytes] = {
    "jsonb_big": b'"{\\"big\\": 123456789012345678901234567890, \\"exact\\": 1.10}"',
    "jsonb_precise": b'"[0.1000000000000000055511151231257827, 3]"',
}


def test_every_captured_case_is_expected() -> None:
    names = {case["name"] for case in types_fixture()["cases"]}
    assert names == set(EXPECTED) | set(EXPECTED_JSON)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_converts_captured_text(name: str) -> None:
    case = _case(name)
    value = captured_registry().converter(case["oid"])(case["text"])
    assert value == EXPECTED[name]
    assert type(value) is type(EXPECTED[name])  # 1 == 1.0 == True would hide a wrong type
    to_json(value)  # and the envelope can write it


@pytest.mark.parametrize("name", sorted(EXPECTED_JSON))
def test_json_numbers_stay_exact(name: str) -> None:
    case = _case(name)
    assert to_json(captured_registry().converter(case["oid"])(case["text"])) == EXPECTED_JSON[name]


def test_float_specials_survive_the_envelope() -> None:
    registry = captured_registry()
    row = [registry.converter(701)(text) for text in ("NaN", "Infinity", "-Infinity", "1.5")]
    assert to_json(row) == b'["NaN","Infinity","-Infinity",1.5]'


def test_format_type_of_captured_columns() -> None:
    registry = captured_registry()
    for column in types_fixture()["columns"]:
        assert type_name(column["oid"], column["typmod"], registry) == column["format_type"]


def test_type_name_of_cases_without_modifier() -> None:
    registry = captured_registry()
    for case in types_fixture()["cases"]:
        # format_type(oid, NULL) says 'character' and 'bit'; with -1 'bpchar' and '"bit"', as
        # those names alone would mean char(1) and bit(1).
        if case["oid"] in (1042, 1560):
            assert type_name(case["oid"], -1, registry) in ("bpchar", '"bit"')
            continue
        assert type_name(case["oid"], -1, registry) == case["format_type"], case["name"]


@pytest.mark.parametrize(
    ("oid", "typmod", "expected"),
    [
        (1560, -1, '"bit"'),
        (1562, -1, "bit varying"),
        (1043, -1, "character varying"),
        (1700, (10 << 16 | (-2 & 0x7FF)) + 4, "numeric(10,-2)"),
        (1186, (0x7FFF << 16) | 3, "interval(3)"),
        (1186, ((1 << 3 | 1 << 10 | 1 << 11 | 1 << 12) << 16) | 0xFFFF, "interval day to second"),
        (1266, 0, "time(0) with time zone"),
        (1114, 6, "timestamp(6) without time zone"),
        (1014, 14, "character(10)[]"),
        (99_999, -1, "oid:99999"),
    ],
)
def test_type_name_modifiers(oid: int, typmod: int, expected: str) -> None:
    assert type_name(oid, typmod, TypeRegistry()) == expected


def test_type_name_qualifies_other_schemas() -> None:
    registry = TypeRegistry()
    registry.add(TypeEntry(70_000, "Status", "enum", namespace="billing"))
    registry.add(TypeEntry(70_001, "_Status", "array", element_oid=70_000, namespace="billing"))
    assert type_name(70_001, -1, registry) == 'billing."Status"[]'


def test_captured_catalog_rows() -> None:
    registry = captured_registry()
    kinds = {
        registry.get(row[0]).name: registry.get(row[0]).kind for row in types_fixture()["catalog"]
    }  # type: ignore[union-attr]
    assert kinds == {
        "_mood": "array",
        "mood": "enum",
        "_posint": "array",
        "posint": "domain",
        "_pair": "array",
        "pair": "composite",
    }


def test_session_settings_and_query() -> None:
    assert TEXT_FORMAT_SETTINGS["DateStyle"].startswith("ISO")
    assert TEXT_FORMAT_SETTINGS["IntervalStyle"] == "postgres"
    assert TYPE_QUERY.count("%s") == 1
    assert "typdelim" in TYPE_QUERY and "WITH RECURSIVE" in TYPE_QUERY
