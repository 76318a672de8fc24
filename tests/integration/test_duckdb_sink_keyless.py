"""A keyless table (REPLICA IDENTITY FULL) in the DuckDB sink: its records are keyed by every
column, NULLs included. A row holding a NULL must be deleted by its delete and must not come
back, or be doubled, when an older insert is replayed. Before the key match used
``IS NOT DISTINCT FROM``, such a row matched nothing: the delete left it and a replay added a
second copy."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdc.contracts.events import Op
from cdc.contracts.schema import Column
from tests.integration.duckdb_kit import Harness, event

COLUMNS = (Column("a", "integer", key=True), Column("b", "text", key=True))


@pytest.mark.parametrize("mode", ["current", "history"])
def test_a_row_with_a_null_is_deleted_and_a_replay_changes_nothing(
    tmp_path: Path, mode: str
) -> None:
    h = Harness(tmp_path / "w.duckdb", mode=mode)
    h.schemas.publish("pairs", *COLUMNS)
    row = {"a": 1, "b": None}
    other = {"a": 2, "b": "x"}
    h.apply(
        event(Op.CREATE, row, row, 10, table="pairs"),
        event(Op.CREATE, other, other, 11, table="pairs"),
    )
    h.apply(event(Op.CREATE, row, row, 10, table="pairs"))  # a replay of the same insert
    assert sorted(h.sql("SELECT a, b FROM public.pairs")) == [(1, None), (2, "x")]

    h.apply(event(Op.DELETE, row, row, 12, table="pairs"))
    assert h.sql("SELECT a, b FROM public.pairs") == [(2, "x")]

    h.apply(event(Op.CREATE, row, row, 10, table="pairs"))  # the older insert, replayed
    assert h.sql("SELECT a, b FROM public.pairs") == [(2, "x")]
    if mode == "history":
        versions = h.sql("SELECT op, valid_to IS NULL FROM public.pairs__history WHERE a = 1")
        # The insert's version closed by the delete, the delete's closed at once; no open one.
        assert sorted(versions) == [("c", False), ("d", False)]
