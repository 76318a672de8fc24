"""What the sink keeps beside the data, and the DDL that creates and evolves tables.

Everything lives in the warehouse file itself, in schema ``_cdc``, so it commits atomically
with the data: ``offsets`` (next offset per topic partition), ``tables`` (layout and truncate
watermark per table), ``columns`` (each column's source and DuckDB type, for evolution and for
reading back; its source ``id`` and former names, to follow renames) and one
``"<schema>.<table>__deleted"`` table per source table holding the key and source position of
deleted rows, so a replayed older change cannot resurrect them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from cdc.contracts.schema import TableSchema

META: Final = '"_cdc"'
POSITION: Final = "__cdc_position"
SEQUENCE: Final = "__cdc_sequence"
HISTORY_COLUMNS: Final = ("valid_from", "valid_to", "op")
DOCUMENT_KEY: Final = "_key"
DOCUMENT_BODY: Final = "doc"

META_DDL: Final = (
    f"CREATE SCHEMA IF NOT EXISTS {META}",
    f"CREATE TABLE IF NOT EXISTS {META}.offsets (topic VARCHAR, partition INTEGER, "
    "next_offset BIGINT NOT NULL, PRIMARY KEY (topic, partition))",
    f"CREATE TABLE IF NOT EXISTS {META}.tables (schema_name VARCHAR, table_name VARCHAR, "
    "layout VARCHAR NOT NULL, history BOOLEAN NOT NULL, truncate_position HUGEINT NOT NULL, "
    "truncate_sequence BIGINT NOT NULL, PRIMARY KEY (schema_name, table_name))",
    f"CREATE TABLE IF NOT EXISTS {META}.columns (schema_name VARCHAR, table_name VARCHAR, "
    "ordinal INTEGER NOT NULL, column_name VARCHAR, source_type VARCHAR NOT NULL, "
    "duckdb_type VARCHAR NOT NULL, is_key BOOLEAN NOT NULL, "
    "PRIMARY KEY (schema_name, table_name, column_name))",
    # Added later: files written before have the table without them.
    f"ALTER TABLE {META}.columns ADD COLUMN IF NOT EXISTS source_id INTEGER",
    f"ALTER TABLE {META}.columns ADD COLUMN IF NOT EXISTS former_names VARCHAR[]",
)


def quote(name: str) -> str:
    """A DuckDB identifier, quoted so any source name is safe."""
    return '"' + name.replace('"', '""') + '"'


@dataclass(slots=True)
class ColumnInfo:
    """A column of a sink table: its source type and the DuckDB type it maps to.

    Attributes:
        source_id: the source's identity of the column (:attr:`cdc.contracts.schema.Column.id`), by
            which a rename is told from a drop and an add.
        former: names the column had before renames, oldest first: records written before a
            rename still carry one.
    """

    name: str
    source_type: str
    duck_type: str
    key: bool = False
    source_id: int | None = None
    former: list[str] = field(default_factory=list)


@dataclass(slots=True)
class TableState:
    """A sink table as recorded in ``_cdc``.

    Attributes:
        layout: ``typed`` (one column per source column) or ``document`` (``_key`` and ``doc``
            JSON, for sources that publish no schema).
        watermark: the position of the newest truncate applied; older changes are ignored.
        history: the ``__history`` table exists.
    """

    schema: str
    table: str
    layout: str
    columns: list[ColumnInfo] = field(default_factory=list)
    watermark: tuple[int, int] = (0, -1)
    history: bool = False

    @property
    def keys(self) -> list[ColumnInfo]:
        return [c for c in self.columns if c.key]

    @property
    def target(self) -> str:
        return f"{quote(self.schema)}.{quote(self.table)}"

    @property
    def deleted(self) -> str:
        return f"{META}.{quote(f'{self.schema}.{self.table}__deleted')}"

    @property
    def history_table(self) -> str:
        return f"{quote(self.schema)}.{quote(f'{self.table}__history')}"

    def column(self, name: str) -> ColumnInfo | None:
        for column in self.columns:
            if column.name == name:
                return column
        return None

    def former_names(self) -> dict[str, str]:
        """Former name -> current name, for names no column has now."""
        live = {c.name for c in self.columns}
        return {old: c.name for c in self.columns for old in c.former if old not in live}


def load_states(con: Any) -> dict[tuple[str, str], TableState]:
    """Every table the sink created, with its columns in order."""
    states = {
        (s, t): TableState(s, t, layout, [], (int(p), int(q)), bool(h))
        for s, t, layout, h, p, q in con.execute(
            f"SELECT schema_name, table_name, layout, history, truncate_position, "
            f"truncate_sequence FROM {META}.tables"
        ).fetchall()
    }
    for s, t, name, source_type, duck_type, key, source_id, former in _column_rows(con):
        column = ColumnInfo(name, source_type, duck_type, bool(key), source_id, list(former or []))
        states[(s, t)].columns.append(column)
    return states


def _column_rows(con: Any) -> list[tuple[Any, ...]]:
    """The rows of ``_cdc.columns``; a file not opened for writing since ``source_id`` and
    ``former_names`` were added (``cdc verify`` reads read-only) gives NULL for them."""
    found = {
        str(r[0])
        for r in con.execute(
            "SELECT column_name FROM duckdb_columns() WHERE database_name = current_database() "
            "AND schema_name = '_cdc' AND table_name = 'columns'"
        ).fetchall()
    }
    extra = [name if name in found else "NULL" for name in ("source_id", "former_names")]
    rows: list[tuple[Any, ...]] = con.execute(
        f"SELECT schema_name, table_name, column_name, source_type, duckdb_type, is_key, "
        f"{', '.join(extra)} FROM {META}.columns ORDER BY schema_name, table_name, ordinal"
    ).fetchall()
    return rows


def typed_columns(published: TableSchema, key_names: list[str]) -> list[ColumnInfo]:
    """Columns of a typed table; keys as the schema flags them, else as the record key names."""
    from sinks.duckdb.types import duckdb_type

    flagged = published.key_columns or key_names
    return [
        ColumnInfo(c.name, c.type, duckdb_type(c.type), c.name in flagged, c.id)
        for c in published.columns
    ]


def document_columns() -> list[ColumnInfo]:
    return [ColumnInfo(DOCUMENT_KEY, "", "JSON", True), ColumnInfo(DOCUMENT_BODY, "", "JSON")]


def _column_defs(columns: list[ColumnInfo]) -> str:
    return ", ".join(f"{quote(c.name)} {c.duck_type}" for c in columns)


def create_table(con: Any, state: TableState) -> None:
    """Create the current-state table, its deleted-keys table, and record both in ``_cdc``."""
    con.execute(f"CREATE SCHEMA IF NOT EXISTS {quote(state.schema)}")
    positions = f"{POSITION} HUGEINT NOT NULL, {SEQUENCE} BIGINT NOT NULL"
    con.execute(f"CREATE TABLE {state.target} ({_column_defs(state.columns)}, {positions})")
    con.execute(f"CREATE TABLE {state.deleted} ({_column_defs(state.keys)}, {positions})")
    con.execute(
        f"INSERT INTO {META}.tables VALUES (?, ?, ?, false, 0, -1)",
        [state.schema, state.table, state.layout],
    )
    save_columns(con, state, list(enumerate(state.columns)))


def create_history(con: Any, state: TableState) -> None:
    """Create ``<table>__history``: every column, ``valid_from``/``valid_to``, ``op``, position."""
    extra = (
        "valid_from TIMESTAMPTZ, valid_to TIMESTAMPTZ, op VARCHAR NOT NULL, "
        f"{POSITION} HUGEINT NOT NULL, {SEQUENCE} BIGINT NOT NULL"
    )
    con.execute(
        f"CREATE TABLE IF NOT EXISTS {state.history_table} ({_column_defs(state.columns)}, {extra})"
    )
    con.execute(
        f"UPDATE {META}.tables SET history = true WHERE schema_name = ? AND table_name = ?",
        [state.schema, state.table],
    )
    state.history = True


def save_column(con: Any, state: TableState, column: ColumnInfo, ordinal: int) -> None:
    save_columns(con, state, [(ordinal, column)])


def save_columns(con: Any, state: TableState, columns: list[tuple[int, ColumnInfo]]) -> None:
    """Record ``(ordinal, column)`` of ``columns``, in one statement: each ``INSERT OR
    REPLACE`` costs DuckDB some 6-9 ms of CPU whatever its rows (a new table's columns one by
    one were a tenth of a 20,000-change bench run)."""
    if not columns:
        return
    values = ", ".join("(?, ?, ?, ?, ?, ?, ?, ?, ?)" for _ in columns)
    params = [
        value
        for ordinal, c in columns
        for value in (
            state.schema,
            state.table,
            ordinal,
            c.name,
            c.source_type,
            c.duck_type,
            c.key,
            c.source_id,
            c.former,
        )
    ]
    con.execute(
        f"INSERT OR REPLACE INTO {META}.columns (schema_name, table_name, ordinal, column_name, "
        f"source_type, duckdb_type, is_key, source_id, former_names) VALUES {values}",
        params,
    )


def forget_column(con: Any, state: TableState, name: str) -> None:
    """Remove a column's record (it is saved again under its new name)."""
    con.execute(
        f"DELETE FROM {META}.columns WHERE schema_name = ? AND table_name = ? AND column_name = ?",
        [state.schema, state.table, name],
    )


def save_watermark(con: Any, state: TableState) -> None:
    con.execute(
        f"UPDATE {META}.tables SET truncate_position = ?, truncate_sequence = ? "
        "WHERE schema_name = ? AND table_name = ?",
        [*state.watermark, state.schema, state.table],
    )
