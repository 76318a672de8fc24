"""``cdc sink FILE NAME --rebuild --into NEW.duckdb --as-of POSITION``: a table's state as of
a past source position, from the versions a history-mode sink kept (``<table>__history``).

The compacted log cannot give it (it keeps each key's latest record only), so this reads the
sink's file, never the log: for each key, its newest version at or before the position, left
out when that version is a delete. The new file holds each table as of the position and its
history up to it. It is a copy to read, not a sink to swap in: it keeps no offsets.

A history is complete from where each key's first version is that key's insert (``op`` ``c``):
a key whose first version is a snapshot read (``r``), or an update or delete (its earlier
versions were compacted away before the sink read them: a history-mode sink added to a
pipeline late, or after a reset), says nothing of the key before that version. The earliest
position the file can answer is therefore the newest such first version, and an older one is
refused.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb

from cdc.contracts.errors import SinkFatal
from sinks.duckdb.catalog import POSITION, SEQUENCE, TableState, load_states, quote
from sinks.duckdb.config import DuckDBSinkConfig
from sinks.duckdb.connection import first_line, is_lock_conflict
from sinks.duckdb.reader import _stable_copy

SOURCE = "__cdc_src"


def rebuild_as_of(config: DuckDBSinkConfig, copy: DuckDBSinkConfig, position: int) -> str:
    """Write the state as of ``position`` of every history table of ``config.path`` into the
    new file ``copy.path``; returns a summary.

    Raises:
        ValueError: the file at ``copy.path`` exists, the sink has no history table, or its
            history does not reach back to ``position``.
        SinkFatal, SinkUnavailable: the sink's file cannot be read.
    """
    target = Path(copy.path)
    if target.exists():
        raise ValueError(f"{target} exists: --as-of writes a new file, give another --into")
    partial = target.with_name(target.name + ".partial")
    partial.unlink(missing_ok=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    with duckdb.connect(str(partial)) as out:
        name = str(out.sql("SELECT current_database()").fetchall()[0][0])
        with _attached(out, Path(config.path)):
            out.execute(f"USE {SOURCE}")
            tables = [s for s in load_states(out).values() if s.history]
            if not tables:
                raise ValueError(f"{config.path} holds no history table yet")
            _check_reach(out, tables, position)
            try:
                rows = sum(_copy_table(out, quote(name), state, position) for state in tables)
            finally:
                out.execute(f"USE {quote(name)}")  # SOURCE can be detached then
    partial.rename(target)
    return f"{len(tables)} tables, {rows} rows, into {target}"


@contextmanager
def _attached(out: Any, path: Path) -> Iterator[None]:
    """The sink's file attached read-only as :data:`SOURCE`; while a pipeline writes it (and
    holds its lock), a consistent copy of it."""
    if not path.is_file():
        raise SinkFatal(f"DuckDB sink: no database file at {path}")
    try:
        out.execute(f"ATTACH {_text(path)} AS {SOURCE} (READ_ONLY)")
    except duckdb.Error as exc:
        if not is_lock_conflict(exc):
            raise SinkFatal(f"DuckDB sink: cannot read {path}: {first_line(exc)}") from exc
        with tempfile.TemporaryDirectory(prefix="cdc-duckdb-") as tmp:
            copy = Path(tmp) / path.name
            _stable_copy(path, copy)
            out.execute(f"ATTACH {_text(copy)} AS {SOURCE}")
            try:
                yield
            finally:
                out.execute(f"DETACH {SOURCE}")  # before its directory goes
        return
    yield


def _text(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def _check_reach(con: Any, tables: list[TableState], position: int) -> None:
    """Refuse a position before the one the history can answer (see the module's docstring)."""
    earliest = max(_earliest(con, state) for state in tables)
    if position < earliest:
        raise ValueError(
            f"the sink's history answers positions from {earliest} on (before it, some keys' "
            "versions were never recorded: the sink started from a snapshot or a compacted log)"
        )


def _earliest(con: Any, state: TableState) -> int:
    keys = ", ".join(quote(c.name) for c in state.keys)
    order = f"({POSITION}, {SEQUENCE})"
    (earliest,) = con.execute(
        f"SELECT coalesce(max(first_at), 0) FROM (SELECT arg_min(op, {order}) AS first_op, "
        f"min({POSITION}) AS first_at FROM {state.history_table} GROUP BY {keys}) "
        "WHERE first_op <> 'c'"
    ).fetchone()
    return int(earliest)


def _copy_table(con: Any, dest: str, state: TableState, position: int) -> int:
    """The table as of ``position`` and its history up to it, into database ``dest``; returns
    the table's rows."""
    columns = ", ".join(quote(c.name) for c in state.columns)
    keys = ", ".join(quote(c.name) for c in state.keys)
    schema = f"{dest}.{quote(state.schema)}"
    con.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
    history = f"{schema}.{quote(state.table + '__history')}"
    con.execute(
        f"CREATE TABLE {history} AS SELECT * FROM {state.history_table} "
        f"WHERE {POSITION} <= ? ORDER BY {POSITION}, {SEQUENCE}",
        [position],
    )
    current = f"{schema}.{quote(state.table)}"
    con.execute(
        f"CREATE TABLE {current} AS SELECT {columns} FROM "
        f"(SELECT *, row_number() OVER (PARTITION BY {keys} ORDER BY {POSITION} DESC, "
        f"{SEQUENCE} DESC) AS __cdc_n FROM {history}) WHERE __cdc_n = 1 AND op <> 'd'"
    )
    (rows,) = con.execute(f"SELECT count(*) FROM {current}").fetchone()
    return int(rows)
