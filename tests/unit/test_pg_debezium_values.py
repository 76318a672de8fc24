"""Every column of the Debezium capture workload, converted from PostgreSQL's text under each
captured setting, equals what Debezium 3.6.1 wrote (``tests/debezium/expected``), value and
Connect field schema; compared as parsed JSON."""

from __future__ import annotations

import orjson
import pytest

from connectors.postgres.pgoutput import RelationColumn
from connectors.postgres.types import row_converter
from connectors.postgres.types.connect import column_schema
from tests.unit import debezium_workload as w

SCHEMA_SETTINGS = ["defaults", "readable_schemas", "connect_double_hex", "micro_urlsafe"]


def _columns() -> list[RelationColumn]:
    return [RelationColumn(key, name, oid, typmod) for name, oid, typmod, key in w.COLUMNS]


@pytest.mark.parametrize("setting", list(w.SETTINGS))
@pytest.mark.parametrize("row", list(w.ROWS), ids=lambda row: f"{row[0]}{row[1]}")
def test_values_equal_debezium(setting: str, row: tuple[str, int, str]) -> None:
    expected = w.expected_after(setting)[row]
    convert = row_converter(_columns(), w.registry(setting))
    ours = orjson.loads(orjson.dumps(convert(tuple(w.ROWS[row]))))
    for name, value in expected.items():
        if name in w.DEVIATIONS:
            continue
        assert w.equal(row[0], ours[name], value), f"{setting} {name}: {ours[name]!r} != {value!r}"
    assert list(ours) == list(expected)


def test_multidimensional_arrays_keep_their_values() -> None:
    convert = row_converter(_columns(), w.registry("defaults"))
    assert convert(tuple(w.ROWS["r", 1, "eu"]))["c_int_2d"] == [[1, 2], [3, 4]]


@pytest.mark.parametrize("setting", SCHEMA_SETTINGS)
def test_field_schemas_equal_debezium(setting: str) -> None:
    registry, options = w.registry(setting), w.options(setting)
    ours = [
        column_schema(oid, typmod, name, not required, options, registry)
        for name, oid, typmod, required in w.COLUMNS
    ]
    expected = w.expected_fields(setting)
    for mine, theirs in zip(ours, expected, strict=True):
        assert mine == theirs
        assert list(mine) == list(theirs), "the JsonConverter's key order"
