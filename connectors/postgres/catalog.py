"""Catalog queries on an ordinary (non-replication) connection.

Every statement is composed with :mod:`psycopg.sql`; names never reach SQL through string
formatting. Failures name the culprit (table, publication, role) and, where a DBA must act,
the exact statement to run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from cdc.contracts.errors import SourceFatal
from connectors.postgres.errors import connect_error, lost
from connectors.postgres.replication.connection import session_conninfo
from connectors.postgres.types import TYPE_QUERY, TypeRegistry

Query = sql.SQL | sql.Composed

#: The first version whose pgoutput publishes generated columns (stored ones, with the
#: publication's ``publish_generated_columns = stored``); virtual ones (18+) never are.
PUBLISHES_GENERATED_MIN_VERSION = 180000

#: ``pg_logical_emit_message(transactional, prefix, content)``, the text variant. The casts name
#: it by type rather than leave it to overload resolution of untyped parameters, which has more
#: candidates since PostgreSQL 17 (a fourth ``flush`` argument, with a default, on both the text
#: and the bytea variant).
EMIT_MESSAGE = sql.SQL("SELECT pg_logical_emit_message({}, %s::text, %s::text)::text")


@dataclass(frozen=True, slots=True)
class TableInfo:
    """A captured table as the catalog describes it at start.

    Attributes:
        replica_identity: ``d`` default, ``n`` nothing, ``f`` full, ``i`` index.
        primary_key: primary-key columns in key order (empty without a primary key).
        partitioned: a partitioned table (``relkind`` ``p``): its partitions' changes are
            published through it (``publish_via_partition_root``).
        ancestors: ``schema.table`` of the partitioned tables this one is a partition of
            (nearest first; empty for a table that is no partition).
        generated: ``(column, kind)`` of its generated columns in column order, ``kind``
            ``s`` stored or ``v`` virtual (PostgreSQL 18).
    """

    schema: str
    table: str
    oid: int
    replica_identity: str
    primary_key: tuple[str, ...]
    partitioned: bool = False
    ancestors: tuple[str, ...] = ()
    generated: tuple[tuple[str, str], ...] = ()

    def generated_of(self, kind: str) -> tuple[str, ...]:
        """The generated columns of ``kind`` (``s`` stored, ``v`` virtual)."""
        return tuple(name for name, k in self.generated if k == kind)

    @property
    def name(self) -> str:
        """``schema.table``."""
        return f"{self.schema}.{self.table}"


@dataclass(frozen=True, slots=True)
class SlotState:
    """A row of ``pg_replication_slots``."""

    plugin: str | None
    database: str | None
    active_pid: int | None
    confirmed_flush: str | None


_TABLE = sql.SQL(
    "SELECT c.oid::int8, c.relreplident::text, has_table_privilege(c.oid, 'SELECT'),"
    " ARRAY(SELECT a.attname::text FROM pg_index i"
    "  CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)"
    "  JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum"
    "  WHERE i.indrelid = c.oid AND i.indisprimary ORDER BY k.ord),"
    " c.relkind = 'p',"
    " ARRAY(SELECT an.nspname || '.' || ac.relname FROM pg_partition_ancestors(c.oid)"
    "  WITH ORDINALITY AS x(relid, ord) JOIN pg_class ac ON ac.oid = x.relid"
    "  JOIN pg_namespace an ON an.oid = ac.relnamespace WHERE x.relid <> c.oid ORDER BY x.ord),"
    " ARRAY(SELECT ARRAY[g.attname::text, g.attgenerated::text] FROM pg_attribute g"
    "  WHERE g.attrelid = c.oid AND g.attnum > 0 AND NOT g.attisdropped"
    "  AND g.attgenerated <> '' ORDER BY g.attnum)"
    " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
    " WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p')"
)

_TOASTABLE = sql.SQL(
    "SELECT a.attname::text FROM pg_attribute a"
    " JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace"
    " WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped"
    " AND a.attlen = -1 AND a.attstorage <> 'p' AND {} ORDER BY a.attnum"
)


def published_column(alias: str, version: int) -> sql.Composed:
    """The condition on ``pg_attribute`` row ``alias``: a column pgoutput publishes on
    ``version``, and so the snapshot reads. Generated columns are left out of the stream up to
    17, and virtual ones on 18 too: a snapshot that read them would give a table's rows a
    column its streamed rows lack (a sink would drop the value at the row's next change)."""
    attgenerated = sql.Identifier(alias, "attgenerated")
    if version >= PUBLISHES_GENERATED_MIN_VERSION:
        return sql.SQL("{} IN ('', 's')").format(attgenerated)
    return sql.SQL("{} = ''").format(attgenerated)


class Catalog:
    """The catalog connection (autocommit).

    Args:
        dsn: the user's DSN (secret).
        where: the redacted DSN, for messages.
        connect_timeout_s: connection timeout.
    """

    def __init__(self, dsn: str, where: str, connect_timeout_s: float) -> None:
        self._where = where
        self._version: int | None = None
        try:
            self.conn = psycopg.connect(session_conninfo(dsn, connect_timeout_s), autocommit=True)
            self.conn.adapters.register_dumper(_Untyped, _UntypedDumper)
        except psycopg.OperationalError as exc:
            raise connect_error(where, str(exc)) from exc

    def rows(self, query: Query, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one query; a broken connection becomes ``SourceUnavailable``."""
        try:
            return list(self.conn.execute(query, params).fetchall())
        except psycopg.OperationalError as exc:
            raise lost(self._where, str(exc)) from exc

    def run(self, statement: Query) -> None:
        """Run one statement that returns no rows (DDL)."""
        try:
            self.conn.execute(statement)
        except psycopg.OperationalError as exc:
            raise lost(self._where, str(exc)) from exc

    def check_server(self) -> int:
        """Check ``wal_level`` and return ``server_version_num``.

        Raises:
            SourceFatal: logical decoding is off.
        """
        [(level, version)] = self.rows(
            sql.SQL("SELECT current_setting('wal_level'), current_setting('server_version_num')")
        )
        self._version = int(version)
        if level != "logical":
            raise SourceFatal(
                f"wal_level is {level!r} on {self._where}; logical replication needs "
                "wal_level = logical (ALTER SYSTEM SET wal_level = logical; then restart)"
            )
        return int(version)

    @property
    def server_version(self) -> int:
        """``server_version_num`` (read once)."""
        if self._version is None:
            [(version,)] = self.rows(sql.SQL("SELECT current_setting('server_version_num')"))
            self._version = int(version)
        return self._version

    def check_role(self) -> str:
        """Check that the role may replicate; returns its name.

        Raises:
            SourceFatal: the role has neither REPLICATION nor superuser.
        """
        [(role, replication, superuser)] = self.rows(
            sql.SQL(
                "SELECT rolname::text, rolreplication, rolsuper FROM pg_roles"
                " WHERE rolname = current_user"
            )
        )
        if not (replication or superuser):
            raise SourceFatal(
                f"role {role!r} lacks the REPLICATION attribute; a DBA must run: "
                + sql.SQL("ALTER ROLE {} WITH REPLICATION;")
                .format(sql.Identifier(role))
                .as_string(self.conn)
            )
        return str(role)

    def table(self, schema: str, table: str, role: str) -> TableInfo:
        """Describe one configured table.

        Raises:
            SourceFatal: the table does not exist or the role may not read it.
        """
        found = self.rows(_TABLE, (schema, table))
        if not found:
            raise SourceFatal(f"table {schema}.{table} does not exist (source.tables)")
        oid, identity, readable, key, partitioned, ancestors, generated = found[0]
        if not readable:
            grant = sql.SQL("GRANT SELECT ON {} TO {};").format(
                sql.Identifier(schema, table), sql.Identifier(role)
            )
            raise SourceFatal(
                f"role {role!r} may not SELECT from {schema}.{table}; a DBA must run: "
                + grant.as_string(self.conn)
            )
        return TableInfo(
            schema,
            table,
            int(oid),
            identity,
            tuple(key),
            bool(partitioned),
            tuple(ancestors),
            tuple((str(name), str(kind)) for name, kind in generated),
        )

    def slot(self, name: str) -> SlotState | None:
        """The slot called ``name``, or ``None``."""
        found = self.rows(
            sql.SQL(
                "SELECT plugin::text, database::text, active_pid, confirmed_flush_lsn::text"
                " FROM pg_replication_slots WHERE slot_name = %s"
            ),
            (name,),
        )
        return SlotState(*found[0]) if found else None

    def not_null(self, oid: int) -> set[str]:
        """Names of the NOT NULL columns of a table (for published schemas)."""
        rows = self.rows(
            sql.SQL(
                "SELECT attname::text FROM pg_attribute WHERE attrelid = %s AND attnum > 0"
                " AND NOT attisdropped AND attnotnull"
            ),
            (oid,),
        )
        return {r[0] for r in rows}

    def array_dims(self, oid: int) -> dict[str, int]:
        """Declared dimensions of a table's multi-dimensional array columns (``int[][]`` -> 2).

        pgoutput's Relation message names only the array type, which is the same for any
        number of dimensions; sinks with fixed nesting (DuckDB lists) need the declared one.
        """
        rows = self.rows(
            sql.SQL(
                "SELECT attname::text, attndims FROM pg_attribute WHERE attrelid = %s"
                " AND attnum > 0 AND NOT attisdropped AND attndims > 1"
            ),
            (oid,),
        )
        return {str(r[0]): int(r[1]) for r in rows}

    def read_row(
        self, schema: str, table: str, columns: Sequence[str], key: dict[str, str | None]
    ) -> tuple[str | None, ...] | None:
        """The current text form of ``columns`` of the row with ``key`` (text values).

        Key values go as untyped parameters so the server casts them to the column's type.
        """
        query = sql.SQL("SELECT {} FROM {} WHERE {}").format(
            sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(c)) for c in columns),
            sql.Identifier(schema, table),
            sql.SQL(" AND ").join(
                sql.SQL("{} IS NULL" if v is None else "{} = %s").format(sql.Identifier(k))
                for k, v in key.items()
            ),
        )
        try:
            found = self.rows(query, [_Untyped(v) for v in key.values() if v is not None])
        except (psycopg.errors.UndefinedColumn, psycopg.errors.UndefinedTable):
            return None  # altered or dropped since the change: the row's value is gone too
        return tuple(found[0]) if found else None

    def toastable_columns(self, schema: str, table: str) -> list[str]:
        """The columns whose values PostgreSQL can store out of line (TOAST), in order: those
        of variable-length types (``attlen`` -1) whose storage is not ``plain``."""
        query = _TOASTABLE.format(published_column("a", self.server_version))
        return [str(row[0]) for row in self.rows(query, (schema, table))]

    def load_types(self, registry: TypeRegistry, oids: Sequence[int]) -> None:
        """Add the catalog rows of ``oids`` (and the types they build on) to ``registry``."""
        registry.add_rows(self.rows(sql.SQL(TYPE_QUERY), (list(oids),)))

    def in_recovery(self) -> bool:
        """Whether the server is a standby (read-only: it cannot write WAL or DDL)."""
        return bool(self.rows(sql.SQL("SELECT pg_is_in_recovery()"))[0][0])

    def database(self) -> str:
        """The name of the connected database."""
        return str(self.rows(sql.SQL("SELECT current_database()::text"))[0][0])

    def emit_message(self, prefix: str, content: str) -> None:
        """``pg_logical_emit_message(false, prefix, content)``: WAL the slot will decode."""
        self.rows(EMIT_MESSAGE.format(sql.Literal(False)), (prefix, content))

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()


class _Untyped(str):
    """A parameter sent as ``unknown`` so PostgreSQL infers its type from the column."""

    __slots__ = ()


class _UntypedDumper(psycopg.adapt.Dumper):
    oid = 0  # unknown: the server casts the text to whatever the comparison needs

    def dump(self, obj: Any) -> bytes:
        return str(obj).encode()
