"""Follow a renamed source column in place, by the column's identity.

The source gives each column an ``id`` that a rename keeps (:attr:`cdc.contracts.schema.Column.id`,
PostgreSQL's ``attnum``). The sink records, in ``_cdc_columns``, each target column's source id
and the names it had before. A recorded column whose id now has another name, free in the
table, is renamed (``ALTER TABLE ... RENAME COLUMN``; in the deleted keys too for a key
column), data kept. Records written before the rename keep arriving under the old name for a
while (in flight, or replayed after a restart): :func:`renamed` reads them under the new one.
A source without ids (MongoDB) records nothing, and a rename there is a drop and an add.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from cdc.contracts.schema import TableSchema
from cdc.support.logging import Logger
from sinks.postgres.catalog import COLUMNS, Ident, TableInfo


@dataclass(slots=True)
class Recorded:
    source_id: int
    former: list[str] = field(default_factory=list)


def follow(
    conn: psycopg.Connection[Any],
    info: TableInfo,
    published: TableSchema,
    ident: Ident,
    logger: Logger,
) -> None:
    """Rename what the source renamed, record every column's id, and set ``info.former``."""
    recorded = _load(conn, info, ident)
    ids = {c.id: c.name for c in published.columns if c.id is not None}
    while (move := _next_move(info, recorded, ids)) is not None:
        old, new = move
        _rename(conn, info, old, new)
        moved = recorded.pop(old)
        moved.former = [n for n in (*moved.former, old) if n != new]
        recorded[new] = moved
        _forget(conn, info, ident, old)
        _save(conn, info, ident, new, moved)
        logger.info("postgres.column_renamed", table=f"{info.schema}.{info.name}", old=old, new=new)
    for column in published.columns:
        known = recorded.get(column.name)
        if column.id is None or column.name not in info.columns:
            continue
        if known is None or known.source_id != column.id:
            recorded[column.name] = Recorded(column.id, known.former if known else [])
            _save(conn, info, ident, column.name, recorded[column.name])
    info.former = {
        old: name
        for name, known in recorded.items()
        for old in known.former
        if old not in info.columns
    }


def _next_move(
    info: TableInfo, recorded: Mapping[str, Recorded], ids: Mapping[int, str]
) -> tuple[str, str] | None:
    """A recorded column whose id has a new name that no column holds yet. One at a time:
    after ``b -> c`` then ``a -> b``, ``b`` is free only once the first is done."""
    for name, known in recorded.items():
        new = ids.get(known.source_id)
        if new is not None and new != name and name in info.columns and new not in info.columns:
            return name, new
    return None


def renamed(row: dict[str, Any], former: Mapping[str, str]) -> dict[str, Any]:
    """``row`` with values under a former name moved to the column's name (a value under the
    current name wins)."""
    out = {name: value for name, value in row.items() if name not in former}
    for name, value in row.items():
        if name in former:
            out.setdefault(former[name], value)
    return out


def _rename(conn: psycopg.Connection[Any], info: TableInfo, old: str, new: str) -> None:
    for table in info.holding(old):
        conn.execute(
            sql.SQL("ALTER TABLE {} RENAME COLUMN {} TO {}").format(
                table, sql.Identifier(old), sql.Identifier(new)
            )
        )
    info.columns = {(new if n == old else n): t for n, t in info.columns.items()}
    info.keys = [new if k == old else k for k in info.keys]
    # Every name-keyed fact of the column moves with it: an enum column unknown under its new
    # name would dead-letter a missing label row by row instead of stopping the sink.
    info.enums = {new if n == old else n for n in info.enums}


def _load(conn: psycopg.Connection[Any], info: TableInfo, ident: Ident) -> dict[str, Recorded]:
    rows = conn.execute(
        sql.SQL(
            "SELECT column_name, source_id, former FROM {} WHERE pipeline = %s AND sink = %s "
            "AND target_table = %s"
        ).format(sql.Identifier(info.schema, COLUMNS)),
        [ident.pipeline, ident.sink, info.name],
    )
    return {name: Recorded(int(source_id), list(former)) for name, source_id, former in rows}


def _save(
    conn: psycopg.Connection[Any], info: TableInfo, ident: Ident, name: str, known: Recorded
) -> None:
    conn.execute(
        sql.SQL(
            "INSERT INTO {} VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (pipeline, sink, "
            "target_table, column_name) DO UPDATE SET source_id = EXCLUDED.source_id, "
            "former = EXCLUDED.former"
        ).format(sql.Identifier(info.schema, COLUMNS)),
        [ident.pipeline, ident.sink, info.name, name, known.source_id, known.former],
    )


def _forget(conn: psycopg.Connection[Any], info: TableInfo, ident: Ident, name: str) -> None:
    conn.execute(
        sql.SQL(
            "DELETE FROM {} WHERE pipeline = %s AND sink = %s AND target_table = %s "
            "AND column_name = %s"
        ).format(sql.Identifier(info.schema, COLUMNS)),
        [ident.pipeline, ident.sink, info.name, name],
    )
