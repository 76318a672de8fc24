"""One key's state in the target database, for ``cdc trace``: its row (read as ``cdc verify``
reads rows) and the position stored with it (``_cdc_pos``/``_cdc_seq``), or the position of its
delete from ``<table>__cdc_deleted``."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from cdc.envelope.options import READABLE
from cdc.records.values import decoder
from sinks.postgres import catalog
from sinks.postgres.catalog import POSITION, SEQUENCE, Ident, TableInfo
from sinks.postgres.config import PostgresSinkConfig
from sinks.postgres.connection import connect, translate
from sinks.postgres.reader import _AS_TEXT, _selected

Connection = psycopg.Connection[Any]
KeyState = tuple[dict[str, Any] | None, tuple[int, int] | None]


def read_key(
    config: PostgresSinkConfig,
    schema: str,
    table: str,
    key: dict[str, Any],
    *,
    pipeline: str | None = None,
    any_type: bool = False,
) -> KeyState | None:
    """``(row, (position, sequence))`` of ``key``; ``(None, position)`` for a deleted key the
    target remembers; ``None`` when it holds nothing of it.

    Raises:
        NotImplementedError: the table is keyed by a hash, not by ``key``'s columns.
    """
    from psycopg.types.string import TextLoader

    name = config.target_table((schema, table))
    conn = connect(config)
    try:
        for type_name in _AS_TEXT:
            conn.adapters.register_loader(type_name, TextLoader)
        info = catalog.load(conn, config.schema_, name, Ident("", ""))
        if info is None:
            return None
        if info.hashed or sorted(info.keys) != sorted(key):
            # Keyed by a hash of every column (a keyless source table): read it whole instead.
            raise NotImplementedError(f"{schema}.{table} is not keyed by {sorted(key)}")
        return _current(conn, info, key) or _deleted(conn, info, key)
    except psycopg.Error as exc:
        raise translate(exc, config, f"reading a key of {schema}.{table}") from None
    finally:
        conn.close()


def _where(info: TableInfo, key: dict[str, Any]) -> tuple[sql.Composable, list[str | None]]:
    # Compared as text: the key comes as JSON values, the columns are typed.
    where = sql.SQL(" AND ").join(
        sql.SQL("{}::text IS NOT DISTINCT FROM %s").format(sql.Identifier(k)) for k in info.keys
    )
    return where, [None if key[k] is None else str(key[k]) for k in info.keys]


def _current(
    conn: psycopg.Connection[Any], info: TableInfo, key: dict[str, Any]
) -> KeyState | None:
    columns = list(info.columns)
    where, args = _where(info, key)
    query = sql.SQL("SELECT {}, {}, {} FROM {} WHERE {}").format(
        sql.SQL(", ").join(_selected(info, c) for c in columns),
        sql.Identifier(POSITION),
        sql.Identifier(SEQUENCE),
        info.target,
        where,
    )
    found = conn.execute(query, args).fetchone()
    if found is None:
        return None
    decoders = [decoder(info.columns[c], READABLE) for c in columns]
    row = {c: d(v) for c, d, v in zip(columns, decoders, found[:-2], strict=True)}
    return row, (int(found[-2]), int(found[-1]))


def _deleted(
    conn: psycopg.Connection[Any], info: TableInfo, key: dict[str, Any]
) -> KeyState | None:
    where, args = _where(info, key)
    query = sql.SQL("SELECT {}, {} FROM {} WHERE {}").format(
        sql.Identifier(POSITION), sql.Identifier(SEQUENCE), info.deleted, where
    )
    try:
        found = conn.execute(query, args).fetchone()
    except psycopg.errors.UndefinedTable:
        return None
    return None if found is None else (None, (int(found[0]), int(found[1])))
