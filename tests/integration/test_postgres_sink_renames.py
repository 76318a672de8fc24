"""Renamed source columns followed in place by the PostgreSQL sink, by the column's id."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cdc.contracts.events import Op
from cdc.contracts.schema import Column
from tests.integration.duckdb_kit import event
from tests.integration.postgres_sink_kit import Harness


@pytest.fixture
def wh(pg_db: str) -> Iterator[Harness]:
    harness = Harness(pg_db)
    _publish(harness, "id", "name", "qty")
    yield harness
    harness.close()


def _publish(wh: Harness, key: str, name: str, qty: str) -> None:
    wh.schemas.publish(
        "items",
        Column(key, "bigint", key=True, nullable=False, id=1),
        Column(name, "text", id=2),
        Column(qty, "integer", id=3),
    )


def _columns(wh: Harness, table: str = "items") -> list[str]:
    return [
        n
        for (n,) in wh.sql(
            "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
            "AND NOT attisdropped ORDER BY attnum",
            [f"replica.{table}"],
        )
    ]


def test_a_renamed_column_keeps_its_data_and_old_records_land_in_it(wh: Harness) -> None:
    wh.apply(event(Op.CREATE, {"id": 1}, {"id": 1, "name": "a", "qty": 1}, 10))
    _publish(wh, "id", "title", "qty")
    written_before = event(Op.CREATE, {"id": 2}, {"id": 2, "name": "b", "qty": 2}, 11)
    wh.apply(written_before, event(Op.CREATE, {"id": 3}, {"id": 3, "title": "c", "qty": 3}, 20))
    assert _columns(wh) == ["id", "title", "qty", "_cdc_pos", "_cdc_seq"]
    assert wh.sql("SELECT id, title FROM replica.items ORDER BY id") == [
        (1, "a"),
        (2, "b"),
        (3, "c"),
    ]
    wh.reopen()  # the former name is remembered durably
    wh.apply(event(Op.UPDATE, {"id": 2}, {"id": 2, "name": "b2", "qty": 2}, 12))
    assert wh.sql("SELECT title FROM replica.items WHERE id = 2") == [("b2",)]


def test_renames_in_a_chain_and_of_the_key(wh: Harness) -> None:
    wh.apply(event(Op.CREATE, {"id": 1}, {"id": 1, "name": "a", "qty": 1}, 10))
    wh.apply(event(Op.DELETE, {"id": 2}, None, 11))
    # qty -> amount and name -> qty at once: qty is free only after the first rename
    wh.schemas.publish(
        "items",
        Column("item_id", "bigint", key=True, nullable=False, id=1),
        Column("qty", "text", id=2),
        Column("amount", "integer", id=3),
    )
    wh.apply(event(Op.CREATE, {"item_id": 4}, {"item_id": 4, "qty": "d", "amount": 4}, 20))
    assert _columns(wh) == ["item_id", "qty", "amount", "_cdc_pos", "_cdc_seq"]
    assert _columns(wh, "items__cdc_deleted") == ["item_id", "_cdc_pos", "_cdc_seq"]
    rows = wh.sql("SELECT item_id, qty, amount FROM replica.items ORDER BY 1")
    assert rows == [(1, "a", 1), (4, "d", 4)]
    # the delete is still remembered under the renamed key
    wh.apply(event(Op.CREATE, {"item_id": 2}, {"item_id": 2, "qty": "zombie", "amount": 0}, 5))
    assert [r[0] for r in wh.sql("SELECT item_id FROM replica.items ORDER BY 1")] == [1, 4]


def test_a_reset_forgets_the_recorded_columns(wh: Harness) -> None:
    wh.apply(event(Op.CREATE, {"id": 1}, {"id": 1, "name": "a", "qty": 1}, 10))
    topic = wh.records(event(Op.CREATE, {"id": 9}, {"id": 9}, 1))[0].tp
    wh.sink.reset_table(("public", "items"), [topic])
    assert wh.sql("SELECT count(*) FROM replica._cdc_columns") == [(3,)]  # recorded anew
    assert wh.sql("SELECT count(*) FROM replica.items") == [(0,)]
