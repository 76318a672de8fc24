"""Create a target table on first sight and follow its schema as the source changes it.

Rules: an added column is added (``ALTER TABLE ADD COLUMN``; existing rows get NULL); a type
change that widens (:func:`sinks.postgres.widen.is_widening`) is applied with ``ALTER COLUMN
... TYPE ... USING``; a dropped column stays, and new rows leave it NULL (the rows keep what
they held); a renamed column is renamed, data kept (:mod:`.renames`). Any other
type change, or a changed key, stops this sink alone with :class:`SinkFatal`, naming the fix.
Every change runs in the flush's transaction: it takes effect with the rows that need it.
"""

from __future__ import annotations

import re
from typing import Any, Final

import psycopg
from psycopg import sql

from cdc.contracts.errors import SinkFatal
from cdc.contracts.schema import TableSchema
from cdc.support.logging import Logger
from sinks.postgres import catalog, enums, renames
from sinks.postgres.catalog import HIDDEN, Ident, TableInfo
from sinks.postgres.types import target_type
from sinks.postgres.widen import is_widening


def prepare(
    conn: psycopg.Connection[Any],
    info: TableInfo | None,
    create_as: TableInfo,
    published: TableSchema | None,
    source: str,
    ident: Ident,
    logger: Logger,
) -> TableInfo:
    """The table's info after creating it (as ``create_as`` names it) or evolving it to match
    ``published``.

    Raises:
        SinkFatal: no schema to create the table from, a changed key, a column name the sink
            keeps for itself, or a type change that does not widen.
    """
    where = f"{source} (target {create_as.schema}.{create_as.name})"
    if published is None or not published.key_columns:
        if info is not None:
            return info
        raise SinkFatal(
            f"table {where}: no schema with key columns was published for it; the PostgreSQL "
            "sink creates typed tables from the pipeline's schemas and upserts by key"
        )
    _check_names(where, [c.name for c in published.columns])
    if info is None:
        create_as.columns = {
            c.name: _typed(conn, create_as, c.name, c.type) for c in published.columns
        }
        create_as.keys = list(published.key_columns)
        create_as.hashed = _hashed(published, create_as)
        catalog.create(conn, create_as, ident)
        logger.info("postgres.table_created", table=where, keys=create_as.keys)
        renames.follow(conn, create_as, published, ident, logger)
        return create_as
    added = catalog.add_deleted_columns(conn, info)  # before a rename or widening needs them
    if added:
        logger.info("postgres.deleted_keys_columns_added", table=where, columns=added)
    renames.follow(conn, info, published, ident, logger)
    _check_keys(where, source, info, published)
    for column in published.columns:
        _follow(conn, info, column.name, column.type, source, logger)
    return info


def _typed(conn: psycopg.Connection[Any], info: TableInfo, name: str, source_type: str) -> str:
    """A new column's type: the target's enum of the source type's name, else as mapped."""
    enum = enums.resolve(conn, info.schema, source_type)
    if enum is None:
        return target_type(source_type)
    info.enums.add(name)
    return enum


#: Target types whose every value fits a primary key's index entry (a btree takes about 2.7 kB).
_BOUNDED: Final = re.compile(
    r"smallint|integer|bigint|real|double precision|boolean|date|uuid|inet|cidr|macaddr8?|"
    r"numeric(\(.*\))?|(time|timestamp)(\(\d\))? with(out)? time zone|interval(\(\d\))?"
)


def _hashed(published: TableSchema, create_as: TableInfo) -> bool:
    """Whether a table keyed by every column (a keyless source table under REPLICA IDENTITY
    FULL) is to be keyed by their hash: unless each is NOT NULL and of a bounded type with
    equality (a link table of ids keeps its own primary key)."""
    if len(published.key_columns) != len(published.columns):
        return False
    return any(
        c.nullable
        or not (c.name in create_as.enums or _BOUNDED.fullmatch(create_as.columns[c.name]))
        for c in published.columns
    )


def _check_names(where: str, names: list[str]) -> None:
    taken = sorted(set(names) & HIDDEN)
    if taken:
        raise SinkFatal(
            f"table {where}: columns {taken} are the sink's own columns; map the table "
            "elsewhere or rename the columns in the source (rename_fields)"
        )


def _check_keys(where: str, source: str, info: TableInfo, published: TableSchema) -> None:
    if published.key_columns != info.keys:
        raise SinkFatal(
            f"table {where}: key columns changed from {info.keys} to {published.key_columns}; "
            "rows upserted by the old key cannot be matched by the new one. Rebuild the table "
            f"from the log: cdc sink FILE SINK --reset-table {source}"
        )


def _follow(
    conn: psycopg.Connection[Any],
    info: TableInfo,
    name: str,
    source_type: str,
    source: str,
    logger: Logger,
) -> None:
    where = f"{source} (target {info.schema}.{info.name})"
    old = info.columns.get(name)
    if old is None:
        _add(conn, info, name, source_type, where, logger)
        return
    new = target_type(source_type)
    if target_type(old) == new:
        return
    if not is_widening(old, new):
        raise SinkFatal(
            f"table {where}: column {name} changed type from {old!r} to {new!r}, which is not "
            "a widening change; the PostgreSQL sink stops rather than convert existing data "
            "(the other sinks go on). Rebuild the table from the log: cdc sink FILE SINK "
            f"--reset-table {source}"
        )
    for table in info.holding(name):
        conn.execute(
            sql.SQL("ALTER TABLE {} ALTER COLUMN {} TYPE {} USING {}::{}").format(
                table, sql.Identifier(name), sql.SQL(new), sql.Identifier(name), sql.SQL(new)
            )
        )
    info.columns[name] = new
    if info.hashed:  # the key's text may have changed with its type (1.5 -> 1.50)
        catalog.rehash(conn, info)
    logger.info("postgres.column_widened", table=where, column=name, old=old, new=new)


def _add(
    conn: psycopg.Connection[Any],
    info: TableInfo,
    name: str,
    source_type: str,
    where: str,
    logger: Logger,
) -> None:
    new = _typed(conn, info, name, source_type)
    for table in info.holding(name):
        conn.execute(
            sql.SQL("ALTER TABLE {} ADD COLUMN {} {}").format(
                table, sql.Identifier(name), sql.SQL(new)
            )
        )
    info.columns[name] = new
    logger.info("postgres.column_added", table=where, column=name, type=new)
