"""Text-format conversion, on output captured from PostgreSQL 15 (data/pgoutput/types.json).

Each fixture case is the server's text output of one value (what pgoutput sends), with the
session settings of ``TEXT_FORMAT_SETTINGS``; the expected values below are written by hand.
"""

from __future__ import annotations

import base64
import json
from functools import cache
from pathlib import Path
from typing import Any

import orjson
import pytest

from cdc.errors import RecordError
from connectors.postgres.pgoutput import UNCHANGED, Insert, Relation, RelationColumn, decode
from connectors.postgres.types import (
    TEXT_FORMAT_SETTINGS,
    TYPE_QUERY,
    ConversionError,
    TypeEntry,
    TypeRegistry,
    interval_to_iso,
    parse_json,
    row_converter,
    type_name,
)

DATA = Path(__file__).parent / "data" / "pgoutput"


@cache
def _types_fixture() -> dict[str, Any]:
    return json.loads((DATA / "types.json").read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def _registry() -> TypeRegistry:
    registry = TypeRegistry()
    registry.add_rows(_types_fixture()["catalog"])
    return registry


def _case(name: str) -> dict[str, Any]:
    return next(case for case in _types_fixture()["cases"] if case["name"] == name)


def _json(value: Any) -> bytes:
    """What the envelope writes for a converted value."""
    return orjson.dumps(value)


EXPECTED: dict[str, Any] = {
    "int2_min": -32768,
    "int4": 2147483647,
    "int8_max": 9223372036854775807,
    "oid": 4294967295,
    "numeric_big": "12345678901234567890.000000000012345",
    "numeric_scaled": "1234.50",
    "numeric_nan": "NaN",
    "numeric_inf": "Infinity",
    "numeric_neg_inf": "-Infinity",
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
    "date": "2024-02-29",
    "date_infinity": "infinity",
    "date_bc": "0044-03-15 BC",
    "date_far": "12345-06-07",
    "time": "04:05:06",
    "time_frac": "23:59:59.999999",
    "timetz": "04:05:06.789+05:30",
    "timetz_hours": "04:05:06-08:00",
    "timestamp": "2024-01-02T03:04:05",
    "timestamp_frac": "2024-01-02T03:04:05.5",
    "timestamp_bc": "0044-03-15 12:00:00 BC",
    "timestamp_infinity": "infinity",
    "timestamptz_utc": "2024-01-02T03:04:05.123456Z",
    "timestamptz_kolkata": "2024-01-02T03:04:05.123456Z",
    "timestamptz_new_york": "2024-01-01T02:00:00Z",
    "timestamptz_st_johns": "2024-07-01T00:00:00.5Z",
    "timestamptz_lmt": "1900-01-01T00:00:00Z",
    "timestamptz_neg_inf": "-infinity",
    "timestamptz_far": "10000-01-01T00:30:00Z",
    "interval_full": "P1Y2M3DT4H5M6.5S",
    "interval_mixed": "P-1Y-2M3DT-4H-5M-6.25S",
    "interval_neg_day": "P-1DT2H3M",
    "interval_zero": "PT0S",
    "interval_neg_frac": "PT-0.5S",
    "interval_days": "P3D",
    "interval_hours": "PT100H",
    "uuid": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
    "json": {"a": [1, 2.5, None], "b": "x"},
    "jsonb": {"a": [1, "two"], "b": {"c": True}},
    "money": "$1,234.56",
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
    "numeric_arr": ["1.5", None, "NaN"],
    "float8_arr": [1.5, "NaN", "-Infinity"],
    "bool_arr": [True, False, None],
    "box_arr": ["(1,1),(0,0)", "(3,3),(2,2)"],
    "mood_arr": ["sad", "happy"],
    "posint_arr": [1, 2],
    "timestamptz_arr": ["2024-01-01T21:34:05Z", "infinity"],
    "date_arr": ["2024-01-01", None],
    "interval_arr": ["P1D", "PT-1S"],
    "jsonb_arr": [{"k": 1}, []],
    "bytea_arr": ["AQ==", None],
    "uuid_arr": ["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"],
    "int4range_arr": ["[1,3)", "empty"],
    "composite_arr": ['(1,"a b")', "(2,)"],
    "bool_arr_2d": [[True], [False]],
}
# Converted to orjson.Fragment to stay exact: compared by their JSON encoding.
EXPECTED_JSON: dict[str, bytes] = {
    "jsonb_big": b'{"big":123456789012345678901234567890,"exact":1.1}',
    "jsonb_precise": b"[0.1000000000000000055511151231257827,3]",
}


def test_every_captured_case_is_expected() -> None:
    names = {case["name"] for case in _types_fixture()["cases"]}
    assert names == set(EXPECTED) | set(EXPECTED_JSON)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_converts_captured_text(name: str) -> None:
    case = _case(name)
    value = _registry().converter(case["oid"])(case["text"])
    assert value == EXPECTED[name]
    assert type(value) is type(EXPECTED[name])  # 1 == 1.0 == True would hide a wrong type
    _json(value)  # and the envelope can write it


@pytest.mark.parametrize("name", sorted(EXPECTED_JSON))
def test_json_numbers_stay_exact(name: str) -> None:
    case = _case(name)
    assert _json(_registry().converter(case["oid"])(case["text"])) == EXPECTED_JSON[name]


def test_float_specials_survive_the_envelope() -> None:
    registry = _registry()
    row = [registry.converter(701)(text) for text in ("NaN", "Infinity", "-Infinity", "1.5")]
    assert _json(row) == b'["NaN","Infinity","-Infinity",1.5]'


def test_format_type_of_captured_columns() -> None:
    registry = _registry()
    for column in _types_fixture()["columns"]:
        assert type_name(column["oid"], column["typmod"], registry) == column["format_type"]


def test_type_name_of_cases_without_modifier() -> None:
    registry = _registry()
    for case in _types_fixture()["cases"]:
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


def _all_types() -> tuple[Relation, list[Insert]]:
    messages = [decode(bytes.fromhex(d)) for _, _, d in _v1_messages()]
    relation = next(m for m in messages if isinstance(m, Relation) and m.name == "all_types")
    inserts = [m for m in messages if isinstance(m, Insert) and m.relation_oid == relation.oid]
    return relation, inserts


@cache
def _v1_messages() -> list[list[Any]]:
    return json.loads((DATA / "v1.json").read_text(encoding="utf-8"))["messages"]  # type: ignore[no-any-return]


def _registry_for_v1() -> TypeRegistry:
    """The v1 capture's own user types: the enum and domain OIDs differ from types.json."""
    messages = [decode(bytes.fromhex(d)) for _, _, d in _v1_messages()]
    relation = next(m for m in messages if isinstance(m, Relation) and m.name == "all_types")
    columns = {c.name: c.type_oid for c in relation.columns}
    registry = TypeRegistry()
    registry.add(TypeEntry(columns["c_mood"], "mood", "enum", namespace="public"))
    registry.add(TypeEntry(columns["c_posint"], "posint", "domain", base_oid=23))
    registry.add(TypeEntry(columns["c_mood_arr"], "_mood", "array", columns["c_mood"]))
    return registry


def test_row_converter_on_a_captured_insert() -> None:
    relation, (first, second) = _all_types()
    convert = row_converter(relation.columns, _registry_for_v1())
    row = convert(first.new)
    assert list(row) == [c.name for c in relation.columns]
    assert row == {
        "id": 1,
        "c_int2": -32768,
        "c_int8": 9223372036854775807,
        "c_float4": 1.5,
        "c_float8": "NaN",
        "c_numeric": "12345678901234567890.123456789",
        "c_numeric_ps": "1234.50",
        "c_bool": True,
        "c_char": "ab   ",
        "c_varchar": "héllo",
        "c_bytea": "AP8Q",
        "c_date": "2024-02-29",
        "c_time": "23:59:59.999999",
        "c_time3": "12:00:00.123",
        "c_timetz": "04:05:06.789+05:30",
        "c_timestamp": "2024-01-02T03:04:05.5",
        "c_timestamptz": "2024-01-01T21:34:05.123456Z",
        "c_timestamptz3": "2024-06-30T23:59:59.999Z",
        "c_interval": "P1Y2M3DT4H5M6.5S",
        "c_interval_ym": "P1Y2M",
        "c_interval_s": "PT1.25S",
        "c_uuid": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        "c_json": {"a": [1, 2.5, None], "b": "x"},
        "c_jsonb": row["c_jsonb"],  # holds a Fragment: checked below
        "c_money": "$1,234.56",
        "c_inet": "192.168.0.1/24",
        "c_cidr": "10.0.0.0/8",
        "c_macaddr": "08:00:2b:01:02:03",
        "c_bit": "1010",
        "c_varbit": "101",
        "c_box": "(1,1),(0,0)",
        "c_int4range": "[1,10)",
        "c_mood": "ok",
        "c_posint": 5,
        "c_int4_arr": [1, 2, None],
        "c_text_arr": ["a,b", 'c"d', None, "NULL", ""],
        "c_int4_2d": [[1, 2], [3, 4]],
        "c_varchar_arr": ["abc", "def"],
        "c_numeric_arr": ["1.5", None],
        "c_box_arr": ["(1,1),(0,0)", "(3,3),(2,2)"],
        "c_mood_arr": ["sad", "happy"],
        "c_timestamptz_arr": ["2024-01-02T03:04:05Z", "infinity"],
        "c_jsonb_arr": [{"k": 1}, []],
        "c_oid": 4294967295,
        "c_name": "a name",
        "c_xml": "<a>x</a>",
        "c_tsvector": "'cat' 'fat'",
        "c_pg_lsn": "16/B374D848",
        "c_point": "(1.5,-2)",
        "c_char1": "z",
    }
    assert _json(row["c_jsonb"]) == b'{"f":0.1,"big":123456789012345678901234567890}'
    nulls = convert(second.new)
    assert nulls["c_float4"] == "-Infinity"
    assert nulls["c_numeric"] == "NaN"
    assert nulls["c_bytea"] == ""
    assert nulls["c_date"] == "infinity"
    assert nulls["c_timestamp"] == "-infinity"
    assert nulls["c_interval"] == "P-1Y-2M3DT-4H-5M-6.25S"
    assert nulls["c_interval_s"] == "PT-0.5S"
    assert nulls["c_json"] is None and nulls["c_jsonb"] == 123
    assert nulls["c_int4range"] == "empty"
    assert nulls["c_int4_2d"] == [[7], [8]]
    assert nulls["c_numeric_arr"] == ["NaN"]
    assert nulls["c_text_arr"] == [] and nulls["c_int4_arr"] == []
    # 32 SQL NULLs, and the json column holds the JSON value null
    assert sum(value is None for value in nulls.values()) == 33


def test_row_converter_passes_unchanged_and_binary_through() -> None:
    columns = (RelationColumn(True, "id", 23, -1), RelationColumn(False, "body", 25, -1))
    columns += (RelationColumn(False, "blob", 17, -1),)
    convert = row_converter(columns, TypeRegistry())
    assert convert(("1", UNCHANGED, b"\x00")) == {"id": 1, "body": UNCHANGED, "blob": b"\x00"}
    assert convert((None, None, None)) == {"id": None, "body": None, "blob": None}


def test_row_converter_names_the_failing_column() -> None:
    columns = (RelationColumn(True, "id", 23, -1), RelationColumn(False, "at", 1184, 3))
    convert = row_converter(columns, TypeRegistry())
    with pytest.raises(ConversionError) as caught:
        convert(("1", "yesterday" * 20))
    error = caught.value
    assert isinstance(error, RecordError)
    assert (error.column, error.type_name) == ("at", "timestamp(3) with time zone")
    assert error.value == ("yesterday" * 20)[:100]
    assert "in column 'at'" in str(error) and "timestamp(3) with time zone" in str(error)
    with pytest.raises(ConversionError, match="expected 2 columns"):
        convert(("1",))


def test_converter_errors_name_the_type() -> None:
    registry = TypeRegistry()
    for oid, text in [(23, "1.5"), (16, "yes"), (1082, "01/02/2024"), (1186, "@ 1 day")]:
        with pytest.raises(ConversionError) as caught:
            registry.converter(oid)(text)
        assert caught.value.type_name == type_name(oid, -1, registry)
        assert caught.value.value == text
    with pytest.raises(ConversionError, match="jsonb"):
        registry.converter(3802)("{")
    with pytest.raises(ConversionError, match="integer\\[\\]"):
        registry.converter(1007)("{1,2")


def test_unknown_types_pass_text_through() -> None:
    registry = TypeRegistry()
    assert registry.converter(99_999)("anything") == "anything"
    assert registry.converter(3904)("[1,2)") == "[1,2)"  # ranges stay text


def test_registry_missing_and_rows() -> None:
    registry = TypeRegistry()
    assert registry.missing([23, 1009, 70_010]) == [70_010]
    # A domain over an array of an unknown enum needs the enum too.
    registry.add_rows(
        [
            {
                "oid": 70_010,
                "typname": "moods",
                "typtype": "d",
                "typelem": 0,
                "typbasetype": 70_011,
                "typdelim": ",",
                "typcategory": "A",
                "nspname": "public",
            },
            (70_011, "_mood", "b", 70_012, 0, ",", "A"),  # 7 columns: no namespace
        ]
    )
    assert registry.missing([70_010]) == [70_012]
    registry.add_rows([(70_012, "mood", "e", 0, 0, ",", "E", "public")])
    assert registry.missing([70_010]) == []
    assert registry.converter(70_010)("{sad,NULL}") == ["sad", None]
    assert type_name(70_010, -1, registry) == "moods"
    assert type_name(70_011, -1, registry) == "mood[]"


def test_registry_keeps_builtin_types() -> None:
    registry = TypeRegistry()
    registry.add_rows([(23, "int4", "b", 0, 0, ";", "N", "pg_catalog")])
    registry.add_rows([(22, "int2vector", "b", 21, 0, ",", "A", "pg_catalog")])
    assert registry.get(23) == TypeEntry(23, "int4", "base", category="N")
    assert registry.converter(22)("1 2") == "1 2"  # space-separated, not an array literal


def test_registry_changes_reset_cached_converters() -> None:
    registry = TypeRegistry()
    assert registry.converter(70_020)("5") == "5"
    registry.add(TypeEntry(70_020, "posint", "domain", base_oid=23))
    assert registry.converter(70_020)("5") == 5


def test_captured_catalog_rows() -> None:
    registry = _registry()
    kinds = {
        registry.get(row[0]).name: registry.get(row[0]).kind for row in _types_fixture()["catalog"]
    }  # type: ignore[union-attr]
    assert kinds == {
        "_mood": "array",
        "mood": "enum",
        "_posint": "array",
        "posint": "domain",
        "_pair": "array",
        "pair": "composite",
    }


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
        ("2024-01-01 00:30:00-01", "2024-01-01T01:30:00Z"),
        ("2024-03-01 01:00:00+02", "2024-02-29T23:00:00Z"),
        ("2000-01-01 00:00:00.000001+14", "1999-12-31T10:00:00.000001Z"),
        ("0001-01-01 00:00:00+00:00:01", "0000-12-31T23:59:59Z"),
        ("0044-03-15 12:00:00+00 BC", "0044-03-15 12:00:00+00 BC"),
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
    assert _json(exact) == b"[-0.30000000000000004,0.30000000000000001,1e-400,1.23e+32]"
    assert _json(parse_json("[" + "9" * 5000 + "]")) == b"[" + b"9" * 5000 + b"]"
    # Beyond the double range: rejected the same way on both paths.
    for text in ("[1e400]", "[1e400, 1234567890123456789]"):
        with pytest.raises(ValueError, match=r"infinity|out of range"):
            parse_json(text)


def test_session_settings_and_query() -> None:
    assert TEXT_FORMAT_SETTINGS["DateStyle"].startswith("ISO")
    assert TEXT_FORMAT_SETTINGS["IntervalStyle"] == "postgres"
    assert TYPE_QUERY.count("%s") == 1
    assert "typdelim" in TYPE_QUERY and "WITH RECURSIVE" in TYPE_QUERY


def test_domains_resolve_to_their_base_and_a_cycle_does_not_loop() -> None:
    registry = TypeRegistry()
    registry.add(TypeEntry(70_100, "outer", "domain", base_oid=70_101))
    registry.add(TypeEntry(70_101, "inner", "domain", base_oid=20))  # int8
    registry.add(TypeEntry(70_102, "loop", "domain", base_oid=70_102))  # a corrupt catalog
    resolved = registry.resolved(70_100)
    assert resolved is not None and resolved.oid == 20
    assert registry.converter(70_100)("42") == 42
    assert registry.resolved(70_102) is None
    assert registry.converter(70_102)("x") == "x"  # its text, unchanged
    assert registry.resolved(99_999) is None
