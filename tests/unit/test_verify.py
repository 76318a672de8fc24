"""Normalisation and comparison behind ``cdc verify``, on plain data."""

from __future__ import annotations

import itertools
import tracemalloc
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal

import orjson

from cdc.cli.verify.compare import compare_table
from cdc.contracts.schema import Column, TableSchema
from cdc.records.normalize import canonical, interval_micros

SCHEMA = TableSchema(
    "postgresql",
    "public",
    "t",
    (
        Column("id", "bigint", key=True),
        Column("amount", "numeric(12,2)"),
        Column("at", "timestamp with time zone"),
        Column("doc", "jsonb"),
        Column("tags", "text[]"),
    ),
)


def test_source_and_sink_forms_of_equal_values_are_equal() -> None:
    pairs = [
        ("numeric(12,2)", "1.50", Decimal("1.5")),
        ("numeric", "NaN", "NaN"),
        (
            "timestamp with time zone",
            "2024-01-02T03:04:05.5Z",
            datetime(2024, 1, 2, 4, 4, 5, 500000, tzinfo=timezone(timedelta(hours=1))),
        ),
        ("timestamp without time zone", "2024-01-02T03:04:05", datetime(2024, 1, 2, 3, 4, 5)),
        ("date", "2024-01-02", date(2024, 1, 2)),
        ("jsonb", {"b": 1, "a": [1, 2]}, '{"a": [1, 2], "b": 1}'),
        ("bytea", "AAEC", b"\x00\x01\x02"),
        ("real", 1.1, 1.100000023841858),
        ("double precision", "Infinity", float("inf")),
        ("integer[]", [1, None, 3], [1, None, 3]),
        ("interval", "P1DT2H", timedelta(days=1, hours=2)),
        ("boolean", True, True),
        ("time with time zone", "12:34:56.789+05:30", "12:34:56.789000+05:30"),
    ]
    for type_name, from_source, from_sink in pairs:
        assert canonical(from_source, type_name) == canonical(from_sink, type_name), type_name


def test_different_values_stay_different() -> None:
    assert canonical("1.50", "numeric") != canonical("1.51", "numeric")
    assert canonical("2024-01-02T03:04:05Z", "timestamptz") != canonical(
        datetime(2024, 1, 2, 3, 4, 6, tzinfo=UTC), "timestamptz"
    )
    assert interval_micros("P1M") == interval_micros(timedelta(days=30))
    assert interval_micros("-P1DT1S") == -(86_400 + 1) * 1_000_000


def rows(n: int, changed: dict[int, str] | None = None) -> list[tuple[dict, dict]]:
    out = []
    for i in range(n):
        amount = (changed or {}).get(i, f"{i}.10")
        out.append(
            (
                {"id": i},
                {
                    "id": i,
                    "amount": amount,
                    "at": "2024-01-01T00:00:00Z",
                    "doc": {"k": i},
                    "tags": ["a", None],
                },
            )
        )
    return out


def test_equal_tables_pass_with_equal_checksums() -> None:
    source = rows(50)
    sink = [({"id": k["id"]}, {**r, "amount": Decimal(r["amount"])}) for k, r in reversed(source)]
    result = compare_table("public.t", "s", SCHEMA, lambda: source, lambda: sink, attempts=1)
    assert result.ok and result.source_count == result.sink_count == 50
    assert result.source_checksum == result.sink_checksum


def test_mismatches_name_the_keys() -> None:
    source = rows(10)
    sink = [*rows(10, {3: "99.00"})[:-1], ({"id": 42}, {"id": 42, "amount": "1"})]
    result = compare_table("public.t", "s", SCHEMA, lambda: source, lambda: sink, attempts=1)
    assert not result.ok
    assert result.missing == [{"id": 9}]
    assert result.extra == [{"id": 42}]
    assert result.different == [{"id": 3}]
    assert result.details == [
        {"key": {"id": 3}, "columns": {"amount": {"source": "3.1", "sink": "99"}}}
    ]
    assert result.source_checksum != result.sink_checksum


def test_a_change_in_flight_is_not_reported_once_it_arrives() -> None:
    versions = itertools.chain([rows(5, {2: "0.00"})], itertools.repeat(rows(5)))
    result = compare_table(
        "public.t", "s", SCHEMA, lambda: rows(5), lambda: next(versions), attempts=3, wait_s=0
    )
    assert result.ok


def test_comparing_a_table_takes_about_its_own_size_in_memory() -> None:
    # cdc verify holds every row of a table twice (source and sink); orjson 3.12+ returns each
    # small document in a 4 KiB buffer, which made 100,000 rows take 1.6 GB.
    source = rows(2000)
    data = sum(len(orjson.dumps(k)) + len(orjson.dumps(r)) for k, r in source)
    tracemalloc.start()
    try:
        result = compare_table("public.t", "s", SCHEMA, lambda: source, lambda: source, 1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.ok and result.source_count == 2000
    assert peak < 6 * data + 500_000, f"{peak:,} bytes at peak for {data:,} bytes of rows"


def test_a_value_not_in_the_encoding_is_compared_as_it_is_and_the_rest_decoded() -> None:
    # The row decodes at once, and value by value only when one value does not decode.
    from cdc.envelope.options import READABLE
    from cdc.verify.compare import _row_decoding

    decode = _row_decoding(SCHEMA, READABLE)
    good = {"id": 1, "amount": "1.50", "at": "2024-01-01T10:00:00Z"}
    decoded = decode(good)
    assert decoded["amount"] == Decimal("1.50")
    assert decoded["at"] == datetime(2024, 1, 1, 10, tzinfo=UTC)
    broken = decode({**good, "amount": "not a number", "extra": "kept"})
    assert broken == {**decoded, "amount": "not a number", "extra": "kept"}
