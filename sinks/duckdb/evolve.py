"""Create a table on first sight and follow its schema as the source changes it.

Rules: an added column is added (existing rows get NULL); a renamed column is renamed, data kept:
the source gives each column an ``id`` that a rename keeps (:attr:`cdc.contracts.schema.Column.id`),
and a recorded column whose ``id`` now has another name, free in the table, takes that name (records
written before the rename keep arriving under the old name: they are read under the new one, see
:func:`sinks.duckdb.stage.encode`); a dropped column stays, and new rows leave it NULL (dropping it
would destroy history the warehouse may be the last copy of); a type change that widens
(:func:`sinks.duckdb.types.is_widening`) is applied with ``ALTER COLUMN ... TYPE``; any other type
change stops the sink with :class:`~cdc.contracts.errors.SinkFatal`. DuckDB matches identifiers
without regard to case, so two source columns whose names differ only by case (``email`` and
``"Email"``) cannot both be columns of one DuckDB table: the table's creation, or the add or rename
that would make such a pair, stops the sink naming both columns and the fix, before any DDL runs
(the other sinks go on).

The source re-snapshots a table after a change that rewrote its rows unlogged (a default, a
rename, a drop, a type change: :mod:`connectors.postgres.assembly.evolution`), so the rows
converge here too: in the current table a dropped column then reads NULL, as in any row written
since.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cdc.contracts.errors import SinkFatal
from cdc.contracts.schema import Column, TableSchema
from cdc.support.logging import Logger
from sinks.duckdb import catalog
from sinks.duckdb.catalog import HISTORY_COLUMNS, ColumnInfo, TableState, quote
from sinks.duckdb.types import duckdb_type, is_widening, normalize


def prepare(
    con: Any,
    states: dict[tuple[str, str], TableState],
    table: tuple[str, str],
    published: TableSchema | None,
    key_names: Sequence[str],
    history: bool,
    logger: Logger,
) -> TableState:
    """The table's state after creating or evolving it to match ``published``.

    Changes are logged (``duckdb.table_created``, ``duckdb.column_added``,
    ``duckdb.column_renamed``, ``duckdb.column_widened``); they take effect when the flush
    commits.

    Raises:
        SinkFatal: an incompatible type change, a table without key, or a history column
            name taken by a source column.
    """
    state = states.get(table)
    if state is None:
        state = _create(con, table, published, list(key_names))
        states[table] = state
        logger.info("duckdb.table_created", table=state.target, layout=state.layout)
    elif state.layout == "typed" and published is not None:
        _follow_renames(con, state, published, logger)
        _check_keys(state, published)
        for column in published.columns:
            _follow(con, state, column, logger)
    if history and not state.history:
        _check_history_names(state, [c.name for c in state.columns])
        catalog.create_history(con, state)
    return state


def _create(
    con: Any, table: tuple[str, str], published: TableSchema | None, key_names: list[str]
) -> TableState:
    if published is None:
        state = TableState(*table, "document", catalog.document_columns())
    else:
        state = TableState(*table, "typed", catalog.typed_columns(published, key_names))
        _check_case_twins(state, [c.name for c in state.columns])
        if not state.keys:
            raise SinkFatal(
                f"table {table[0]}.{table[1]} has no key columns; the DuckDB sink upserts by key"
            )
    catalog.create_table(con, state)
    return state


def _check_keys(state: TableState, published: TableSchema) -> None:
    keys = [c.name for c in state.keys]
    if published.key_columns and published.key_columns != keys:
        raise SinkFatal(
            f"table {state.schema}.{state.table}: key columns changed from {keys} to "
            f"{published.key_columns}; rows upserted by the old key cannot be matched by the new "
            "one. Rebuild the table from the log: "
            f"cdc sink FILE SINK --reset-table {state.schema}.{state.table}"
        )


def _follow_renames(con: Any, state: TableState, published: TableSchema, logger: Logger) -> None:
    """Rename each recorded column whose ``id`` has a new name that no column holds yet.

    Repeated until nothing moves: after ``b -> c`` then ``a -> b``, ``b`` is free only once
    the first is done.
    """
    ids = {c.id: c.name for c in published.columns if c.id is not None}
    moved = True
    while moved:
        moved = False
        names = {c.name for c in state.columns}
        for known in state.columns:
            new = None if known.source_id is None else ids.get(known.source_id)
            if new is not None and new != known.name and new not in names:
                old = known.name
                _rename(con, state, known, new)
                logger.info("duckdb.column_renamed", table=state.target, old=old, new=new)
                moved = True
                break


def _rename(con: Any, state: TableState, known: ColumnInfo, new: str) -> None:
    if state.history:
        _check_history_names(state, [new])
    _check_case_twins(state, [c.name for c in state.columns if c is not known], new)
    for table in _holding(state, known):
        con.execute(f"ALTER TABLE {table} RENAME COLUMN {quote(known.name)} TO {quote(new)}")
    catalog.forget_column(con, state, known.name)
    known.former = [n for n in (*known.former, known.name) if n != new]
    known.name = new
    catalog.save_column(con, state, known, state.columns.index(known))


def _follow(con: Any, state: TableState, column: Column, logger: Logger) -> None:
    known = state.column(column.name)
    if known is None:
        info = ColumnInfo(column.name, column.type, duckdb_type(column.type), source_id=column.id)
        _add(con, state, info)
        logger.info("duckdb.column_added", table=state.target, column=column.name, type=column.type)
        return
    if column.id is not None and known.source_id != column.id:
        # First sight of the id (a file or schema from before ids), or the name now belongs to
        # a column added again: either way the id is this column's from now on.
        known.source_id = column.id
        catalog.save_column(con, state, known, state.columns.index(known))
    if normalize(known.source_type) != normalize(column.type):
        old = known.source_type
        _change_type(con, state, known, column.type)
        logger.info(
            "duckdb.column_widened",
            table=state.target,
            column=column.name,
            old=old,
            new=column.type,
        )


def _add(con: Any, state: TableState, column: ColumnInfo) -> None:
    _check_case_twins(state, [c.name for c in state.columns], column.name)
    tables = [state.target]
    if state.history:
        _check_history_names(state, [column.name])
        tables.append(state.history_table)
    for table in tables:
        con.execute(f"ALTER TABLE {table} ADD COLUMN {quote(column.name)} {column.duck_type}")
    state.columns.append(column)
    catalog.save_column(con, state, column, len(state.columns) - 1)


def _change_type(con: Any, state: TableState, known: ColumnInfo, new_type: str) -> None:
    if not is_widening(known.source_type, new_type):
        raise SinkFatal(
            f"table {state.schema}.{state.table}: column {known.name} changed type from "
            f"{known.source_type!r} to {new_type!r}, which is not a widening change; the DuckDB "
            "sink stops rather than convert existing data. Rebuild the table from the log: "
            f"cdc sink FILE SINK --reset-table {state.schema}.{state.table}"
        )
    new_duck = duckdb_type(new_type)
    if new_duck != known.duck_type:
        for table in _holding(state, known):
            con.execute(f"ALTER TABLE {table} ALTER COLUMN {quote(known.name)} TYPE {new_duck}")
    known.source_type, known.duck_type = new_type, new_duck
    catalog.save_column(con, state, known, state.columns.index(known))


def _check_history_names(state: TableState, names: list[str]) -> None:
    own = {n.casefold() for n in (*HISTORY_COLUMNS, catalog.POSITION, catalog.SEQUENCE)}
    taken = sorted(n for n in set(names) if n.casefold() in own)  # DuckDB ignores case
    if taken:
        raise SinkFatal(
            f"table {state.schema}.{state.table} has columns {taken}, which history mode "
            "needs for itself; use mode: current for this table"
        )


def _check_case_twins(state: TableState, names: list[str], new: str | None = None) -> None:
    """Stop on two names that differ only by case: ``new`` against ``names``, or, without
    ``new``, any pair of ``names``."""
    seen: dict[str, str] = {}
    for name in names:
        seen.setdefault(name.casefold(), name)
    pairs = [(seen[new.casefold()], new)] if new is not None and new.casefold() in seen else []
    if new is None:
        pairs = [(seen[n.casefold()], n) for n in names if seen[n.casefold()] != n]
    if not pairs:
        return
    first, second = pairs[0]
    table = f"{state.schema}.{state.table}"
    raise SinkFatal(
        f"table {table}: columns {first!r} and {second!r} differ only by case, and DuckDB "
        "matches column names without regard to case: one DuckDB table cannot hold both. The "
        "DuckDB sink stops (the other sinks go on). Fix: rename one of them in the source, e.g. "
        f'ALTER TABLE {table} RENAME COLUMN "{second}" TO "{second.lower()}_2" (the source '
        "reads the table again after a rename), or leave the table out of this sink (its "
        "tables: list); then start the pipeline again"
    )


def _holding(state: TableState, column: ColumnInfo) -> list[str]:
    """The tables that hold ``column``: the table, its deleted keys (a key column) and its
    history."""
    tables = [state.target]
    tables += [state.deleted] if column.key else []
    tables += [state.history_table] if state.history else []
    return tables
