"""The sink's own tables, and what it knows of a target table, read from ``pg_catalog``.

In the target schema the sink keeps (all keyed by pipeline and sink, so several pipelines and
sinks can share one schema):

* ``_cdc_offsets``: the next offset of each partition, written in the transaction that applies
  the records before it (the exactly-once half that needs no position);
* ``_cdc_tables``: each table's truncate watermark, the source position of its last truncate
  (changes older than it are ignored: the truncate removed them);
* ``_cdc_columns``: each column's source id and former names (:mod:`.renames`).

Beside each target table ``<table>`` with its hidden position columns ``_cdc_pos``/``_cdc_seq``
is ``<table>__cdc_deleted``: the key and position of every key deleted since the row was last
written. A side table rather than a deleted flag on the row: the target table then holds
exactly the source's rows, so the replica can be read, joined and constrained as the source
(a flag would leave dead rows in every query, unique index and foreign key of its readers).

A table keyed by every column (a keyless source table under REPLICA IDENTITY FULL) whose columns
can be NULL, or have no equality or no size bound, cannot have them as its primary key: its key
is then ``_cdc_key``, the hash of every column (:func:`key_hash`), and so is its deleted keys'.
The deleted keys keep the columns beside their hash: a widened column's text, and so the hash
a change of the row gets, may change (1.5 -> 1.50), and the hash is then computed again from
them, as the table's (:func:`rehash`); a hash alone would miss the delete it guards.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Final

import psycopg
from psycopg import sql

from sinks.postgres.config import MAX_IDENTIFIER

POSITION: Final = "_cdc_pos"
SEQUENCE: Final = "_cdc_seq"
KEY_HASH: Final = "_cdc_key"
HIDDEN: Final = frozenset({POSITION, SEQUENCE, KEY_HASH})
OFFSETS: Final = "_cdc_offsets"
TABLES: Final = "_cdc_tables"
COLUMNS: Final = "_cdc_columns"
DELETED_SUFFIX: Final = "__cdc_deleted"
HISTORY_SUFFIX: Final = "__history"

Pos = tuple[int, int]


@dataclass(slots=True)
class TableInfo:
    """A target table as the sink found or made it.

    Attributes:
        schema: the target schema.
        name: the target table.
        columns: the user columns, in order, with their target types (``format_type``).
        keys: the primary-key columns, in key order.
        watermark: the source position of the last truncate applied.
    """

    schema: str
    name: str
    columns: dict[str, str] = field(default_factory=dict)
    keys: list[str] = field(default_factory=list)
    watermark: Pos = (-1, -1)
    former: dict[str, str] = field(default_factory=dict)
    """Former names of renamed columns, to their current ones (:mod:`.renames`)."""
    history: bool = False
    """``<table>__history`` exists (:mod:`.history`)."""
    enums: set[str] = field(default_factory=set)
    """The columns typed as an enum of the target, or an array of one (:mod:`.enums`)."""
    hashed: bool = False
    """Keyed by every column through their hash in ``_cdc_key`` (a keyless source table)."""

    @property
    def match(self) -> list[str]:
        """The columns that tell a row from another in SQL: the key, or its hash."""
        return [KEY_HASH] if self.hashed else self.keys

    @property
    def deleted_columns(self) -> list[str]:
        """The columns of the deleted keys: the key, and its hash where the table has one."""
        return [*self.keys, KEY_HASH] if self.hashed else self.keys

    @property
    def stored(self) -> list[str]:
        """The user columns, and the key's hash where the table has one."""
        return [*self.columns, KEY_HASH] if self.hashed else list(self.columns)

    @property
    def target(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.name)

    @property
    def deleted(self) -> sql.Identifier:
        return sql.Identifier(self.schema, deleted_name(self.name))

    @property
    def history_table(self) -> sql.Identifier:
        return sql.Identifier(self.schema, side_name(self.name, HISTORY_SUFFIX))

    def holding(self, column: str) -> list[sql.Identifier]:
        """The tables that hold ``column``: the table, its deleted keys (a key column), its
        history."""
        tables = [self.target]
        tables += [self.deleted] if column in self.deleted_columns else []
        tables += [self.history_table] if self.history else []
        return tables


def deleted_name(table: str) -> str:
    """``<table>__cdc_deleted`` (:func:`side_name`)."""
    return side_name(table, DELETED_SUFFIX)


def side_name(table: str, suffix: str) -> str:
    """``<table><suffix>``, shortened with a hash where it would pass 63 bytes (the server
    would cut it, and two long names could meet)."""
    name = table + suffix
    if len(name.encode()) <= MAX_IDENTIFIER:
        return name
    digest = hashlib.sha1(table.encode()).hexdigest()[:8]
    room = MAX_IDENTIFIER - len(suffix) - len(digest) - 1
    head = table.encode()[:room].decode(errors="ignore")
    return f"{head}_{digest}{suffix}"


