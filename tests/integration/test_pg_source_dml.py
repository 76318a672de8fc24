"""PostgresSource against a real PostgreSQL 15: every DML kind, every common type, keys,
schema changes mid-stream. The log is the real EmbeddedLog."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdc.contracts.events import Op
from cdc.envelope import encode as envelope
from tests.integration.pg_source_kit import harness, rows_of, sql

TYPES_DDL = """
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE DOMAIN posint AS int4 CHECK (VALUE > 0);
CREATE TABLE everything (
  id int8 PRIMARY KEY, i2 int2, i4 int4, n numeric(12,3), nn numeric, f4 float4, f8 float8,
  b bool, t text, vc varchar(10), c char(3), by bytea, d date, tm time, ttz timetz,
  ts timestamp, tstz timestamptz, iv interval, u uuid, j json, jb jsonb,
  ai int4[], at text[], a2 int4[][], m mood, dm posint
)"""

FULL_ROW = """INSERT INTO everything VALUES (
  1, -32768, 2147483647, 123456789.125, 'NaN', 'NaN', '-Infinity',
  true, 'héllo "q"', 'short', 'ab', '\\xdeadbeef', '2024-02-29', '13:14:15.123456',
  '13:14:15+02', '2024-02-29 13:14:15.5', '2024-02-29 13:14:15.5+02',
  '1 year 2 mons 3 days 04:05:06.5',
  'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"a": [1, 2.5, null]}', '{"b": {"c": true}}',
  '{1,NULL,3}', '{"x",NULL,"y z"}', '{{1,2},{3,4}}', 'happy', 7)"""


@pytest.mark.pgcore
def test_every_type_and_nulls(pg_db: str, tmp_path: Path) -> None:
    sql(pg_db, TYPES_DDL)
    with harness(pg_db, tmp_path / "log", ["public.everything"]) as h:
        h.open()
        sql(pg_db, FULL_ROW, "INSERT INTO everything (id) VALUES (2)")
        events = h.collect(2)
        full, empty = events[0].after, events[1].after
        assert full is not None and empty is not None
        assert full["i2"] == -32768 and full["i4"] == 2147483647 and full["id"] == 1
        assert full["n"] == "123456789.125" and full["nn"] == "NAN"  # Debezium's string mode
        assert full["f4"] == "NaN" and full["f8"] == "-Infinity"
        assert full["b"] is True and full["t"] == 'héllo "q"' and full["c"] == "ab "
        assert full["by"] == "3q2+7w=="  # base64 of deadbeef
        assert full["d"] == "2024-02-29Z"  # isostring
        assert full["tstz"] == "2024-02-29T11:14:15.500000Z"
        assert full["u"] == "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"
        # io.debezium.data.Json: strings holding the server's text
        assert full["j"] == '{"a": [1, 2.5, null]}' and full["jb"] == '{"b": {"c": true}}'
        assert full["ai"] == [1, None, 3] and full["at"] == ["x", None, "y z"]
        assert full["a2"] == [[1, 2], [3, 4]]
        assert full["m"] == "happy" and full["dm"] == 7
        assert all(v is None for k, v in empty.items() if k != "id")
        for event in events:  # every value encodes as JSON
            envelope.encode_value(event, "pgt")
        [schema] = [s for s in h.schemas if s.table == "everything"]
        types = {c.name: c.type for c in schema.columns}
        assert (
            types["n"] == "numeric(12,3)" and types["a2"] == "integer[][]"
        )  # declared dimensions are published
        assert types["vc"] == "character varying(10)" and schema.key_columns == ["id"]


@pytest.mark.pgcore
def test_insert_update_delete_truncate_and_positions(pg_db: str, tmp_path: Path) -> None:
    sql(pg_db, "CREATE TABLE items (id int PRIMARY KEY, name text)")
    with harness(pg_db, tmp_path / "log", ["public.items"]) as h:
        h.open()
        sql(
            pg_db,
            "INSERT INTO items VALUES (1, 'a'), (2, 'b')",
            "UPDATE items SET name = 'a2' WHERE id = 1",
            "DELETE FROM items WHERE id = 2",
            "TRUNCATE items",
        )
        events = h.collect(5)
        assert [e.op for e in events] == [Op.CREATE, Op.CREATE, Op.UPDATE, Op.DELETE, Op.TRUNCATE]
        assert events[2].after == {"id": 1, "name": "a2"} and events[2].key == {"id": 1}
        # Debezium's key-only delete: every column, the non-key ones null (OBSERVED.md)
        assert events[3].key == {"id": 2} and events[3].before == {"id": 2, "name": None}
        assert events[4].key == {}
        assert [e.source.sequence for e in events[:2]] == [0, 1]
        positions = [e.source.position for e in events]
        assert positions == sorted(positions) and len(set(positions)) == 4
        assert all(e.source.tx_id for e in events) and all(e.source.ts_ms > 0 for e in events)
        assert all(e.source.extra["lsn"] > 0 for e in events)
        # Each transaction committed with its commit-end LSN, in order, and the log has them.
        lsns = [c["postgres"]["lsn"] for c in h.commits]
        assert lsns == sorted(lsns) and lsns[-1] > positions[-1]
        assert h.log.source_offsets()["postgres"]["lsn"] == lsns[-1]


@pytest.mark.pgcore
def test_primary_key_change_is_delete_then_create(pg_db: str, tmp_path: Path) -> None:
    sql(pg_db, "CREATE TABLE pk (id int PRIMARY KEY, v text)", "INSERT INTO pk VALUES (1, 'x')")
    with harness(pg_db, tmp_path / "log", ["public.pk"]) as h:
        h.open()
        sql(pg_db, "UPDATE pk SET id = 10 WHERE id = 1")
        delete, create = h.collect(2)
        assert (delete.op, delete.key, delete.after) == (Op.DELETE, {"id": 1}, None)
        assert (create.op, create.key, create.after) == (
            Op.CREATE,
            {"id": 10},
            {"id": 10, "v": "x"},
        )
        assert create.source.sequence == delete.source.sequence + 1
        topic = "pgt.public.pk"
        assert h.log.latest_value(topic, envelope.encode_key({"id": 1})) is None  # tombstone
        assert h.log.latest_value(topic, envelope.encode_key({"id": 10})) is not None


def test_replica_identity_full_and_configured_key(pg_db: str, tmp_path: Path) -> None:
    sql(
        pg_db,
        "CREATE TABLE full_t (id int PRIMARY KEY, v text)",
        "ALTER TABLE full_t REPLICA IDENTITY FULL",
        "CREATE TABLE nokey (code text, n int)",
        "ALTER TABLE nokey REPLICA IDENTITY FULL",
        "INSERT INTO full_t VALUES (1, 'old')",
        "INSERT INTO nokey VALUES ('k1', 1)",
    )
    tables = ["public.full_t", "public.nokey"]
    with harness(pg_db, tmp_path / "log", tables, key_columns={"public.nokey": ["code"]}) as h:
        h.open()
        sql(
            pg_db,
            "UPDATE full_t SET v = 'new' WHERE id = 1",
            "DELETE FROM full_t WHERE id = 1",
            "UPDATE nokey SET n = 2",
            "DELETE FROM nokey",
        )
        update, delete, nk_update, nk_delete = h.collect(4)
        assert update.before == {"id": 1, "v": "old"} and update.after == {"id": 1, "v": "new"}
        assert delete.before == {"id": 1, "v": "new"} and delete.key == {"id": 1}
        assert nk_update.op == Op.UPDATE and nk_update.key == {"code": "k1"}
        assert nk_delete.key == {"code": "k1"} and nk_delete.before == {"code": "k1", "n": 2}


def test_schema_changes_mid_stream(pg_db: str, tmp_path: Path) -> None:
    sql(pg_db, "CREATE TABLE evolving (id int PRIMARY KEY, a text, b text)")
    with harness(pg_db, tmp_path / "log", ["public.evolving"]) as h:
        h.open()
        sql(
            pg_db,
            "INSERT INTO evolving VALUES (1, 'a', 'b')",
            "ALTER TABLE evolving ADD COLUMN c int DEFAULT 5",
            "INSERT INTO evolving VALUES (2, 'a', 'b', 6)",
            "ALTER TABLE evolving DROP COLUMN b",
            "INSERT INTO evolving VALUES (3, 'a', 7)",
            "ALTER TABLE evolving RENAME COLUMN a TO a2",
            "UPDATE evolving SET c = 8 WHERE id = 1",
        )
        events = rows_of(h.collect(4), "evolving")
        assert events[0].after == {"id": 1, "a": "a", "b": "b"}
        assert events[1].after == {"id": 2, "a": "a", "b": "b", "c": 6}
        assert events[2].after == {"id": 3, "a": "a", "c": 7}
        assert events[3].after == {"id": 1, "a2": "a", "c": 8}
        shapes = [[c.name for c in s.columns] for s in h.schemas]
        assert shapes == [
            ["id", "a", "b"],
            ["id", "a", "b", "c"],
            ["id", "a", "c"],
            ["id", "a2", "c"],
        ]


@pytest.mark.pgcore
def test_large_transaction_comes_in_bounded_batches(pg_db: str, tmp_path: Path) -> None:
    sql(pg_db, "CREATE TABLE bulk (id int PRIMARY KEY, v text)")
    with harness(pg_db, tmp_path / "log", ["public.bulk"], max_batch_events=1000) as h:
        source = h.open()
        sql(pg_db, "INSERT INTO bulk SELECT g, 'v' || g FROM generate_series(1, 5500) g")
        sizes: list[int] = []
        while sum(sizes) < 5500:
            batch = source.poll(5000, 1.0)
            sizes.append(len(batch.events))
            assert (batch.commit_offsets is None) == (sum(sizes) < 5500)
            if batch.commit_offsets is not None:
                source.ack(batch.commit_offsets)
        assert max(sizes) <= 1000 and sum(sizes) == 5500
