"""The DuckDB sink's transactions of a flush: runs of records bounded by their values' bytes."""

from __future__ import annotations

from typing import Any

import orjson

from cdc.contracts.sink import SinkRecord
from sinks.duckdb.plan import TRANSACTION_BYTES, byte_parts


def _records(*sizes: int) -> list[SinkRecord]:
    # A value whose JSON is exactly ``size`` bytes ({"v":"..."} is 8 bytes around the text).
    return [SinkRecord("t", 0, n, {"id": n}, {"v": "x" * (s - 8)}) for n, s in enumerate(sizes)]


def _sizes(records: list[SinkRecord], part: slice) -> list[int]:
    return [len(orjson.dumps(r.value)) for r in records[part]]


def test_a_batch_within_the_bound_is_one_transaction() -> None:
    records = _records(*[1000] * 100)
    assert byte_parts(records, most=100_000) == [slice(0, 100)]
    assert byte_parts(records) == [slice(0, 100)]
    assert TRANSACTION_BYTES == 16 * 1024 * 1024


def test_runs_are_consecutive_and_each_within_the_bound() -> None:
    records = _records(*[300] * 10)
    parts = byte_parts(records, most=1000)
    assert parts == [slice(0, 3), slice(3, 6), slice(6, 9), slice(9, 10)]
    assert all(sum(_sizes(records, p)) <= 1000 for p in parts)


def test_a_record_larger_than_the_bound_is_a_run_of_its_own() -> None:
    records = _records(100, 5000, 100, 100, 7000)
    assert byte_parts(records, most=1000) == [
        slice(0, 1),
        slice(1, 2),
        slice(2, 4),
        slice(4, 5),
    ]


def test_tombstones_count_and_values_that_are_no_json_leave_one_run() -> None:
    tombstone = SinkRecord("t", 0, 0, {"id": 1}, None)
    assert byte_parts([tombstone] * 3, most=4) == [slice(0, 1), slice(1, 2), slice(2, 3)]
    odd: Any = {"v": {1, 2}}  # a set: orjson cannot encode it; plan names the record
    assert byte_parts([SinkRecord("t", 0, 0, None, odd)] * 2, most=1) == [slice(0, 2)]
