"""The DuckDB sink follows a renamed column by its source id: it renames the column, keeping its
data, and reads records written before the rename under the new name (a real DuckDB file)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from cdc.contracts.events import ChangeEvent, Op
from cdc.contracts.schema import Column
from sinks.duckdb import read_rows
from tests.integration.duckdb_kit import Harness, event, item

ID = Column("id", "bigint", key=True, nullable=False, id=1)
NAME = Column("name", "text", id=2)
QTY = Column("qty", "integer", id=3)


def start(h: Harness) -> None:
    h.schemas.publish("items", ID, NAME, QTY)
    h.apply(item(Op.CREATE, 1, 10, "one", 1), item(Op.CREATE, 2, 11, "two", 2))


@pytest.fixture
def wh(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path / "wh.duckdb")
    start(harness)
    yield harness
    harness.sink.close()


@pytest.fixture
def hist(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path / "hist.duckdb", mode="history")
    start(harness)
    yield harness
    harness.sink.close()


def columns(h: Harness, table: str = "items") -> list[str]:
    return [
        r[0]
        for r in h.sql(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = 'public' "
            f"AND table_name = '{table}' ORDER BY ordinal_position"
        )
    ]


def titled(key: int, pos: int, title: str, qty: int = 0) -> ChangeEvent:
    return event(Op.CREATE, {"id": key}, {"id": key, "title": title, "qty": qty}, pos)


def test_a_rename_keeps_the_data_under_the_new_name(wh: Harness) -> None:
    wh.schemas.publish("items", ID, Column("title", "text", id=2), QTY)
    wh.apply(titled(3, 12, "three"))
    assert columns(wh) == ["id", "title", "qty", "__cdc_position", "__cdc_sequence"]
    assert wh.rows() == {
        1: {"id": 1, "title": "one", "qty": 1},
        2: {"id": 2, "title": "two", "qty": 2},
        3: {"id": 3, "title": "three", "qty": 0},
    }
    [(former,)] = wh.sql(
        "SELECT former_names FROM _cdc.columns WHERE table_name = 'items' AND column_name = 'title'"
    )
    assert former == ["name"]


def test_records_from_before_the_rename_are_read_under_the_new_name(wh: Harness) -> None:
    # The sink is behind: it sees the renamed schema first, then changes made before the rename.
    wh.schemas.publish("items", ID, Column("title", "text", id=2), QTY)
    wh.apply(item(Op.UPDATE, 1, 12, "one again", 5), titled(4, 13, "four"))
    wh.reopen()  # the former name is remembered
    wh.apply(item(Op.UPDATE, 2, 14, "two again", 6))
    rows = wh.rows()
    assert rows[1] == {"id": 1, "title": "one again", "qty": 5}
    assert rows[2] == {"id": 2, "title": "two again", "qty": 6}
    assert rows[4]["title"] == "four"


def test_a_renamed_key_column_is_renamed_in_the_deleted_keys_table_too(wh: Harness) -> None:
    wh.apply(item(Op.DELETE, 2, 12))
    wh.schemas.publish("items", Column("item_id", "bigint", key=True, id=1), NAME, QTY)
    # Old-shape changes, one per key in one batch: keys must not be mixed up by the old name.
    wh.apply(item(Op.UPDATE, 1, 13, "uno", 1), item(Op.CREATE, 5, 14, "cinco", 5))
    wh.apply(item(Op.CREATE, 2, 11, "stale", 2))  # older than its delete: still ignored
    new = event(Op.CREATE, {"item_id": 6}, {"item_id": 6, "name": "seis", "qty": 6}, 15)
    wh.apply(new)
    keys = {k["item_id"]: row["name"] for k, row in read_rows(wh.path, "public", "items")}
    assert keys == {1: "uno", 5: "cinco", 6: "seis"}


def test_renames_that_free_each_others_names_and_a_new_column_under_an_old_name(
    wh: Harness,
) -> None:
    # name -> title, qty -> name, and a new column qty: in one schema step.
    wh.schemas.publish(
        "items",
        ID,
        Column("title", "text", id=2),
        Column("name", "integer", id=3),
        Column("qty", "text", id=4),
    )
    wh.apply(event(Op.CREATE, {"id": 3}, {"id": 3, "title": "t", "name": 3, "qty": "q"}, 12))
    assert wh.rows()[1] == {"id": 1, "title": "one", "name": 1, "qty": None}
    assert wh.rows()[3] == {"id": 3, "title": "t", "name": 3, "qty": "q"}


def test_history_mode_renames_the_history_table_column_too(hist: Harness) -> None:
    hist.schemas.publish("items", ID, Column("title", "text", id=2), QTY)
    hist.apply(item(Op.UPDATE, 1, 12, "one again", 1))
    assert "title" in columns(hist, "items__history") and "name" not in columns(hist)
    versions = hist.sql(
        'SELECT title FROM "public"."items__history" WHERE id = 1 ORDER BY valid_from'
    )
    assert versions == [("one",), ("one again",)]


def test_without_ids_a_new_name_is_a_new_column_as_before(wh: Harness) -> None:
    wh.schemas.publish("items", Column("id", "bigint", key=True), Column("title", "text"), QTY)
    wh.apply(titled(3, 12, "three"))
    assert wh.rows()[1] == {"id": 1, "name": "one", "title": None, "qty": 1}


def test_a_file_from_before_column_ids_is_read_and_upgraded(tmp_path: Path) -> None:
    h = Harness(tmp_path / "old.duckdb")
    h.apply(item(Op.CREATE, 1, 10, "one", 1))  # schema without ids, as published before
    h.sql("ALTER TABLE _cdc.columns DROP COLUMN former_names")
    h.sql("ALTER TABLE _cdc.columns DROP COLUMN source_id")
    h.sink.close()
    assert {k["id"]: r["name"] for k, r in read_rows(h.path, "public", "items")} == {1: "one"}
    h.sink = h.new_sink()
    h.schemas.publish("items", ID, NAME, QTY)  # ids arrive: adopted by name
    h.apply(item(Op.CREATE, 2, 11, "two", 2))
    h.schemas.publish("items", ID, Column("title", "text", id=2), QTY)
    h.apply(titled(3, 12, "three"))
    assert h.rows()[1]["title"] == "one"
    h.sink.close()
    with duckdb.connect(str(h.path), read_only=True) as con:
        assert con.execute(
            "SELECT count(*) FROM _cdc.columns WHERE source_id IS NULL"
        ).fetchone() == (0,)
