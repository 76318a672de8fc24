"""The source position the warehouse file is consistent up to, in ``_cdc.consistent_position``.

One row, written in the transaction that stores the offsets it stands for
(:class:`cdc.contracts.sink.PositionedSink`), so the file never claims a position its tables do
not hold; a table reset deletes it in its own transaction. The text is the source's position
as ``cdc status`` prints it (PostgreSQL: ``0/16B3748``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import duckdb

from sinks.duckdb.catalog import META
from sinks.duckdb.config import DuckDBSinkConfig
from sinks.duckdb.reader import open_for_reading

TABLE: Final = f"{META}.consistent_position"
DDL: Final = f"CREATE TABLE IF NOT EXISTS {TABLE} (position VARCHAR NOT NULL)"


def store(con: Any, position: str) -> None:
    """Replace the stored position (in the caller's transaction)."""
    con.execute(f"DELETE FROM {TABLE}")
    con.execute(f"INSERT INTO {TABLE} VALUES (?)", [position])


def forget(con: Any) -> None:
    """No position stored (in the caller's transaction): the data no longer holds it."""
    con.execute(f"DELETE FROM {TABLE}")


def read(con: Any) -> str | None:
    """The stored position; ``None`` when none is (or the file predates it)."""
    try:
        row = con.execute(f"SELECT position FROM {TABLE}").fetchone()
    except duckdb.CatalogException:
        return None
    return None if row is None else str(row[0])


def read_consistent_position(config: DuckDBSinkConfig, *, pipeline: str) -> str | None:
    """For ``cdc status``: the position stored in the file (``pipeline``: the file is the
    sink's own); ``None`` when there is no file yet."""
    path = Path(config.path)
    if not path.is_file():
        return None
    with open_for_reading(path) as con:
        return read(con)
