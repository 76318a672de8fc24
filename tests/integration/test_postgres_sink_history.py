"""The PostgreSQL sink's history mode (``mode: history``): every version in
``<table>__history``, SCD type 2, against a real PostgreSQL server."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
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

T0 = 1_700_000_000_000  # duckdb_kit's events commit at T0 + pos (ms)


@pytest.fixture
def wh(pg_db: str) -> Iterator[Harness]:
    harness = Harness(pg_db, mode="history")
    yield harness
    harness.close()


def _at(pos: int) -> datetime:
    return datetime.fromtimestamp((T0 + pos) / 1000, UTC)


def _versions(wh: Harness) -> list[tuple[Any, ...]]:
    return wh.sql(
        "SELECT id, name, qty, op, valid_from, valid_to, _cdc_pos FROM replica.items__history "
        "ORDER BY id, _cdc_pos"
    )


def test_every_version_is_kept_and_a_delete_is_a_tombstone(wh: Harness) -> None:
    wh.apply(item(Op.CREATE, 1, 10, "a", 1), item(Op.UPDATE, 1, 11, "a2", 2))
    wh.apply(item(Op.CREATE, 2, 12, "b", 1))
    wh.apply(item(Op.DELETE, 1, 13), item(Op.UPDATE, 2, 14, "b2", 2))
    assert _versions(wh) == [
        (1, "a", 1, "c", _at(10), _at(11), 10),
        (1, "a2", 2, "u", _at(11), _at(13), 11),
        (1, None, None, "d", _at(13), _at(13), 13),
        (2, "b", 1, "c", _at(12), _at(14), 12),
        (2, "b2", 2, "u", _at(14), None, 14),
    ]
    assert wh.names() == {2: ("b2", 2)}
    open_rows = wh.sql("SELECT id FROM replica.items__history WHERE valid_to IS NULL")
    assert open_rows == [(2,)]  # exactly the current rows


def test_replays_and_older_changes_add_no_version(wh: Harness) -> None:
    changes = [item(Op.CREATE, 1, 10, "a", 1), item(Op.UPDATE, 1, 11, "a2", 2)]
    wh.apply(*changes)
    before = _versions(wh)
    wh.apply(*changes)  # a re-read topic: new offsets, same positions
    wh.apply(item(Op.UPDATE, 1, 9, "older", 0))
    wh.reopen()
    wh.apply(*changes)
    assert _versions(wh) == before
    wh.apply(item(Op.DELETE, 1, 20))
    wh.apply(item(Op.UPDATE, 1, 15, "zombie", 3))  # older than the delete
    assert [v[3] for v in _versions(wh)] == ["c", "u", "d"]


def test_a_truncate_closes_the_open_versions(wh: Harness) -> None:
    wh.apply(item(Op.CREATE, 1, 10, "a", 1), item(Op.CREATE, 2, 11, "b", 2))
    wh.apply(event(Op.TRUNCATE, {}, None, 20), item(Op.CREATE, 3, 21, "c", 3))
    versions = _versions(wh)
    assert [(v[0], v[5]) for v in versions] == [(1, _at(20)), (2, _at(20)), (3, None)]
    assert wh.names() == {3: ("c", 3)}


def test_schema_changes_reach_the_history(wh: Harness) -> None:
    wh.apply(item(Op.CREATE, 1, 10, "a", 1))
    wh.schemas.publish(
        "items",
        Column("id", "bigint", key=True, nullable=False),
        Column("name", "text"),
        Column("qty", "bigint"),
        Column("note", "text"),
    )
    wh.apply(item(Op.UPDATE, 1, 20, "a2", 2**40, note="n"))
    rows = wh.sql("SELECT qty, note FROM replica.items__history ORDER BY _cdc_pos")
    assert rows == [(1, None), (2**40, "n")]


def test_a_reset_keeps_the_old_history_aside(wh: Harness) -> None:
    records = wh.apply(item(Op.CREATE, 1, 10, "a", 1))
    wh.sink.reset_table(("public", "items"), [records[0].tp])
    kept = wh.sql(
        "SELECT tablename FROM pg_tables WHERE schemaname = 'replica' "
        "AND tablename LIKE 'items__history_before_reset_%%'"
    )
    assert len(kept) == 1
    assert wh.sql(f"SELECT count(*) FROM replica.{kept[0][0]}") == [(1,)]
    assert wh.sql("SELECT count(*) FROM replica.items__history") == [(0,)]


def test_a_column_named_like_the_history_columns_stops_history_mode(pg_db: str) -> None:
    harness = Harness(pg_db, mode="history")
    try:
        harness.schemas.publish(
            "items", Column("id", "bigint", key=True, nullable=False), Column("op", "text")
        )
        with pytest.raises(SinkFatal, match=r"columns \['op'\].*mode: current"):
            harness.apply(event(Op.CREATE, {"id": 1}, {"id": 1, "op": "x"}, 10))
    finally:
        harness.close()


class TestPostgresHistoryConformance(SinkConformance):
    """The kit's checks hold in history mode too (the current table is what it reads)."""

    @pytest.fixture(autouse=True)
    def _target(self, pg_db: str) -> None:
        self.config = PostgresSinkConfig(name="kit", dsn=pg_db, schema="replica", mode="history")

    def make_sink(self, context: SinkContext) -> Sink:
        return PostgresSink(self.config, context)

    def current_rows(self) -> dict[int, dict[str, Any]]:
        return {key["id"]: row for key, row in read_rows(self.config, "public", "kit_items")}
