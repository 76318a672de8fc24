"""One key's state in the DuckDB file, for ``cdc trace``: its row and the source position the
sink recorded for it (``__cdc_position``/``__cdc_sequence``), or the position of its delete
from the deleted-keys table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb

from cdc.contracts.errors import SinkFatal
from sinks.duckdb.catalog import POSITION, SEQUENCE, ColumnInfo, TableState, load_states, quote
from sinks.duckdb.config import DuckDBSinkConfig
from sinks.duckdb.reader import _infinities, _value, open_for_reading

KeyState = tuple[dict[str, Any] | None, tuple[int, int] | None]


def read_key(
    config: DuckDBSinkConfig,
    schema: str,
    table: str,
    key: dict[str, Any],
    *,
    pipeline: str | None = None,
    any_type: bool = False,
) -> KeyState | None:
    """``(row, (position, sequence))`` of ``key`` in ``schema.table``; ``(None, position)``
    for a deleted key the sink remembers; ``None`` when the file holds nothing of it.

    Raises:
        NotImplementedError: the table is not keyed by ``key``'s columns (a document table).
    """
    path = Path(config.path)
    with open_for_reading(path) as con:
        try:
            state = load_states(con).get((schema, table))
        except duckdb.CatalogException as exc:
            raise SinkFatal(f"DuckDB sink: {path} was not written by this sink (no _cdc)") from exc
        if state is None:
            return None
        keys = state.keys
        if state.layout != "typed" or sorted(c.name for c in keys) != sorted(key):
            # A document table keys rows by _key's JSON: cdc trace reads it whole instead.
            raise NotImplementedError(f"{schema}.{table} is not keyed by {sorted(key)}")
        found = _current(con, state, key)
        if found is not None:
            return found
        deleted = _position(con, state.deleted, keys, key, "")
        return None if deleted is None else (None, deleted[1])


def _where(keys: list[ColumnInfo]) -> str:
    # Compared as text: a key value comes as JSON (an int, a string), the column is typed.
    return " AND ".join(f"CAST({quote(c.name)} AS VARCHAR) = ?" for c in keys)


def _position(
    con: Any, relation: str, keys: list[ColumnInfo], key: dict[str, Any], select: str
) -> tuple[tuple[Any, ...], tuple[int, int]] | None:
    """The selected values and the position of ``key``'s row in ``relation``."""
    found = con.execute(
        f"SELECT {select}{POSITION}, {SEQUENCE} FROM {relation} WHERE {_where(keys)}",
        [_text(key[c.name]) for c in keys],
    ).fetchone()
    return None if found is None else (tuple(found[:-2]), (int(found[-2]), int(found[-1])))


def _current(con: Any, state: TableState, key: dict[str, Any]) -> KeyState | None:
    """The key's row as ``cdc verify`` reads it (typed values, JSON as text) and position."""
    columns = state.columns
    select = f"{', '.join(quote(c.name) for c in columns)}, {_infinities(columns)}, "
    found = _position(con, state.target, state.keys, key, select)
    if found is None:
        return None
    values, position = found
    width = len(columns)
    row = {
        c.name: infinite or _value(c, v, json_text=True)
        for c, v, infinite in zip(columns, values[:width], values[width:], strict=True)
    }
    return row, position


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
