"""Two source columns whose names differ only by case (``email`` and ``"Email"``), which one
DuckDB table cannot hold (DuckDB matches identifiers without regard to case): the DuckDB sink
stops before any DDL, naming the table, both columns and the fix, whether the pair is there at
the table's creation or made later by an added or a renamed column; a history column named
like the sink's own but for case is refused as the same name. Against a real DuckDB file.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cdc.contracts.errors import SinkFatal
from cdc.contracts.events import Op
from cdc.contracts.schema import Column
from tests.integration.duckdb_kit import Harness, event


@pytest.fixture
def wh(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path / "wh.duckdb")
    yield harness
    harness.sink.close()


def _user(pos: int, **row: object) -> object:
    return event(Op.CREATE, {"id": 1}, {"id": 1, **row}, pos, table="users")


def _assert_names_both_and_the_fix(message: str, first: str, second: str) -> None:
    for part in (
        f"DuckDB sink wh: table public.users: columns {first!r} and {second!r} differ only by case",
        "Fix: rename one of them in the source",
        f'ALTER TABLE public.users RENAME COLUMN "{second}"',
        "leave the table out of this sink",
    ):
        assert part in message, (part, message)


def test_twins_at_creation_stop_the_sink_before_any_table_is_made(wh: Harness) -> None:
    twins = (Column("id", "bigint", key=True), Column("email", "text"), Column("Email", "text"))
    wh.schemas.publish("users", *twins)
    with pytest.raises(SinkFatal) as stopped:
        wh.apply(_user(5, email="a@x", Email="b@x"))
    _assert_names_both_and_the_fix(str(stopped.value), "email", "Email")
    assert wh.sql("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'users'") == [(0,)]
    assert wh.sink.stored_offsets() == {}  # nothing of the batch applied


def test_an_added_twin_stops_the_sink_and_the_table_stays_as_it_was(wh: Harness) -> None:
    wh.schemas.publish("users", Column("id", "bigint", key=True), Column("email", "text"))
    wh.apply(_user(5, email="a@x"))
    wh.schemas.publish(
        "users", Column("id", "bigint", key=True), Column("email", "text"), Column("EMAIL", "text")
    )
    with pytest.raises(SinkFatal) as stopped:
        wh.apply(_user(6, email="a@x", EMAIL="b@x"))
    _assert_names_both_and_the_fix(str(stopped.value), "email", "EMAIL")
    assert wh.rows("users") == {1: {"id": 1, "email": "a@x"}}


def test_a_rename_to_a_twin_stops_the_sink(wh: Harness) -> None:
    columns = [Column("id", "bigint", key=True, id=1), Column("email", "text", id=2)]
    wh.schemas.publish("users", *columns, Column("other", "text", id=3))
    wh.apply(_user(5, email="a@x", other="o"))
    wh.schemas.publish("users", *columns, Column("Email", "text", id=3))
    with pytest.raises(SinkFatal) as stopped:
        wh.apply(_user(6, email="a@x", Email="o"))
    _assert_names_both_and_the_fix(str(stopped.value), "email", "Email")


def test_a_history_column_named_but_for_case_is_taken(tmp_path: Path) -> None:
    hist = Harness(tmp_path / "hist.duckdb", mode="history")
    hist.schemas.publish("users", Column("id", "bigint", key=True), Column("Valid_From", "text"))
    with pytest.raises(SinkFatal, match=r"\['Valid_From'\], which history mode needs"):
        hist.apply(_user(5, Valid_From="x"))
    hist.sink.close()
