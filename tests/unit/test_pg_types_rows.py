"""Row conversion and the type registry, on a captured insert (data/pgoutput/v1.json) and on
catalog rows written by hand. Single values are in ``test_pg_types.py`` and
``test_pg_types_text.py``.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import pytest

from cdc.contracts.errors import RecordError
from connectors.postgres.pgoutput import UNCHANGED, Insert, Relation, RelationColumn, decode
from connectors.postgres.types import (
    ConversionError,
    TypeEntry,
    TypeRegistry,
    row_converter,
    type_name,
)
from tests.unit.pg_types_kit import DATA

#: The first captured insert of ``all_types``, converted under the readable defaults.
FIRST_ROW: dict[str, Any] = {
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
    "c_date": "2024-02-29Z",
    "c_time": "23:59:59.999999Z",
    "c_time3": "12:00:00.123Z",
    "c_timetz": "22:35:06.789Z",
    "c_timestamp": "2024-01-02T03:04:05.5Z",
    "c_timestamptz": "2024-01-01T21:34:05.123456Z",
    "c_timestamptz3": "2024-06-30T23:59:59.999Z",  # timestamptz(3): 3 digits, as Debezium
    "c_interval": "P1Y2M3DT4H5M6.5S",
    "c_interval_ym": "P1Y2M0DT0H0M0S",
    "c_interval_s": "P0Y0M0DT0H0M1.25S",
    "c_uuid": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
    "c_json": '{"a": [1, 2.5, null], "b": "x"}',
    "c_money": "1234.56",
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
    "c_timestamptz_arr": ["2024-01-02T03:04:05.000000Z", "infinity"],
    "c_jsonb_arr": ['{"k": 1}', "[]"],
    "c_oid": 4294967295,
    "c_name": "a name",
    "c_xml": "<a>x</a>",
    "c_tsvector": "'cat' 'fat'",
    "c_pg_lsn": "16/B374D848",
    "c_point": "(1.5,-2)",
    "c_char1": "z",
}


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
    assert row == FIRST_ROW | {"c_jsonb": row["c_jsonb"]}  # checked below
    # jsonb: a string of the server's text (io.debezium.data.Json), every digit kept.
    assert row["c_jsonb"] == '{"f": 0.1, "big": 123456789012345678901234567890}'
    _check_the_second_insert(convert(second.new))


def _check_the_second_insert(nulls: dict[str, Any]) -> None:
    """The second captured insert: each type's edge value (infinities, empties), and NULLs."""
    assert nulls["c_float4"] == "-Infinity"
    assert nulls["c_numeric"] == "NAN"
    assert nulls["c_bytea"] == ""
    assert nulls["c_date"] == "-5877611-06-21Z"  # Debezium's sentinels
    assert nulls["c_timestamp"] == "-290308-12-21T19:59:27.6Z"
    assert nulls["c_interval"] == "P-1Y-2M3DT-4H-5M-6.25S"
    assert nulls["c_interval_s"] == "P0Y0M0DT0H0M-0.5S"
    assert nulls["c_json"] == "null" and nulls["c_jsonb"] == "123"  # JSON texts, not NULLs
    assert nulls["c_int4range"] == "empty"
    assert nulls["c_int4_2d"] == [[7], [8]]
    assert nulls["c_numeric_arr"] == ["NAN"]
    assert nulls["c_text_arr"] == [] and nulls["c_int4_arr"] == []
    # 32 SQL NULLs (the json column holds the text "null", checked above)
    assert sum(value is None for value in nulls.values()) == 32


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
    with pytest.raises(ConversionError, match="interval"):
        registry.converter(1186)("1 fortnight")
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
