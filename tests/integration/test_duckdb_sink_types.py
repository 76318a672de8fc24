"""The DuckDB sink stores every PostgreSQL type faithfully, and a value it cannot store is a record
error naming its record (against a real DuckDB file). The sink's semantics are in
``test_duckdb_sink.py``.
"""

from __future__ import annotations

import base64
import dataclasses
import math
import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest

from cdc.contracts.errors import RecordError
from cdc.contracts.events import Op
from cdc.contracts.schema import Column
from tests.integration.duckdb_kit import (
    Harness,
    event,
    item,
)


@pytest.fixture
def wh(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path / "out" / "wh.duckdb")
    yield harness
    harness.sink.close()


# -- every type ---------------------------------------------------------------------------------

ALL_TYPES = (
    ("id", "bigint", "BIGINT", 1),
    ("i2", "smallint", "SMALLINT", -32768),
    ("i4", "integer", "INTEGER", 2147483647),
    ("n", "numeric(12,2)", "DECIMAL(12,2)", "1234567890.12"),
    ("nu", "numeric", "VARCHAR", "NaN"),
    ("r", "real", "FLOAT", 1.5),
    ("d", "double precision", "DOUBLE", "Infinity"),
    ("b", "boolean", "BOOLEAN", True),
    ("t", "text", "VARCHAR", "héllo, 'q' \"dq\""),
    ("vc", "character varying(20)", "VARCHAR", "abc"),
    ("ch", "character(3)", "VARCHAR", "ab "),
    ("by", "bytea", "BLOB", base64.b64encode(b"\x00\x01\xff").decode()),
    ("dt", "date", "DATE", "2024-02-29"),
    ("tm", "time without time zone", "TIME", "13:14:15.123456"),
    ("ttz", "time with time zone", "TIME WITH TIME ZONE", "13:14:15+02:00"),
    ("ts", "timestamp without time zone", "TIMESTAMP", "2024-01-02T03:04:05.678901"),
    ("tstz", "timestamp with time zone", "TIMESTAMP WITH TIME ZONE", "2024-01-02T03:04:05.5Z"),
    ("iv", "interval", "INTERVAL", "P1Y2M3DT4H5M6.5S"),
    ("u", "uuid", "UUID", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
    ("j", "json", "JSON", {"a": [1, {"b": None}], "c": "x"}),
    ("jb", "jsonb", "JSON", [1, "x", None, {"k": 1.5}]),
    ("ai", "integer[]", "INTEGER[]", [1, None, 3]),
    ("at", "text[]", "VARCHAR[]", ["a,b", None, 'q"', "{}"]),
    ("an", "numeric(5,2)[]", "DECIMAL(5,2)[]", ["1.50", None]),
    ("atz", "timestamp with time zone[]", "TIMESTAMP WITH TIME ZONE[]", ["2024-01-01T00:00:00Z"]),
    ("mood", "mood", "VARCHAR", "happy"),
    ("dom", "posint", "VARCHAR", 42),
    ("ajb", "jsonb[]", "JSON[]", [{"a": 1}, None, [1, 2]]),
    ("aby", "bytea[]", "BLOB[]", ["AAH/", None]),
    ("au", "uuid[]", "UUID[]", ["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"]),
    ("aiv", "interval[]", "INTERVAL[]", ["P1D", "PT1.5S"]),
    ("ad", "date[]", "DATE[]", ["2024-01-01", None]),
    ("ai2", "integer[][]", "INTEGER[][]", [[1, 2], [3, None]]),
    ("amood", "mood[]", "VARCHAR[]", ["sad", "ok"]),
    ("money", "money", "VARCHAR", "$1,234.56"),
    ("inet", "inet", "VARCHAR", "192.168.0.1/24"),
)

EXPECTED = {
    "id": 1,
    "i2": -32768,
    "i4": 2147483647,
    "n": Decimal("1234567890.12"),
    "nu": "NaN",
    "r": 1.5,
    "d": math.inf,
    "b": True,
    "t": "héllo, 'q' \"dq\"",
    "vc": "abc",
    "ch": "ab ",
    "by": b"\x00\x01\xff",
    "dt": date(2024, 2, 29),
    "tm": time(13, 14, 15, 123456),
    "ttz": time(13, 14, 15, tzinfo=timezone(timedelta(hours=2))),
    "ts": datetime(2024, 1, 2, 3, 4, 5, 678901),
    "tstz": datetime(2024, 1, 2, 3, 4, 5, 500000, tzinfo=UTC),
    # Python has no months: DuckDB hands over 14 months as 14 * 30 days.
    "iv": timedelta(days=14 * 30 + 3, hours=4, minutes=5, seconds=6.5),
    "u": uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
    "j": {"a": [1, {"b": None}], "c": "x"},
    "jb": [1, "x", None, {"k": 1.5}],
    "ai": [1, None, 3],
    "at": ["a,b", None, 'q"', "{}"],
    "an": [Decimal("1.50"), None],
    "atz": [datetime(2024, 1, 1, tzinfo=UTC)],
    "mood": "happy",
    "dom": "42",
    "ajb": [{"a": 1}, None, [1, 2]],
    "aby": [b"\x00\x01\xff", None],
    "au": [uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")],
    "aiv": [timedelta(days=1), timedelta(seconds=1.5)],
    "ad": [date(2024, 1, 1), None],
    "ai2": [[1, 2], [3, None]],
    "amood": ["sad", "ok"],
    "money": "$1,234.56",
    "inet": "192.168.0.1/24",
}


def test_every_type_is_stored_faithfully_and_nulls_stay_null(wh: Harness) -> None:
    wh.schemas.publish("everything", *(Column(n, t, key=n == "id") for n, t, _, _ in ALL_TYPES))
    full = {n: v for n, _, _, v in ALL_TYPES}
    nulls = {n: None for n, _, _, _ in ALL_TYPES} | {"id": 2}
    wh.apply(
        event(Op.CREATE, {"id": 1}, full, 10, table="everything"),
        event(Op.CREATE, {"id": 2}, nulls, 11, table="everything"),
    )
    types = dict(
        wh.sql(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = 'public' AND table_name = 'everything'"
        )
    )
    assert {n: types[n] for n, _, _, _ in ALL_TYPES} == {n: d for n, _, d, _ in ALL_TYPES}
    rows = wh.rows("everything")
    got = rows[1]
    for name, expected in EXPECTED.items():
        assert got[name] == expected, name
    assert rows[2] == nulls
    # DuckDB's own view of the interval keeps months and days apart, as PostgreSQL does.
    parts = wh.sql(
        "SELECT datepart('month', iv) + 12 * datepart('year', iv), datepart('day', iv), "
        "datepart('microseconds', iv) FROM public.everything WHERE id = 1"
    )
    assert parts == [(14, 3, 6_500_000)]


BC_TSTZ = "0044-03-15 (BC) 12:00:00+00"


def test_infinite_and_bc_dates_and_timestamps_are_kept(wh: Harness) -> None:
    wh.schemas.publish(
        "dates",
        Column("id", "bigint", key=True),
        Column("d", "date"),
        Column("ts", "timestamp without time zone"),
        Column("tstz", "timestamp with time zone"),
    )
    inf = {"id": 1, "d": "infinity", "ts": "infinity", "tstz": "-infinity"}
    # BC values come as PostgreSQL's text (ISO-8601 has no BC); DuckDB must not read them AD.
    bc = {
        "id": 2,
        "d": "0044-03-15 BC",
        "ts": "0044-03-15 12:00:00 BC",
        "tstz": "0044-03-15 12:00:00+00 BC",
    }
    wh.apply(
        event(Op.CREATE, {"id": 1}, inf, 5, table="dates"),
        event(Op.CREATE, {"id": 2}, bc, 6, table="dates"),
    )
    assert wh.sql(
        "SELECT id, isinf(d), isinf(ts), tstz = '-infinity'::TIMESTAMPTZ, year(d), d::VARCHAR, "
        f"ts::VARCHAR, tstz = '{BC_TSTZ}'::TIMESTAMPTZ FROM public.dates ORDER BY id"
    ) == [
        (1, True, True, True, None, "infinity", "infinity", False),
        (2, False, False, False, -43, "0044-03-15 (BC)", "0044-03-15 (BC) 12:00:00", True),
    ]
    # read back in the source's own text, since Python's datetime cannot hold these
    assert wh.rows("dates") == {1: inf, 2: bc}


def test_debeziums_infinities_and_bc_years_are_kept(wh: Harness) -> None:
    # What the source writes under isostring (Debezium's forms, tests/debezium/OBSERVED.md):
    # its sentinels for the infinities and ISO years below 1 (0044 BC is -0043, 1 BC is 0000).
    wh.schemas.publish(
        "dates",
        Column("id", "bigint", key=True),
        Column("d", "date"),
        Column("ts", "timestamp without time zone"),
        Column("tstz", "timestamp with time zone"),
    )
    inf = {"id": 1, "d": "-5877611-06-21Z", "ts": "+294247-01-10T04:00:25.2Z", "tstz": "infinity"}
    neg = {"id": 2, "d": "-5877611-06-22Z", "ts": "-290308-12-21T19:59:27.6Z", "tstz": "-infinity"}
    bc = {
        "id": 3,
        "d": "-0043-03-15Z",
        "ts": "0000-01-01T00:00:00.5Z",
        "tstz": "-0043-03-15T12:00:00.000000Z",
    }
    wh.apply(
        *(
            event(Op.CREATE, {"id": r["id"]}, r, 5 + i, table="dates")
            for i, r in enumerate((inf, neg, bc))
        )
    )
    assert wh.sql(
        "SELECT id, d::VARCHAR, ts::VARCHAR, tstz = '-infinity'::TIMESTAMPTZ, isinf(tstz), "
        f"tstz = '{BC_TSTZ}'::TIMESTAMPTZ FROM public.dates ORDER BY id"
    ) == [
        (1, "infinity", "infinity", False, True, False),
        (2, "-infinity", "-infinity", True, True, False),
        (3, "0044-03-15 (BC)", "0001-01-01 (BC) 00:00:00.5", False, False, True),
    ]


def test_a_value_that_does_not_fit_is_a_record_error_naming_it(wh: Harness) -> None:
    wh.schemas.publish("prices", Column("id", "bigint", key=True), Column("p", "numeric(6,2)"))
    good = event(Op.CREATE, {"id": 1}, {"id": 1, "p": "12.50"}, 5, table="prices")
    bad = event(Op.CREATE, {"id": 2}, {"id": 2, "p": "NaN"}, 6, table="prices")
    records = wh.records(good, bad)
    with pytest.raises(RecordError) as caught:
        wh.write(records)
    assert caught.value.record is records[1]
    assert "column p" in caught.value.reason and "DECIMAL(6,2)" in caught.value.reason
    assert wh.sink.stored_offsets() == {}
    wh.write([records[0]])  # what the runner does after dead-lettering the bad one
    assert wh.rows("prices") == {1: {"id": 1, "p": Decimal("12.50")}}


@pytest.mark.parametrize(
    ("source_type", "bad"),
    [
        ("integer", "x"),
        ("smallint", 70000),
        ("integer[]", [[1, 2]]),
        ("bytea", "not base64!"),
        ("bytea[]", ["not base64!"]),
        ("uuid", "nope"),
        ("interval", "infinity"),
        ("timestamp with time zone", "yesterday-ish"),
        ("date[]", ["2024-13-01"]),
    ],
)
def test_each_kind_of_bad_value_names_its_record(wh: Harness, source_type: str, bad: Any) -> None:
    wh.schemas.publish("bad", Column("id", "bigint", key=True), Column("v", source_type))
    records = wh.records(
        event(Op.CREATE, {"id": 1}, {"id": 1, "v": None}, 5, table="bad"),
        event(Op.CREATE, {"id": 2}, {"id": 2, "v": bad}, 6, table="bad"),
    )
    with pytest.raises(RecordError) as caught:
        wh.write(records)
    assert caught.value.record is records[1]
    assert caught.value.reason.startswith(f"table public.bad, column v ({source_type})")


@pytest.mark.parametrize("pos", [["x", 0], [1, "0"], [1.5, 0]])
def test_a_position_that_is_not_two_integers_is_a_record_error(wh: Harness, pos: Any) -> None:
    records = wh.records(item(Op.CREATE, 1, 5, "a", 1), item(Op.CREATE, 2, 6, "b", 2))
    records[1] = dataclasses.replace(records[1], pos=orjson.dumps(pos))
    with pytest.raises(RecordError, match="must be integers") as caught:
        wh.write(records)
    assert caught.value.record is records[1]
    wh.write([records[0]])  # what the runner does after dead-lettering the bad one
    assert set(wh.rows("items")) == {1}


def test_a_column_missing_from_the_schema_is_a_record_error(wh: Harness) -> None:
    records = wh.records(item(Op.CREATE, 1, 5, "a", 1, surprise=1))
    with pytest.raises(RecordError, match="surprise"):
        wh.write(records)
