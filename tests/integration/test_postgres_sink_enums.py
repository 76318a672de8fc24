"""Enum columns in the PostgreSQL sink, against a real PostgreSQL server: the target's enum of
the same name where it has one (in the sink's schema, the schema the source named, or on the
search path), else text; a label the target's enum lacks stops the sink with the fix."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from cdc.contracts.errors import SinkFatal
from cdc.contracts.events import Op
from cdc.contracts.schema import Column
from sinks.postgres import read_rows
from tests.integration.duckdb_kit import event
from tests.integration.postgres_sink_kit import SCHEMA, Harness


def _execute(dsn: str, *statements: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement.encode())  # the tests' own literal SQL


def _harness(dsn: str, mood: str = "mood") -> Harness:
    harness = Harness(dsn)
    harness.schemas.publish(
        "feelings",
        Column("id", "bigint", key=True, nullable=False),
        Column("kind", mood, key=True, nullable=False),
        Column("now", mood),
        Column("past", f"{mood}[]"),
    )
    return harness


def _feeling(op: Op, id_: int, kind: str, pos: int, now: Any = None, past: Any = None) -> Any:
    key = {"id": id_, "kind": kind}
    row = None if op is Op.DELETE else {**key, "now": now, "past": past}
    return event(op, key, row, pos, table="feelings")


def _types(wh: Harness) -> dict[str, tuple[str, str]]:
    """Each column's type and kind (``e``: an enum; arrays by their element's)."""
    rows = wh.sql(
        "SELECT a.attname, format_type(a.atttypid, a.atttypmod), "
        "coalesce(e.typtype, t.typtype)::text FROM pg_attribute a "
        "JOIN pg_type t ON t.oid = a.atttypid LEFT JOIN pg_type e "
        "ON t.typcategory = 'A' AND e.oid = t.typelem "
        "WHERE a.attrelid = 'replica.feelings'::regclass AND a.attnum > 0"
    )
    return {n: (t, k) for n, t, k in rows}


def _rows(wh: Harness) -> dict[int, tuple[Any, ...]]:
    found = read_rows(wh.config, "public", "feelings")
    return {k["id"]: (r["kind"], r["now"], r["past"]) for k, r in found}


@pytest.mark.parametrize(
    ("where", "published", "spelled"),
    [
        (SCHEMA, "mood", "replica.mood"),  # in the sink's schema
        ("public", "mood", "mood"),  # on the search path
        ("sales", "sales.mood", "sales.mood"),  # in the schema the source named
    ],
)
def test_a_source_enum_takes_the_targets_enum_of_its_name(
    pg_db: str, where: str, published: str, spelled: str
) -> None:
    _execute(
        pg_db,
        f"CREATE SCHEMA IF NOT EXISTS {where}",
        f"CREATE TYPE {where}.mood AS ENUM ('sad', 'ok', 'happy')",
    )
    wh = _harness(pg_db, published)
    try:
        wh.apply(
            _feeling(Op.CREATE, 1, "ok", 10, "happy", ["sad", "happy"]),
            _feeling(Op.CREATE, 2, "sad", 11, "sad", []),
            _feeling(Op.CREATE, 3, "happy", 12, None, None),
        )
        wh.apply(
            _feeling(Op.UPDATE, 2, "sad", 13, "ok", ["ok"]), _feeling(Op.DELETE, 3, "happy", 14)
        )
        types = _types(wh)
        assert types["now"] == (spelled, "e") and types["kind"] == (spelled, "e")
        assert types["past"] == (f"{spelled}[]", "e")
        assert _rows(wh) == {1: ("ok", "happy", ["sad", "happy"]), 2: ("sad", "ok", ["ok"])}
        # Typed as the enum: ordered by its labels' order, not alphabetically.
        ordered = wh.sql("SELECT id FROM replica.feelings ORDER BY now")
        assert ordered == [(2,), (1,)]
        deleted = wh.sql("SELECT id, kind::text FROM replica.feelings__cdc_deleted")
        assert deleted == [(3, "happy")]
        wh.reopen()  # read back from the catalog: the same column types, nothing altered
        wh.apply(_feeling(Op.CREATE, 4, "ok", 15, "sad", ["sad"]))
        assert _types(wh) == types and _rows(wh)[4] == ("ok", "sad", ["sad"])
    finally:
        wh.close()


def test_without_the_enum_on_the_target_the_labels_are_text(pg_db: str) -> None:
    _execute(pg_db, "CREATE TYPE public.other AS ENUM ('x')")  # another name: not used
    wh = _harness(pg_db)
    try:
        wh.apply(_feeling(Op.CREATE, 1, "ok", 10, "happy", ["sad", "happy"]))
        types = _types(wh)
        assert types["now"] == ("text", "b") and types["past"] == ("text[]", "b")
        assert _rows(wh) == {1: ("ok", "happy", ["sad", "happy"])}
        _execute(pg_db, "CREATE TYPE replica.mood AS ENUM ('happy')")
        wh.reopen()  # an enum made later leaves the text columns as they are
        wh.apply(_feeling(Op.CREATE, 2, "new", 11, "unknown", ["x"]))
        assert _types(wh) == types and _rows(wh)[2] == ("new", "unknown", ["x"])
    finally:
        wh.close()


def test_an_added_enum_column_takes_the_targets_enum(pg_db: str) -> None:
    _execute(pg_db, "CREATE SCHEMA replica", "CREATE TYPE replica.mood AS ENUM ('sad', 'ok')")
    wh = Harness(pg_db)
    try:
        wh.apply(event(Op.CREATE, {"id": 1}, {"id": 1, "name": "a", "qty": 1}, 10))
        columns = wh.schemas.get("public", "items")
        assert columns is not None
        wh.schemas.publish("items", *columns.columns, Column("mood", "mood"))
        wh.apply(event(Op.CREATE, {"id": 2}, {"id": 2, "name": "b", "qty": 2, "mood": "ok"}, 11))
        types = dict(
            wh.sql(
                "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
                "WHERE attrelid = 'replica.items'::regclass AND attname = 'mood'"
            )
        )
        assert types == {"mood": "replica.mood"}
        assert wh.sql("SELECT id, mood::text FROM replica.items ORDER BY id") == [
            (1, None),
            (2, "ok"),
        ]
    finally:
        wh.close()


@pytest.mark.parametrize("column", ["now", "past"])
def test_a_label_the_targets_enum_lacks_stops_the_sink_with_the_fix(
    pg_db: str, column: str
) -> None:
    _execute(pg_db, "CREATE SCHEMA replica", "CREATE TYPE replica.mood AS ENUM ('sad', 'ok')")
    wh = _harness(pg_db)
    try:
        wh.apply(_feeling(Op.CREATE, 1, "ok", 10, "sad", ["sad"]))
        values = {"now": ("secret-label", None), "past": ("ok", ["ok", "secret-label"])}[column]
        batch = wh.records(_feeling(Op.CREATE, 2, "ok", 11, *values))
        with pytest.raises(SinkFatal) as stopped:
            wh.write(batch)
        text = str(stopped.value)
        assert text.startswith("PostgreSQL sink wh: table public.feelings (target ")
        assert f"column {column} is the target's enum replica.mood" in text
        assert "ALTER TYPE replica.mood ADD VALUE" in text
        assert f"ALTER TABLE replica.feelings ALTER COLUMN {column} TYPE text" in text
        assert "secret-label" not in text  # no value in an error
        assert sorted(_rows(wh)) == [1]  # nothing of the batch applied, nor its offsets
        assert wh.sql("SELECT next_offset FROM replica._cdc_offsets") == [(1,)]
        _execute(pg_db, "ALTER TYPE replica.mood ADD VALUE 'secret-label'")  # the fix
        wh.reopen()
        wh.write(batch)  # the runner's retry after the restart
        assert sorted(_rows(wh)) == [1, 2]
    finally:
        wh.close()


def test_a_label_the_renamed_enum_column_lacks_still_stops_the_sink(pg_db: str) -> None:
    # The sink knows its enum columns by name: a renamed one must stay known under its new
    # name, or a missing label there is dead-lettered row by row instead of stopping the sink.
    _execute(pg_db, "CREATE SCHEMA replica", "CREATE TYPE replica.mood AS ENUM ('sad', 'ok')")
    wh = Harness(pg_db)

    def publish(now: str) -> None:
        wh.schemas.publish(
            "feelings",
            Column("id", "bigint", key=True, nullable=False, id=1),
            Column("kind", "mood", key=True, nullable=False, id=2),
            Column(now, "mood", id=3),
        )

    try:
        publish("now")
        first = {"id": 1, "kind": "ok", "now": "sad"}
        wh.apply(event(Op.CREATE, {"id": 1, "kind": "ok"}, first, 10, table="feelings"))
        publish("feeling_now")  # renamed in the source
        row = {"id": 2, "kind": "ok", "feeling_now": "secret-label"}
        batch = wh.records(event(Op.CREATE, {"id": 2, "kind": "ok"}, row, 11, table="feelings"))
        with pytest.raises(SinkFatal) as stopped:
            wh.write(batch)
        assert "column feeling_now is the target's enum replica.mood" in str(stopped.value)
        assert wh.sql("SELECT next_offset FROM replica._cdc_offsets") == [(1,)]
    finally:
        wh.close()
