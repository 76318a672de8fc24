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

from pathlib import Path
from typing import Any

from sinks.duckdb.catalog import POSITION, SEQUENCE, TableState, load_states, quote
from sinks.duckdb.config import DuckDBSinkConfig
from sinks.duckdb.reader import open_for_reading

_OUT = "__cdc_as_of"


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
    with open_for_reading(Path(config.path)) as con:
        tables = [s for s in load_states(con).values() if s.history]
        if not tables:
            raise ValueError(f"{config.path} holds no history table yet")
        _check_reach(con, tables, position)
        con.execute(f"ATTACH '{_literal(str(partial))}' AS {_OUT}")
        try:
            rows = sum(_copy_table(con, state, position) for state in tables)
        finally:
            con.execute(f"DETACH {_OUT}")
    partial.rename(target)
    return f"{len(tables)} tables, {rows} rows, into {target}"


def _check_reach(con: Any, tables: list[TableState], position: int) -> None:
    """Refuse a position before the one the history can answer (see the module's docstring)."""
    earliest = max(_earliest(con, state) for state in tables)
    if earliest is not None and position < earliest:
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


def _copy_table(con: Any, state: TableState, position: int) -> int:
    """The table as of ``position`` and its history up to it; returns the table's rows."""
    columns = ", ".join(quote(c.name) for c in state.columns)
    keys = ", ".join(quote(c.name) for c in state.keys)
    schema = f"{_OUT}.{quote(state.schema)}"
    con.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
    history = f"{schema}.{quote(state.table + '__history')}"
    con.execute(
        f"CREATE TABLE {history} AS SELECT * FROM {state.history_table} "
        f"WHERE {POSITION} <= ? ORDER BY {POSITION}, {SEQUENCE}",
        [position],
    )
    con.execute(
        f"CREATE TABLE {schema}.{quote(state.table)} AS SELECT {columns} FROM "
        f"(SELECT *, row_number() OVER (PARTITION BY {keys} ORDER BY {POSITION} DESC, "
        f"{SEQUENCE} DESC) AS __cdc_n FROM {history}) WHERE __cdc_n = 1 AND op <> 'd'"
    )
    (rows,) = con.execute(f"SELECT count(*) FROM {schema}.{quote(state.table)}").fetchone()
    return int(rows)


def _literal(text: str) -> str:
    return text.replace("'", "''")
