"""Read a target table back, for ``cdc verify`` and tests.

Values come back by their meaning, as :func:`cdc.records.values.decoder` gives a source's:
numbers, booleans and ``bytea`` through psycopg's own loaders; every other type as the
server's text (UTC, ISO styles: :func:`sinks.postgres.connection.connect`) decoded by the
column's type. Python's ``date`` and ``datetime`` cannot hold ``infinity`` or a BC date, and
psycopg's loaders fail on them; the text path keeps them as PostgreSQL's text, which is what a
source's value decodes to as well. JSON documents stay their text.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

import psycopg
from psycopg import sql
from psycopg.types.string import TextLoader

from cdc.envelope.options import READABLE
from cdc.records.values import decoder
from sinks.postgres import catalog
from sinks.postgres.catalog import Ident
from sinks.postgres.config import PostgresSinkConfig
from sinks.postgres.connection import connect, translate

#: Types psycopg loads to the values the decoders give; every other type is read as text.
_NATIVE: Final = frozenset(
    {"bool", "int2", "int4", "int8", "oid", "float4", "float8", "numeric", "bytea"}
)
_AS_TEXT: Final = (
    "date",
    "time",
    "timetz",
    "timestamp",
    "timestamptz",
    "interval",
    "json",
    "jsonb",
    "uuid",
    "inet",
    "cidr",
    "macaddr",
    "macaddr8",
    "xml",
)
_FETCH: Final = 2000


def read_rows(
    config: PostgresSinkConfig, schema: str, table: str, *, pipeline: str | None = None
) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """Yield ``(key, row)`` of every row of source table ``schema.table`` in the target;
    nothing if the sink has not made it. ``pipeline`` is not needed: the table is named by the
    sink's configuration."""
    name = config.target_table((schema, table))
    try:
        conn = connect(config)
    except psycopg.Error as exc:  # connect translates its own; this is belt and braces
        raise translate(exc, config, "reading back") from None
    try:
        yield from _rows(conn, config, name)
    except psycopg.Error as exc:
        raise translate(exc, config, f"reading {schema}.{table}") from None
    finally:
        conn.close()


def _selected(info: catalog.TableInfo, column: str) -> sql.Composable:
    """A column as read: an enum's labels as text (psycopg knows no enum type by itself)."""
    if column not in info.enums:
        return sql.Identifier(column)
    as_text = "text[]" if info.columns[column].endswith("[]") else "text"
    return sql.SQL("{}::{}").format(sql.Identifier(column), sql.SQL(as_text))


def _rows(
    conn: psycopg.Connection[Any], config: PostgresSinkConfig, name: str
) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for type_name in _AS_TEXT:
        conn.adapters.register_loader(type_name, TextLoader)
    info = catalog.load(conn, config.schema_, name, Ident("", ""))
    if info is None:
        return
    columns = list(info.columns)
    decoders = [decoder(info.columns[c], READABLE) for c in columns]
    select = sql.SQL("SELECT {} FROM {}").format(
        sql.SQL(", ").join(_selected(info, c) for c in columns), info.target
    )
    with conn.transaction(), conn.cursor(name="cdc_read") as cur:
        cur.execute(select)
        while rows := cur.fetchmany(_FETCH):
            for values in rows:
                row = {c: d(v) for c, d, v in zip(columns, decoders, values, strict=True)}
                yield {k: row[k] for k in info.keys}, row
