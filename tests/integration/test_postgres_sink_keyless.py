"""A keyless source table (REPLICA IDENTITY FULL) in the PostgreSQL sink, against a real
PostgreSQL server.

The source keys such a table's records by every column, and an update that changes a row is a
delete of the old row and an insert of the new one (its key changed). The sink agrees with the
DuckDB sink: a row is its values, identical rows are one row. Where the columns can be NULL, or
have no equality or no size bound, the target's primary key is ``_cdc_key``, the hash of every
column, so NULLs, ``json`` and long text are matched as well as the rest.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cdc.contracts.events import Op
from cdc.contracts.schema import Column
from sinks.postgres import read_rows
from tests.integration.duckdb_kit import event
from tests.integration.pg_source_kit import harness, query, sql
from tests.integration.postgres_sink_kit import Harness, records_of

LONG = "x" * 10_000  # past a btree entry's size: no primary key could hold it


def _publish(wh: Harness, amount: str = "numeric(6,1)") -> None:
    wh.schemas.publish(
        "log",
        Column("a", "integer", key=True),
        Column("note", "text", key=True),
        Column("doc", "json", key=True),
        Column("amount", amount, key=True),
    )


@pytest.fixture
def wh(pg_db: str) -> Iterator[Harness]:
    harness = Harness(pg_db)
    _publish(harness)
    yield harness
    harness.close()


def _row(a: int, note: str | None, doc: str | None = None, amount: str = "1.5") -> dict[str, Any]:
    return {"a": a, "note": note, "doc": doc, "amount": amount}


def _insert(row: dict[str, Any], pos: int, seq: int = 0) -> Any:
    return event(Op.CREATE, row, row, pos, seq, table="log")


def _delete(row: dict[str, Any], pos: int, seq: int = 0) -> Any:
    return event(Op.DELETE, row, row, pos, seq, table="log")  # FULL: the whole old row


def _update(old: dict[str, Any], new: dict[str, Any], pos: int) -> list[Any]:
    """As the source writes an update of a keyless row: its key (every column) changed."""
    return [_delete(old, pos, 0), _insert(new, pos, 1)]


def _rows(wh: Harness) -> list[tuple[Any, ...]]:
    """The rows as ``cdc verify`` reads them (the amount, a ``Decimal``, as its text)."""
    found = [(*r.values(),) for _, r in read_rows(wh.config, "public", "log")]
    return sorted(((*r[:-1], str(r[-1])) for r in found), key=repr)


def test_rows_are_their_values_nulls_json_and_long_text_included(wh: Harness) -> None:
    one, two = _row(1, "x", '{"k": [1]}'), _row(2, None)
    three = _row(3, LONG, None, "2.0")
    wh.apply(_insert(one, 10), _insert(one, 11), _insert(two, 12), _insert(three, 13))
    assert _rows(wh) == sorted([(1, "x", '{"k": [1]}', "1.5"), (2, None, None, "1.5"),
                                (3, LONG, None, "2.0")], key=repr)  # fmt: skip
    wh.apply(*_update(two, _row(2, "now"), 14), _delete(three, 15))
    assert _rows(wh) == [(1, "x", '{"k": [1]}', "1.5"), (2, "now", None, "1.5")]
    # The same values in a column of their own: an empty string is not NULL.
    wh.apply(_insert(_row(4, ""), 16), _insert(_row(4, None), 17), _delete(_row(4, ""), 18))
    assert _rows(wh)[-1] == (4, None, None, "1.5") and len(_rows(wh)) == 3
    assert wh.sql("SELECT count(*) FROM replica.log__cdc_deleted") == [(3,)]
    keys = wh.sql(
        "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
        "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = 'replica.log'::regclass "
        "AND i.indisprimary"
    )
    assert keys == [("_cdc_key",)]


def test_replays_and_older_changes_change_nothing(wh: Harness) -> None:
    one, two = _row(1, "a"), _row(2, None, '{"b": 2}')
    batch = [_insert(one, 10), _insert(two, 11), *_update(one, _row(1, "b"), 12)]
    wh.apply(*batch, _delete(two, 13))
    expected = [(1, "b", None, "1.5")]
    assert _rows(wh) == expected
    wh.apply(*batch)  # replayed (as a restart before the offsets reached the target)
    wh.apply(_insert(two, 11), _insert(one, 10))  # older than their deletes: never again
    assert _rows(wh) == expected
    wh.reopen()  # the hashed key read back from the catalog
    wh.apply(_delete(_row(1, "b"), 20))
    assert _rows(wh) == []


def test_a_widened_column_keeps_matching_rows_written_before(wh: Harness) -> None:
    wh.apply(_insert(_row(1, None, amount="1.5"), 10), _insert(_row(2, "b"), 11))
    _publish(wh, amount="numeric(8,2)")  # 1.5 now prints 1.50: the key's text changes
    wh.apply(_delete(_row(1, None, amount="1.50"), 12))
    assert _rows(wh) == [(2, "b", None, "1.50")]


def test_a_widened_column_keeps_its_deleted_keys_guarding(wh: Harness) -> None:
    # The deleted keys are matched by the hash too: a late, older insert of a deleted row, in
    # the widened column's new text, must still meet its delete.
    one = _row(1, None, amount="1.5")
    wh.apply(_insert(one, 10), _insert(_row(2, "b"), 11), _delete(one, 12))
    _publish(wh, amount="numeric(8,2)")  # 1.5 now prints 1.50: the key's text changes
    wh.apply(_insert(_row(2, "c"), 13))  # the widening is applied with this batch
    wh.apply(_insert(_row(1, None, amount="1.50"), 10))  # a replay, older than its delete
    assert _rows(wh) == [(2, "b", None, "1.50"), (2, "c", None, "1.50")]
    wh.reopen()  # the deleted keys' columns read back from the catalog
    wh.apply(_insert(_row(1, None, amount="1.50"), 10))
    assert _rows(wh) == [(2, "b", None, "1.50"), (2, "c", None, "1.50")]
    wh.apply(_insert(_row(1, None, amount="1.50"), 14))  # newer than the delete: back
    assert len(_rows(wh)) == 3


def test_deleted_keys_kept_by_their_hash_alone_get_their_columns(wh: Harness) -> None:
    # A sink before the deleted keys held their columns kept the hash alone: the columns are
    # added (NULL for the keys deleted then, whose hash still guards while no type changes).
    one, two = _row(1, None), _row(2, "b")
    wh.apply(_insert(one, 10), _insert(two, 11), _delete(one, 12))
    wh.sql("ALTER TABLE replica.log__cdc_deleted DROP a, DROP note, DROP doc, DROP amount")
    wh.reopen()
    wh.apply(_insert(one, 10), _delete(two, 13))  # a replay, older than its delete
    assert _rows(wh) == []
    kept = "SELECT a, note FROM replica.log__cdc_deleted ORDER BY a NULLS FIRST"
    assert wh.sql(kept) == [(None, None), (2, "b")]
    _publish(wh, amount="numeric(8,2)")
    wh.apply(_insert(_row(3, "c"), 14))  # the widening is applied with this batch
    wh.apply(_insert(_row(2, "b", amount="1.50"), 11))  # older than its delete
    assert _rows(wh) == [(3, "c", None, "1.50")]


def test_a_truncate_and_history_mode(pg_db: str) -> None:
    wh = Harness(pg_db, mode="history")
    try:
        _publish(wh)
        one, two = _row(1, None, '{"k": 1}'), _row(2, "b")
        wh.apply(_insert(one, 10), _insert(two, 11), *_update(one, _row(1, "c"), 12))
        versions = wh.sql(
            "SELECT a, note, op, valid_to IS NULL FROM replica.log__history ORDER BY _cdc_pos, "
            "_cdc_seq"
        )
        assert versions == [
            (1, None, "c", False),
            (2, "b", "c", True),
            (1, None, "d", False),
            (1, "c", "c", True),
        ]
        wh.apply(event(Op.TRUNCATE, {}, None, 20, table="log"), _insert(two, 21))
        assert _rows(wh) == [(2, "b", None, "1.5")]
        open_rows = wh.sql("SELECT a, _cdc_pos FROM replica.log__history WHERE valid_to IS NULL")
        assert open_rows == [(2, 21)]
    finally:
        wh.close()


def test_a_link_table_of_ids_keeps_its_own_primary_key(wh: Harness) -> None:
    wh.schemas.publish(
        "links",
        Column("left_id", "bigint", key=True, nullable=False),
        Column("right_id", "bigint", key=True, nullable=False),
    )
    link = {"left_id": 1, "right_id": 2}
    wh.apply(event(Op.CREATE, link, link, 10, table="links"))
    wh.apply(event(Op.CREATE, link, link, 11, table="links"))
    keys = wh.sql(
        "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
        "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = 'replica.links'::regclass "
        "AND i.indisprimary ORDER BY a.attnum"
    )
    assert keys == [("left_id",), ("right_id",)]
    assert wh.sql("SELECT left_id, right_id FROM replica.links") == [(1, 2)]


def test_a_keyless_source_table_streamed_from_postgresql(
    pg_db: str, pg_server: Any, tmp_path: Path
) -> None:
    """The source's own records and published schema of a keyless table (REPLICA IDENTITY
    FULL): after inserts (a duplicate among them), updates and deletes, the target holds the
    source's distinct rows."""
    sql(
        pg_db,
        "CREATE TABLE public.k (a int, b text, j json, n numeric)",
        "ALTER TABLE public.k REPLICA IDENTITY FULL",
    )
    pg_server.create_database("keyless_target")
    try:
        with harness(pg_db, tmp_path / "log", ["public.k"]) as source:
            source.open()
            sql(
                pg_db,
                "INSERT INTO k VALUES (1, 'x', '{\"a\": [1]}', 1.50), (1, 'x', '{\"a\": [1]}', "
                f"1.50), (2, NULL, NULL, NULL), (3, '{LONG}', '[]', -0.5), (4, '', 'null', 0)",
                "UPDATE k SET b = 'y', n = 2 WHERE a = 2",
                "DELETE FROM k WHERE a = 3",
                "UPDATE k SET j = '{\"a\": [2]}' WHERE a = 4",
            )
            events = source.collect(10)
            published = source.schemas[-1]
        assert published.key_columns == ["a", "b", "j", "n"]  # keyed by every column
        target = pg_server.dsn_for(dbname="keyless_target")
        wh = Harness(target)
        try:
            wh.schemas.tables[("public", "k")] = published
            wh.reopen()  # the sink's context names the table
            wh.write(records_of(events, {}))
            distinct = "SELECT DISTINCT a, b, j::text, n FROM {} ORDER BY 1, 2"
            assert wh.sql(distinct.format("replica.k")) == query(pg_db, distinct.format("k"))
        finally:
            wh.close()
    finally:
        pg_server.drop_database("keyless_target")