def meta_ddl(schema: str) -> list[sql.Composed]:
    """The statements creating the target schema and the sink's tables, if missing."""
    s = sql.Identifier(schema)
    return [
        sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(s),
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (pipeline text NOT NULL, sink text NOT NULL, "
            "topic text NOT NULL, partition integer NOT NULL, next_offset bigint NOT NULL, "
            "PRIMARY KEY (pipeline, sink, topic, partition))"
        ).format(sql.Identifier(schema, OFFSETS)),
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (pipeline text NOT NULL, sink text NOT NULL, "
            "target_table text NOT NULL, truncated_pos bigint NOT NULL, "
            "truncated_seq bigint NOT NULL, PRIMARY KEY (pipeline, sink, target_table))"
        ).format(sql.Identifier(schema, TABLES)),
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (pipeline text NOT NULL, sink text NOT NULL, "
            "target_table text NOT NULL, column_name text NOT NULL, source_id integer NOT NULL, "
            "former text[] NOT NULL, PRIMARY KEY (pipeline, sink, target_table, column_name))"
        ).format(sql.Identifier(schema, COLUMNS)),
    ]


_COLUMNS: Final = sql.SQL(
    "SELECT a.attname, format_type(a.atttypid, a.atttypmod), "
    "coalesce(e.typtype, t.typtype) = 'e' FROM pg_attribute a JOIN pg_type t "
    "ON t.oid = a.atttypid LEFT JOIN pg_type e ON t.typcategory = 'A' AND e.oid = t.typelem "
    "WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum"
)
_KEYS: Final = sql.SQL(
    "SELECT a.attname FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY "
    "AS k(attnum, n) JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
    "WHERE i.indrelid = %s::regclass AND i.indisprimary ORDER BY k.n"
)


def load(conn: psycopg.Connection[Any], schema: str, name: str, ident: Ident) -> TableInfo | None:
    """The target table ``schema.name`` as it is now, or ``None`` if it does not exist."""
    regclass = sql.Identifier(schema, name).as_string(conn)
    found = conn.execute("SELECT to_regclass(%s)", [regclass]).fetchone()
    if found is None or found[0] is None:
        return None
    found_columns = [r for r in conn.execute(_COLUMNS, [regclass]) if r[0] not in HIDDEN]
    keys = [n for (n,) in conn.execute(_KEYS, [regclass])]
    info = TableInfo(schema, name, {n: t for n, t, _ in found_columns}, keys)
    info.enums = {n for n, _, enum in found_columns if enum}
    if keys == [KEY_HASH]:  # keyed by every column (:func:`create`)
        info.hashed, info.keys = True, list(info.columns)
    history = sql.Identifier(schema, side_name(name, HISTORY_SUFFIX)).as_string(conn)
    kept = conn.execute("SELECT to_regclass(%s)", [history]).fetchone()
    info.history = kept is not None and kept[0] is not None
    row = conn.execute(
        sql.SQL(
            "SELECT truncated_pos, truncated_seq FROM {} WHERE pipeline = %s AND sink = %s "
            "AND target_table = %s"
        ).format(sql.Identifier(schema, TABLES)),
        [ident.pipeline, ident.sink, name],
    ).fetchone()
    if row is not None:
        info.watermark = (int(row[0]), int(row[1]))
    return info


@dataclass(frozen=True, slots=True)
class Ident:
    """Whose rows of the sink's tables these are."""

    pipeline: str
    sink: str


def create(conn: psycopg.Connection[Any], info: TableInfo, ident: Ident) -> None:
    """Create the target table, its deleted keys' table (``info.columns``, ``info.keys``,
    ``info.hashed``: its primary key the hash of every column) and its watermark row."""
    types = {**info.columns, KEY_HASH: "bytea NOT NULL"}
    columns = [sql.SQL("{} {}").format(sql.Identifier(n), sql.SQL(types[n])) for n in info.stored]
    key = sql.SQL(", ").join(map(sql.Identifier, info.match))
    hidden = sql.SQL("{} bigint NOT NULL, {} bigint NOT NULL").format(
        sql.Identifier(POSITION), sql.Identifier(SEQUENCE)
    )
    conn.execute(
        sql.SQL("CREATE TABLE {} ({}, {}, PRIMARY KEY ({}))").format(
            info.target, sql.SQL(", ").join(columns), hidden, key
        )
    )
    key_columns = [
        sql.SQL("{} {}").format(sql.Identifier(k), sql.SQL(types[k])) for k in info.deleted_columns
    ]
    conn.execute(
        sql.SQL("CREATE TABLE {} ({}, {}, PRIMARY KEY ({}))").format(
            info.deleted, sql.SQL(", ").join(key_columns), hidden, key
        )
    )
    save_watermark(conn, info, ident)


