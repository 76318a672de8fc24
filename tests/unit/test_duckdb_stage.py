"""The DuckDB sink's staging in Python: the newest change per key, rows into columns, the
date fixes, and the staged columns read back by a real DuckDB."""

from __future__ import annotations

from typing import Any

import duckdb
import pytest

from cdc.contracts.errors import RecordError
from cdc.contracts.sink import SinkRecord
from sinks.duckdb.catalog import ColumnInfo, TableState
from sinks.duckdb.plan import TableBatch
from sinks.duckdb.stage import _typed_columns, encode, newest_per_key, select_staged
from sinks.duckdb.types import conversion

TABLE = ("public", "t")


def _state(*names: str) -> TableState:
    columns = [ColumnInfo("id", "bigint", "BIGINT", key=True)]
    columns += [ColumnInfo(name, "text", "VARCHAR") for name in names]
    return TableState(*TABLE, "typed", columns)


def _batch(changes: list[tuple[str, int, int, dict[str, Any]]]) -> TableBatch:
    """A batch of ``(op, position, sequence, row)``."""
    batch = TableBatch(TABLE)
    for n, (op, position, sequence, row) in enumerate(changes):
        key = {"id": row["id"]}
        batch.records.append(SinkRecord("t", 0, n, key, {"op": op}))
        batch.ops.append(op)
        batch.positions.append(position)
        batch.sequences.append(sequence)
        batch.times.append(0)
        batch.keys.append(key)
        batch.rows.append(row)
    return batch


def _picked(batch: TableBatch) -> list[tuple[int, int, Any]]:
    newest, decided = newest_per_key(_state("v"), batch)
    assert decided
    return [
        (p, s, row.get("v"))
        for p, s, row in zip(newest.positions, newest.sequences, newest.rows, strict=True)
    ]


def test_unique_keys_are_kept_as_they_are() -> None:
    batch = _batch([("c", 1, 0, {"id": 1}), ("c", 2, 0, {"id": 2})])
    assert newest_per_key(_state("v"), batch) == (batch, True)


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        # Rising positions: each key's last change.
        ([(1, 0, 1, "a"), (2, 0, 2, "b"), (3, 0, 1, "c")], [(2, 0, "b"), (3, 0, "c")]),
        # One position, rising sequences (one source transaction).
        ([(5, 0, 1, "a"), (5, 1, 1, "b"), (5, 2, 2, "c")], [(5, 1, "b"), (5, 2, "c")]),
        # Out of order (two partitions): the newest wins, wherever it stands.
        ([(7, 0, 1, "new"), (3, 0, 1, "old"), (4, 0, 2, "x")], [(7, 0, "new"), (4, 0, "x")]),
        # Rising positions, a sequence that falls: compared, not taken by place.
        ([(5, 2, 1, "new"), (5, 1, 1, "old")], [(5, 2, "new")]),
        # The same position twice for a key: the first is kept.
        ([(5, 0, 1, "first"), (5, 0, 1, "second")], [(5, 0, "first")]),
    ],
)
def test_the_newest_change_of_each_key_is_staged(
    changes: list[tuple[int, int, int, str]], expected: list[tuple[int, int, str]]
) -> None:
    batch = _batch([("u", p, s, {"id": k, "v": v}) for p, s, k, v in changes])
    assert _picked(batch) == expected


def test_rows_become_columns_with_nulls_where_a_row_has_fewer() -> None:
    batch = _batch(
        [
            ("c", 1, 0, {"id": 1, "a": "x", "b": "y"}),
            ("d", 2, 0, {"id": 2}),  # a delete's key alone
            ("c", 3, 0, {"id": 3, "b": "z"}),  # written before column a was added
        ]
    )
    assert _typed_columns(_state("a", "b"), batch) == [
        [1, 2, 3],
        ["x", None, None],
        ["y", None, "z"],
    ]
    assert _typed_columns(_state(), _batch([("c", 1, 0, {"id": 9})])) == [[9]]


@pytest.mark.parametrize(
    "row",
    [
        {"id": 1, "a": "x", "b": "y", "extra": 1},  # longer than the table
        {"id": 1, "extra": 1},  # shorter
        {"id": 1, "a": "x", "extra": 1},  # as long, one column another
    ],
)
def test_a_row_with_a_column_the_table_does_not_know_is_named(row: dict[str, Any]) -> None:
    batch = _batch([("c", 1, 0, {"id": 0, "a": "ok", "b": "ok"}), ("c", 2, 0, row)])
    with pytest.raises(RecordError, match=r"columns \['extra'\] are not in the published") as e:
        _typed_columns(_state("a", "b"), batch)
    assert e.value.record is batch.records[1]


def test_staged_columns_read_back_typed_with_dates_fixed() -> None:
    state = TableState(
        *TABLE,
        "typed",
        [
            ColumnInfo("id", "bigint", "BIGINT", key=True),
            ColumnInfo("note", "text", "VARCHAR"),
            ColumnInfo("day", "date", "DATE"),
        ],
    )
    batch = _batch(
        [
            ("c", 1, 0, {"id": 1, "note": 'a "quoted" \u00e9 text', "day": "2024-03-01"}),
            ("c", 2, 0, {"id": 2, "note": "", "day": "0044-03-15 BC"}),
            ("d", 3, 0, {"id": 3}),
        ]
    )
    staged = encode(state, batch, newest_only=True)
    assert [conversion(c.duck_type) for c in state.columns] == staged.conversions
    con = duckdb.connect()
    rows = con.execute(
        "SELECT __cdc_position, __cdc_op, id, note, CAST(day AS VARCHAR) "
        f"FROM ({select_staged(staged)})",
        staged.payloads,
    ).fetchall()
    assert rows == [
        (1, "c", 1, 'a "quoted" \u00e9 text', "2024-03-01"),
        (2, "c", 2, "", "0044-03-15 (BC)"),
        (3, "d", 3, None, None),
    ]
