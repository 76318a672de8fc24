"""Describe a table, plan its chunks and read one chunk, on an ordinary connection.

Every statement is composed with :mod:`psycopg.sql`. Chunks are read with ``COPY (SELECT ...) TO
STDOUT`` in text format: the server formats each value with the same output function pgoutput
uses, under the same session settings (see
:data:`connectors.postgres.replication.connection.SESSION_OPTIONS`), so the stream's
converters turn them into identical JSON values.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import psycopg
from psycopg import sql

from cdc.config.batch_bytes import BATCH_BYTES
from cdc.contracts.errors import SourceFatal
from connectors.postgres.assembly.relation_state import RelationState, build_state
from connectors.postgres.catalog import Catalog, TableInfo, published_column
from connectors.postgres.errors import QueryRefused, server_error
from connectors.postgres.pgoutput import Relation, RelationColumn
from connectors.postgres.publication.filters import PLAIN, TableFilter
from connectors.postgres.types import TypeRegistry
from connectors.postgres.types.copytext import split_line
from snapshots.chunks import Chunk, KeyChunk, PageChunk, key_chunks, page_chunks

Values = tuple[str | None, ...]

_COLUMNS = sql.SQL(
    "SELECT a.attname::text, a.atttypid::int8, a.atttypmod, a.attnotnull,"
    " EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = a.attrelid AND i.indisreplident"
    "  AND a.attnum = ANY(i.indkey)), a.attnum"
    " FROM pg_attribute a WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped"
    " AND {} ORDER BY a.attnum"
)


@dataclass(frozen=True, slots=True)
class SnapshotTable:
    """A table as the snapshot reads it.

    Attributes:
        state: the same relation state the stream builds (key, converter, published schema).
        chunk_key: columns the keyset chunks range over; empty means ``ctid`` page ranges.
        where: the table's row filter (``source.tables``), on every read of it.
        read: snapshots read the table (its ``ops`` keep ``r``).
    """

    info: TableInfo
    state: RelationState
    chunk_key: tuple[str, ...]
    where: str | None = None
    read: bool = True

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.state.relation.columns)

    @property
    def hides_values(self) -> bool:
        """Whether the table's filters hide values (a row filter, masks, left-out columns):
        then no error of a read of it may quote one (:func:`read_lines`)."""
        state = self.state
        return self.where is not None or bool(state.masks) or state.project is not None


def describe(
    catalog: Catalog,
    registry: TypeRegistry,
    pipeline: str,
    info: TableInfo,
    key_columns: Sequence[str] | None,
    chunk_columns: Sequence[str] | None,
    table_filter: TableFilter = PLAIN,
) -> SnapshotTable:
    """Build the table's relation state from the catalog, as a pgoutput Relation would.

    Args:
        key_columns: configured record-key columns (``source.key_columns``).
        chunk_columns: configured chunking columns (``source.snapshot_key_columns``): unique
            and NOT NULL; default the primary key.
        table_filter: the table's filters: the columns it leaves out are not read, its masks
            and row filter apply to every read.
    """
    # The columns pgoutput publishes on this server, no more: see published_column.
    # The filter's excluded columns go in build_state, which refuses an excluded key column.
    # Bound before any row is read: a renamed column keeps its mask (filters' docstring).
    table_filter = table_filter.bound(catalog, info.oid)
    rows = catalog.rows(_COLUMNS.format(published_column("a", catalog.server_version)), (info.oid,))
    identity = info.replica_identity
    columns = tuple(
        RelationColumn(_is_key(identity, name, info.primary_key, in_index), name, int(oid), mod)
        for name, oid, mod, _not_null, in_index, _attnum in rows
    )
    missing = registry.missing(c.type_oid for c in columns)
    if missing:
        catalog.load_types(registry, missing)
    relation = Relation(info.oid, info.schema, info.table, identity, columns)
    not_null = {str(r[0]) for r in rows if r[3]}
    dims = catalog.array_dims(info.oid)
    ids = [int(r[5]) for r in rows]
    state = build_state(
        pipeline, info, relation, registry, key_columns, not_null, 0, dims, ids, table_filter
    )
    if chunk_columns:
        _check_chunk_columns(info.name, chunk_columns, {c.name for c in columns}, not_null)
    chunk_key = tuple(chunk_columns or info.primary_key)
    return SnapshotTable(info, state, chunk_key, table_filter.where, table_filter.allows("r"))


def _check_chunk_columns(
    table: str, chunk_columns: Sequence[str], names: set[str], not_null: set[str]
) -> None:
    """Keyset chunks skip rows whose chunk key is NULL: refuse such columns up front.

    Raises:
        SourceFatal: a configured column is missing or nullable.
    """
    missing = [c for c in chunk_columns if c not in names]
    nullable = [c for c in chunk_columns if c in names and c not in not_null]
    if missing or nullable:
        raise SourceFatal(
            f"snapshot_key_columns of {table} must name existing NOT NULL columns "
            f"(missing: {missing}, nullable: {nullable})"
        )


def _is_key(identity: str, name: str, primary_key: tuple[str, ...], in_index: bool) -> bool:
    if identity == "f":
        return True
    if identity == "i":
        return bool(in_index)
    return identity == "d" and name in primary_key


def plan(conn: psycopg.Connection[Any], table: SnapshotTable, chunk_rows: int) -> list[Chunk]:
    """The table's chunks, planned on ``conn`` (inside the snapshot, when there is one).

    Keyset boundaries are every ``chunk_rows``-th key in key order, found in one index scan;
    without a key, page ranges sized from the table's row estimate.
    """
    if table.chunk_key:
        keys = sql.SQL(", ").join(sql.Identifier(k) for k in table.chunk_key)
        texts = sql.SQL(", ").join(
            sql.SQL("{}::text").format(sql.Identifier(k)) for k in table.chunk_key
        )
        query = sql.SQL(
            "SELECT {texts} FROM (SELECT {keys}, row_number() OVER (ORDER BY {keys}) AS cdc_rn"
            " FROM {table}) s WHERE cdc_rn % {every} = 0 ORDER BY cdc_rn"
        ).format(
            texts=texts,
            keys=keys,
            table=sql.Identifier(table.info.schema, table.info.table),
            every=sql.Literal(max(1, chunk_rows)),
        )
        boundaries = [tuple(str(v) for v in row) for row in conn.execute(query).fetchall()]
        return list(key_chunks(boundaries))
    sizes = _PARTITION_PAGES if table.info.partitioned else _PAGES
    pages, estimate = conn.execute(sizes, (table.info.oid,)).fetchone() or (0, 0.0)
    return list(page_chunks(int(pages or 0), float(estimate or 0.0), chunk_rows))


_PAGES = sql.SQL(
    "SELECT pg_relation_size(c.oid) / current_setting('block_size')::int8,"
    " c.reltuples::float8 FROM pg_class c WHERE c.oid = %s"
)

#: A partitioned table has no pages of its own; a ``ctid`` range applies to each partition, so
#: the ranges must span its largest partition and hold the rows of all of them.
_PARTITION_PAGES = sql.SQL(
    "SELECT max(pg_relation_size(t.relid)) / current_setting('block_size')::int8,"
    " sum(greatest(c.reltuples, 0))::float8 FROM pg_partition_tree(%s) t"
    " JOIN pg_class c ON c.oid = t.relid WHERE t.isleaf"
)


def chunk_query(
    table: SnapshotTable, chunk: Chunk, where: str | None, ordered: bool = False
) -> sql.Composed:
    """``COPY (SELECT <columns> FROM t WHERE <range> [AND (<filter>)] [AND (<where>)]) TO
    STDOUT``.

    ``where`` is the operator's own SQL (``cdc snapshot --where``), and the table's row filter
    its configuration's: trusted input, passed through as :class:`psycopg.sql.SQL` (the first
    after :func:`.where.check_where_text` accepted it, the second after the server accepted it
    as a publication's row filter). ``ordered``: a key chunk's rows in key order, as Debezium's
    incremental snapshot reads its chunks (its initial snapshot, like ours, reads them as they
    lie).
    """
    conditions: list[sql.Composable] = [_range(table, chunk)]
    for condition in (table.where, where):
        if condition:
            conditions.append(sql.SQL("({})").format(sql.SQL(condition)))
    select = sql.SQL("SELECT {} FROM {} WHERE {}").format(
        sql.SQL(", ").join(sql.Identifier(c) for c in table.columns),
        sql.Identifier(table.info.schema, table.info.table),
        sql.SQL(" AND ").join(conditions),
    )
    if ordered and isinstance(chunk, KeyChunk):
        order = sql.SQL(", ").join(sql.Identifier(k) for k in table.chunk_key)
        select = sql.SQL("{} ORDER BY {}").format(select, order)
    return sql.SQL("COPY ({}) TO STDOUT").format(select)


def _range(table: SnapshotTable, chunk: Chunk) -> sql.Composable:
    parts: list[sql.Composable]
    if isinstance(chunk, PageChunk):
        parts = [sql.SQL("ctid >= {}::tid").format(sql.Literal(f"({chunk.first_page},0)"))]
        if chunk.end_page is not None:
            parts.append(sql.SQL("ctid < {}::tid").format(sql.Literal(f"({chunk.end_page},0)")))
        return sql.SQL(" AND ").join(parts)
    assert isinstance(chunk, KeyChunk)
    keys = sql.SQL("ROW({})").format(sql.SQL(", ").join(sql.Identifier(k) for k in table.chunk_key))
    parts = [sql.SQL("true")]
    if chunk.lo is not None:
        parts.append(sql.SQL("{} > {}").format(keys, _row(chunk.lo)))
    if chunk.hi is not None:
        parts.append(sql.SQL("{} <= {}").format(keys, _row(chunk.hi)))
    return sql.SQL(" AND ").join(parts)


def _row(values: Sequence[str]) -> sql.Composable:
    # Untyped literals: the server casts each to its column's type in the row comparison.
    return sql.SQL("ROW({})").format(sql.SQL(", ").join(sql.Literal(v) for v in values))


def read_lines(
    conn: psycopg.Connection[Any],
    query: sql.Composed,
    piece_rows: int,
    hides_values: bool = False,
    piece_bytes: int = BATCH_BYTES,
) -> Generator[list[bytes], None, None]:
    """The chunk's rows as lines of COPY text (newline included or not), in pieces of at most
    ``piece_rows`` and about ``piece_bytes`` (:mod:`cdc.config.batch_bytes`: 5,000 rows of 1 MB
    values are 5 GB; a piece always holds at least one row): the native encoder reads them without
    splitting them in Python first (:func:`.rows.to_records`).

    A caller that may stop early closes the generator before it uses or ends ``conn`` again
    (``contextlib.closing``): closed, psycopg's COPY exit cancels the query on the server and
    reads only what was already sent; left open, the COPY holds the connection's lock, and a
    rollback or commit of ``conn`` waits on it for good.

    Raises:
        QueryRefused: the server refused the read of a table that ``hides_values``
            (:attr:`SnapshotTable.hides_values`), with a summary in place of the server's
            message, which can quote a hidden value (``invalid input syntax for type integer:
            "SSN-RAW-1"`` of an operator's ``--where``).
    """
    try:
        yield from _copy_lines(conn, query, piece_rows, piece_bytes)
    except psycopg.Error as exc:
        if not hides_values or isinstance(exc, psycopg.OperationalError):
            raise  # the connection, or a table that hides nothing
        # Not chained: a logged traceback would print the original.
        raise QueryRefused(server_error(exc, hides_values)) from None


def _copy_lines(
    conn: psycopg.Connection[Any], query: sql.Composed, piece_rows: int, piece_bytes: int
) -> Iterator[list[bytes]]:
    piece: list[bytes] = []
    append = piece.append
    size = 0
    with conn.cursor() as cur, cur.copy(query) as copy:
        # psycopg's COPY OUT hands over each block as a memoryview (``Copy.read``): its
        # ``nbytes`` is an attribute, where ``len`` would be a call a row.
        for block in cast("Iterator[memoryview]", copy):
            data = bytes(block)
            size += block.nbytes
            # libpq hands COPY OUT data over one row at a time, newline included.
            if data.count(b"\n") == 1:
                append(data)
            else:
                piece.extend(lines_of(data))
            if len(piece) >= piece_rows or size >= piece_bytes:
                yield piece
                piece, size = [], 0
                append = piece.append
    if piece:
        yield piece


def lines_of(block: bytes) -> list[bytes]:
    """The lines of a block of whole COPY lines, without their newlines (an empty line is a
    row too: one empty text column)."""
    lines = block.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return lines


def read_rows(
    conn: psycopg.Connection[Any],
    query: sql.Composed,
    piece_rows: int,
    hides_values: bool = False,
    piece_bytes: int = BATCH_BYTES,
) -> Generator[list[Values], None, None]:
    """The chunk's rows as text values, in pieces of at most ``piece_rows`` and about
    ``piece_bytes`` (``hides_values``: see :func:`read_lines`)."""
    for lines in read_lines(conn, query, piece_rows, hides_values, piece_bytes):
        yield [split_line(line) for line in lines]