def key_hash(info: TableInfo, alias: str) -> sql.Composed:
    """SQL: the hash of a row's key columns, by their text as the target's types print it (the
    session's settings fixed: :func:`sinks.postgres.connection.connect`). A row's text tells
    NULL from an empty string and needs no equality operator (``json``, ``xml`` have none)."""
    row = sql.SQL(", ").join(sql.Identifier(alias, k) for k in info.keys)
    return sql.SQL("sha256(convert_to(ROW({})::text, 'UTF8'))").format(row)


def rehash(conn: psycopg.Connection[Any], info: TableInfo) -> None:
    """Compute the hashed key of every row and deleted key again, and of the history's open
    versions (after a column's type changed: its text, and so the hash a new change gets, may
    have too)."""
    key = sql.Identifier(KEY_HASH)
    conn.execute(
        sql.SQL("UPDATE {} AS t SET {} = {}").format(info.target, key, key_hash(info, "t"))
    )
    # A deleted key kept by a sink before they held their columns has them all NULL: its hash
    # cannot be computed again (a rebuild, --reset-table, renews it). A key truly all NULL
    # has a hash no type change alters ("(,)"), so both are left alone.
    values = sql.SQL(", ").join(sql.Identifier("d", k) for k in info.keys)
    conn.execute(
        sql.SQL("UPDATE {} AS d SET {} = {} WHERE NOT ROW({}) IS NULL").format(
            info.deleted, key, key_hash(info, "d"), values
        )
    )
    if info.history:
        conn.execute(
            sql.SQL("UPDATE {} AS h SET {} = {} WHERE valid_to IS NULL").format(
                info.history_table, key, key_hash(info, "h")
            )
        )


def add_deleted_columns(conn: psycopg.Connection[Any], info: TableInfo) -> list[str]:
    """Add to a hashed table's deleted keys the key columns a sink before they held them left
    out (NULL for the keys deleted then); returns the columns added."""
    if not info.hashed:
        return []
    regclass = info.deleted.as_string(conn)
    held = {r[0] for r in conn.execute(_COLUMNS, [regclass])}
    missing = [k for k in info.keys if k not in held]
    for name in missing:
        conn.execute(
            sql.SQL("ALTER TABLE {} ADD COLUMN {} {}").format(
                info.deleted, sql.Identifier(name), sql.SQL(info.columns[name])
            )
        )
    return missing


def lock_meta(conn: psycopg.Connection[Any], schema: str) -> None:
    """Hold, until the transaction ends, the right to create the schema and the sink's tables:
    ``IF NOT EXISTS`` alone lets two workers starting at once race into a duplicate."""
    conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [f"cdc-meta:{schema}"])


def lock_shape(conn: psycopg.Connection[Any], info: TableInfo) -> None:
    """Hold, until the transaction ends, the right to create or alter ``info``'s table: two
    workers of one sink (on Kafka) then never race to make the same table or column."""
    conn.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [f"cdc:{info.schema}.{info.name}"]
    )


def read_watermark(
    conn: psycopg.Connection[Any], info: TableInfo, ident: Ident, for_truncate: bool = False
) -> None:
    """Read the table's truncate watermark into ``info``, locking its row until the transaction
    ends: shared to apply changes, exclusive to apply a truncate. So a worker's truncate waits
    for the changes other workers are applying, and theirs, after it, see its watermark (a row
    older than the truncate never outlives it)."""
    lock = sql.SQL("FOR UPDATE" if for_truncate else "FOR SHARE")
    row = conn.execute(
        sql.SQL(
            "SELECT truncated_pos, truncated_seq FROM {} WHERE pipeline = %s AND sink = %s "
            "AND target_table = %s {}"
        ).format(sql.Identifier(info.schema, TABLES), lock),
        [ident.pipeline, ident.sink, info.name],
    ).fetchone()
    if row is None:  # made before this row existed, or by hand: the row makes the lock
        save_watermark(conn, info, ident)
        return
    info.watermark = (int(row[0]), int(row[1]))


def save_watermark(conn: psycopg.Connection[Any], info: TableInfo, ident: Ident) -> None:
    conn.execute(
        sql.SQL(
            "INSERT INTO {} VALUES (%s, %s, %s, %s, %s) ON CONFLICT (pipeline, sink, "
            "target_table) DO UPDATE SET truncated_pos = EXCLUDED.truncated_pos, "
            "truncated_seq = EXCLUDED.truncated_seq"
        ).format(sql.Identifier(info.schema, TABLES)),
        [ident.pipeline, ident.sink, info.name, *info.watermark],
    )


def drop(conn: psycopg.Connection[Any], info: TableInfo, ident: Ident) -> None:
    """Drop the table, its deleted keys, its watermark and its recorded columns."""
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(info.target))
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(info.deleted))
    forget = "DELETE FROM {} WHERE pipeline = %s AND sink = %s AND target_table = %s"
    for meta in (TABLES, COLUMNS):
        conn.execute(
            sql.SQL(forget).format(sql.Identifier(info.schema, meta)),
            [ident.pipeline, ident.sink, info.name],
        )
