"""Read a table back, for ``cdc verify``.

The rows are the JSON objects the envelope's ``after`` carried, so ``cdc verify`` decodes them
as it decodes the source's (the plugin does not set ``rows_decoded``). The file is read in WAL
mode: a pipeline writing it meanwhile is not blocked, and the read sees the last commit.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
from cdc.contracts.errors import SinkFatal

from cdc_sink_sqlite import store


def read_rows(
    path: Path, schema: str, table: str, busy_timeout_s: float = 5.0
) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """``(key, row)`` of every current row of ``schema.table``; nothing if the sink has not
    created the table (yet).

    Raises:
        SinkFatal: no database file at ``path``, or one this sink did not write.
        SinkUnavailable: the database stayed locked past ``busy_timeout_s``.
    """
    if not path.is_file():
        raise SinkFatal(f"SQLite sink: no database file at {path}")
    try:
        # A plain connection: the reader changes no setting of the file (the sink made it WAL).
        con = sqlite3.connect(path, timeout=busy_timeout_s)
    except sqlite3.Error as exc:
        raise store.translate(exc, "opening for reading", path) from exc
    try:
        yield from _rows(con, (schema, table), path)
    finally:
        con.close()


def _rows(
    con: sqlite3.Connection, table: tuple[str, str], path: Path
) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    try:
        if table not in store.load_tables(con):
            return
        # One statement: one read transaction, so the rows are those of a single commit.
        name = store.table_ident(table)
        cursor = con.execute(f"SELECT key, row FROM {name} WHERE row IS NOT NULL")
        while rows := cursor.fetchmany(2000):
            for key, row in rows:
                yield orjson.loads(key), orjson.loads(row)
    except sqlite3.Error as exc:
        raise store.translate(exc, f"reading {table[0]}.{table[1]}", path) from exc
