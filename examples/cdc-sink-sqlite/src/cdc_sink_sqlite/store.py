"""The SQLite side: the connection, the sink's tables, and the statements it runs.

Layout of the database file:

- one table per source table, named ``"<schema>.<table>"``: ``key`` (the record key as
  canonical JSON, the primary key), ``row`` (the row as JSON; NULL once the key is deleted),
  ``pos`` and ``seq`` (the source position of the change that wrote it). A deleted key keeps its
  position, so an older change replayed later cannot bring the row back;
- ``_cdc_offsets``: the next offset to read of every partition the sink consumed;
- ``_cdc_tables``: the tables the sink created, each with the position of its last truncate
  (changes older than it are ignored: they were in the table the truncate emptied).

Identifiers are quoted (:func:`quote`); every value is a bound parameter.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping
from pathlib import Path

from cdc.contracts.errors import SinkError, SinkFatal, SinkUnavailable
from cdc.log.base import TopicPartition

from cdc_sink_sqlite.changes import Position, Table, Write

OFFSETS = "_cdc_offsets"
TABLES = "_cdc_tables"
META_DDL = (
    f"CREATE TABLE IF NOT EXISTS {OFFSETS} (topic TEXT NOT NULL, partition INTEGER NOT NULL, "
    "next_offset INTEGER NOT NULL, PRIMARY KEY (topic, partition))",
    f"CREATE TABLE IF NOT EXISTS {TABLES} (schema_name TEXT NOT NULL, table_name TEXT NOT NULL, "
    "truncated_pos INTEGER, truncated_seq INTEGER, PRIMARY KEY (schema_name, table_name))",
)
#: UPSERT (3.24) and row values (3.15).
MIN_VERSION = (3, 24, 0)
# The errors that pass: another connection holds the lock, or the disk is full for now.
_TRANSIENT = frozenset({"SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_FULL"})


def quote(name: str) -> str:
    """``name`` as an SQLite identifier."""
    return '"' + name.replace('"', '""') + '"'


def table_ident(table: Table) -> str:
    return quote(f"{table[0]}.{table[1]}")


def connect(path: Path, busy_timeout_s: float) -> sqlite3.Connection:
    """A connection in autocommit mode (the sink opens its transactions itself), WAL journal
    (readers such as ``cdc verify`` do not block the writer), and ``synchronous=FULL``: in WAL
    mode only FULL syncs the log on every commit, so a commit is durable when it returns.

    Raises:
        sqlite3.Error: the file cannot be opened as a database.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    # check_same_thread off: the runner may build the sink in one thread and run it in another;
    # it never calls a sink from two threads at once.
    con = sqlite3.connect(
        path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
    )
    try:
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("PRAGMA synchronous=FULL")
    except sqlite3.Error:
        con.close()
        raise
    return con


def translate(exc: sqlite3.Error, doing: str, path: Path) -> SinkError:
    """The framework's error for an SQLite one: retried (a lock, a full disk) or fatal."""
    name = getattr(exc, "sqlite_errorname", "")
    if name in _TRANSIENT:
        return SinkUnavailable(f"SQLite sink: {doing} in {path}: {exc} (retrying)")
    return SinkFatal(f"SQLite sink: {doing} in {path} failed: {exc}")


def prepare(con: sqlite3.Connection) -> None:
    for ddl in META_DDL:
        con.execute(ddl)


def load_offsets(con: sqlite3.Connection) -> dict[TopicPartition, int]:
    rows = con.execute(f"SELECT topic, partition, next_offset FROM {OFFSETS}")
    return {TopicPartition(topic, int(p)): int(offset) for topic, p, offset in rows}


def store_offsets(con: sqlite3.Connection, offsets: Mapping[TopicPartition, int]) -> None:
    con.executemany(
        f"INSERT INTO {OFFSETS} (topic, partition, next_offset) VALUES (?, ?, ?) "
        "ON CONFLICT (topic, partition) DO UPDATE SET next_offset = excluded.next_offset",
        [(tp.topic, tp.partition, offset) for tp, offset in offsets.items()],
    )


def load_tables(con: sqlite3.Connection) -> dict[Table, Position | None]:
    """The sink's tables, each with its last truncate's position (``None``: never truncated)."""
    columns = "schema_name, table_name, truncated_pos, truncated_seq"
    rows = con.execute(f"SELECT {columns} FROM {TABLES}")
    return {(s, t): None if pos is None else (int(pos), int(seq)) for s, t, pos, seq in rows}


def create_table(con: sqlite3.Connection, table: Table) -> None:
    con.execute(
        f"CREATE TABLE IF NOT EXISTS {table_ident(table)} (key TEXT PRIMARY KEY NOT NULL, "
        "row TEXT, pos INTEGER NOT NULL, seq INTEGER NOT NULL) WITHOUT ROWID"
    )
    con.execute(
        f"INSERT INTO {TABLES} (schema_name, table_name) VALUES (?, ?) ON CONFLICT DO NOTHING",
        table,
    )


def apply_writes(con: sqlite3.Connection, table: Table, writes: Iterable[Write]) -> None:
    """Upsert or delete each key, where the change is newer than the one the row holds.

    ``executemany`` runs the rows in order, so two changes of one key in a batch are compared
    with each other too.
    """
    con.executemany(
        f"INSERT INTO {table_ident(table)} (key, row, pos, seq) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (key) DO UPDATE SET row = excluded.row, pos = excluded.pos, "
        "seq = excluded.seq WHERE (excluded.pos, excluded.seq) > (pos, seq)",
        [(w.key, w.row, w.pos[0], w.pos[1]) for w in writes],
    )


def truncate(con: sqlite3.Connection, table: Table, pos: Position) -> None:
    """Remove the rows (and remembered deletes) older than ``pos``; record ``pos`` as the
    table's truncate position (a replayed, older truncate leaves it as it is). Rows of later
    changes, applied before the truncate arrived (through other partitions), stay."""
    con.execute(f"DELETE FROM {table_ident(table)} WHERE (pos, seq) < (?, ?)", pos)
    con.execute(
        f"UPDATE {TABLES} SET truncated_pos = ?, truncated_seq = ? "
        "WHERE schema_name = ? AND table_name = ? "
        "AND (truncated_pos IS NULL OR (truncated_pos, truncated_seq) < (?, ?))",
        (*pos, *table, *pos),
    )


def drop_table(con: sqlite3.Connection, table: Table) -> None:
    con.execute(f"DROP TABLE IF EXISTS {table_ident(table)}")
    con.execute(f"DELETE FROM {TABLES} WHERE schema_name = ? AND table_name = ?", table)
