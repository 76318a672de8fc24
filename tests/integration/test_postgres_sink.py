"""The PostgreSQL sink against a real PostgreSQL server: the conformance kit, replays,
reorderings, remembered deletes, truncates, composite keys and offsets kept with the data.

The target is a database of its own on the test server (``pg_db``), as a replica into another
database of the same server is; types are in ``test_postgres_sink_types.py``, schema changes,
crash safety and errors in ``test_postgres_sink_more.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

from cdc.contracts.errors import SinkFatal
from cdc.contracts.events import Op
from cdc.contracts.schema import Column
from cdc.contracts.sink import Sink, SinkContext
from cdc.testing.conformance import SinkConformance
from sinks.postgres import PostgresSink, PostgresSinkConfig, read_rows
from tests.integration.duckdb_kit import event, item
from tests.integration.postgres_sink_kit import Harness


class TestPostgresConformance(SinkConformance):
    @pytest.fixture(autouse=True)
    def _target(self, pg_db: str) -> None:
        self.config = PostgresSinkConfig(name="kit", dsn=pg_db, schema="replica")

    def make_sink(self, context: SinkContext) -> Sink:
        return PostgresSink(self.config, context)

    def current_rows(self) -> dict[int, dict[str, Any]]:
        return {key["id"]: row for key, row in read_rows(self.config, "public", "kit_items")}


def test_upsert_update_delete(wh: Harness) -> None:
    wh.apply(item(Op.CREATE, 1, 10, "a", 1), item(Op.CREATE, 2, 11, "b", 2))
    wh.apply(item(Op.UPDATE, 1, 12, "a2", 10), item(Op.DELETE, 2, 13))
    assert wh.names() == {1: ("a2", 10)}
    wh.apply(item(Op.CREATE, 2, 20, "b again", 3))
    assert wh.names() == {1: ("a2", 10), 2: ("b again", 3)}
    assert wh.sql("SELECT count(*) FROM replica.items__cdc_deleted") == [(0,)]


def test_newest_change_per_key_wins_within_a_batch(wh: Harness) -> None:
    wh.apply(
        item(Op.CREATE, 1, 10, "v1", 1),
        item(Op.UPDATE, 1, 12, "v3", 3),
        item(Op.UPDATE, 1, 11, "v2", 2),  # older, from another partition in real life
        item(Op.CREATE, 2, 13, "x", 1),
        item(Op.DELETE, 2, 14),
    )
    assert wh.names() == {1: ("v3", 3)}


def test_replay_and_reordering_change_nothing(wh: Harness) -> None:
    changes = [
        item(Op.CREATE, 1, 10, "a", 1),
        item(Op.UPDATE, 1, 11, "a2", 2),
        item(Op.CREATE, 2, 12, "b", 1),
        item(Op.DELETE, 2, 13),
        item(Op.CREATE, 3, 14, "c", 1),
    ]
    wh.apply(*changes)
    expected = wh.names()
    for change in reversed(changes):  # every change again, one a batch, newest first
        wh.apply(change)
    wh.apply(*reversed(changes))
    assert wh.names() == expected == {1: ("a2", 2), 3: ("c", 1)}


def test_a_delete_is_remembered_against_an_older_upsert_replayed(wh: Harness) -> None:
    wh.apply(item(Op.CREATE, 1, 10, "a", 1))
    wh.apply(item(Op.DELETE, 1, 40))
    wh.reopen()  # remembered durably, not in the sink's memory
    wh.apply(item(Op.UPDATE, 1, 35, "zombie", 4))
    wh.apply(item(Op.CREATE, 1, 10, "a", 1))
    assert wh.names() == {}
    assert wh.sql("SELECT id, _cdc_pos FROM replica.items__cdc_deleted") == [(1, 40)]
    wh.apply(item(Op.CREATE, 1, 50, "reborn", 5))
    assert wh.names() == {1: ("reborn", 5)}
    assert wh.sql("SELECT count(*) FROM replica.items__cdc_deleted") == [(0,)]


def test_an_older_delete_after_a_newer_upsert_is_ignored(wh: Harness) -> None:
    wh.apply(item(Op.CREATE, 1, 50, "new", 5))
    wh.apply(item(Op.DELETE, 1, 40))
    assert wh.names() == {1: ("new", 5)}
    assert wh.sql("SELECT count(*) FROM replica.items__cdc_deleted") == [(0,)]


def test_truncate_deletes_older_rows_and_ignores_older_changes(wh: Harness) -> None:
    wh.apply(item(Op.CREATE, 1, 10, "a", 1), item(Op.CREATE, 2, 11, "b", 2))
    wh.apply(event(Op.TRUNCATE, {}, None, 20), item(Op.CREATE, 3, 21, "c", 3))
    assert wh.names() == {3: ("c", 3)}
    wh.reopen()
    wh.apply(item(Op.UPDATE, 1, 15, "late", 9))  # older than the truncate
    assert wh.names() == {3: ("c", 3)}


def test_truncate_on_another_partition_is_ordered_by_position(wh: Harness) -> None:
    rows = wh.records(item(Op.CREATE, 1, 10, "a", 1), item(Op.CREATE, 2, 30, "b", 2), partition=1)
    truncate = wh.records(event(Op.TRUNCATE, {}, None, 20), partition=0)
    wh.write(rows + truncate)
    assert wh.names() == {2: ("b", 2)}


def test_composite_keys(wh: Harness) -> None:
    wh.schemas.publish(
        "lines",
        Column("order_id", "bigint", key=True, nullable=False),
        Column("line", "integer", key=True, nullable=False),
        Column("sku", "text"),
    )

    def line(op: Op, order: int, no: int, pos: int, sku: str = "") -> Any:
        key = {"order_id": order, "line": no}
        return event(op, key, None if op is Op.DELETE else {**key, "sku": sku}, pos, table="lines")

    wh.apply(line(Op.CREATE, 1, 1, 10, "x"), line(Op.CREATE, 1, 2, 11, "y"))
    wh.apply(line(Op.CREATE, 2, 1, 12, "z"), line(Op.UPDATE, 1, 2, 13, "y2"))
    wh.apply(line(Op.DELETE, 1, 1, 14))
    wh.apply(line(Op.CREATE, 1, 1, 10, "x"))  # a replay older than its delete
    rows = wh.sql("SELECT order_id, line, sku FROM replica.lines ORDER BY 1, 2")
    assert rows == [(1, 2, "y2"), (2, 1, "z")]
    keys = wh.sql(
        "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
        "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = 'replica.lines'::regclass "
        "AND i.indisprimary ORDER BY 1"
    )
    assert keys == [("line",), ("order_id",)]


def test_table_names_map_a_source_table_to_a_target_name(pg_db: str) -> None:
    harness = Harness(pg_db, table_names={"public.items": "stock"})
    try:
        harness.apply(item(Op.CREATE, 1, 10, "a", 1))
        assert harness.sql("SELECT id, name FROM replica.stock") == [(1, "a")]
        assert next(r for _, r in read_rows(harness.config, "public", "items"))["name"] == "a"
    finally:
        harness.close()


def test_offsets_are_stored_in_the_transaction_of_the_data(wh: Harness) -> None:
    records = wh.apply(item(Op.CREATE, 1, 10, "a", 1), item(Op.CREATE, 2, 11, "b", 2))
    stored = wh.sql("SELECT topic, partition, next_offset FROM replica._cdc_offsets")
    assert stored == [(records[0].topic, 0, records[-1].offset + 1)]
    wh.reopen()
    assert wh.sink.stored_offsets() == {records[0].tp: records[-1].offset + 1}


def test_a_failed_batch_leaves_neither_rows_nor_offsets(wh: Harness) -> None:
    wh.apply(item(Op.CREATE, 1, 10, "a", 1))
    before = wh.sql("SELECT next_offset FROM replica._cdc_offsets")
    wh.sql("ALTER TABLE replica.items ADD CONSTRAINT short CHECK (length(name) < 5)")
    with pytest.raises(SinkFatal, match="violates check constraint"):
        wh.apply(item(Op.CREATE, 2, 11, "b", 2), item(Op.CREATE, 3, 12, "much too long", 3))
    assert wh.names() == {1: ("a", 1)}
    assert wh.sql("SELECT next_offset FROM replica._cdc_offsets") == before


def test_two_sinks_share_a_schema_without_sharing_offsets(pg_db: str) -> None:
    first, second = Harness(pg_db, sink="one"), Harness(pg_db, sink="two")
    try:
        first.apply(item(Op.CREATE, 1, 10, "a", 1))
        assert second.sink.stored_offsets() == {}
    finally:
        first.close()
        second.close()


@pytest.fixture
def wh(pg_db: str) -> Any:
    harness = Harness(pg_db)
    yield harness
    harness.close()
