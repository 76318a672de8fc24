"""``cdc verify --repair``'s snapshot requests: re-read given keys between watermarks, and
delete those the table no longer has.

A repair request is an ordinary online snapshot request whose ``where`` selects its keys, with
the keys themselves beside it. Each key is given as JSON (``{"id": 42}``) and turned into the
table's own types by the server (``jsonb_populate_recordset`` over the table's row type), so
no value is ever spliced into SQL. The read of a chunk also reads, in the same snapshot, which
of the request's keys in the chunk's range the table lacks (or its row filter leaves out):
each becomes a delete of its key in the window, where a change the stream shows for that key
while the window is open wins over it, as over any row of the chunk: a concurrent insert is
never undone.
"""

from __future__ import annotations

from typing import Any

import orjson
import psycopg
from psycopg import sql

from connectors.postgres.snapshot.reader import SnapshotTable, _range
from snapshots.chunks import Chunk, KeyChunk


def _keys_of(table_id: sql.Composable, keys: list[dict[str, Any]]) -> sql.Composable:
    """The keys as rows of the table's type (other columns NULL), cast by the server."""
    return sql.SQL("jsonb_populate_recordset(NULL::{}, {}::jsonb)").format(
        table_id, sql.Literal(orjson.dumps(keys).decode())
    )


def keys_where(
    conn: psycopg.Connection[Any],
    table: tuple[str, str],
    key_columns: tuple[str, ...],
    keys: list[dict[str, Any]],
) -> str:
    """The ``--where`` of a repair request: the table's key among ``keys``."""
    columns = sql.SQL(", ").join(sql.Identifier(c) for c in key_columns)
    expression = sql.SQL("ROW({}) IN (SELECT {} FROM {} AS repair_keys)").format(
        columns,
        sql.SQL(", ").join(sql.Identifier("repair_keys", c) for c in key_columns),
        _keys_of(sql.Identifier(*table), keys),
    )
    return expression.as_string(conn)


def absent_query(
    table: SnapshotTable, chunk: Chunk, keys: tuple[dict[str, Any], ...]
) -> sql.Composed | None:
    """``COPY`` of the request's keys within ``chunk`` that the table lacks, or its row filter
    leaves out, as rows of its columns (the key's values, NULL elsewhere): what the read turns
    into deletes. ``None`` for a chunk with none to look for (a page range other than the
    first: its keys are looked for once, in the first)."""
    key = tuple(table.state.key)
    # A key range narrows the keys to the chunk's when the chunks range over key columns
    # (the other columns of the keys' rows are NULL); otherwise the first chunk looks for all.
    ranged = isinstance(chunk, KeyChunk) and set(table.chunk_key) <= set(key)
    if not keys or not key or (not ranged and chunk.index):
        return None
    table_id = sql.Identifier(table.info.schema, table.info.table)
    match = sql.SQL(" AND ").join(
        sql.SQL("present.{} = wanted.{}").format(sql.Identifier(c), sql.Identifier(c)) for c in key
    )
    conditions: list[sql.Composable] = [
        sql.SQL("NOT EXISTS (SELECT 1 FROM {} AS present WHERE {}{})").format(
            table_id,
            match,
            sql.SQL(" AND ({})").format(sql.SQL(table.where)) if table.where else sql.SQL(""),
        )
    ]
    if ranged:
        conditions.append(_range(table, chunk))
    select = sql.SQL("SELECT {} FROM {} AS wanted WHERE {}").format(
        sql.SQL(", ").join(sql.Identifier(c) for c in table.columns),
        _keys_of(table_id, list(keys)),
        sql.SQL(" AND ").join(conditions),
    )
    return sql.SQL("COPY ({}) TO STDOUT").format(select)
