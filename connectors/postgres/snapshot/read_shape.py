"""The table's shape when a chunk is read, and whether the chunk's plan still fits it.

A request is planned once, and DDL may commit at any time after: a column renamed, dropped,
added or retyped, the primary key replaced, the table dropped. Each chunk read locks its table
first (so no more DDL commits until the read's window is closed), then describes it again: the
columns read are the table's at read time. A plan whose boundaries no longer fit (another chunk
key) is planned again; a table that is gone ends the request with that reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import psycopg
from psycopg import sql

from cdc.contracts.errors import SourceFatal
from connectors.postgres.snapshot.reader import SnapshotTable
from connectors.postgres.snapshot.window_rows import ChunkJob
from snapshots.chunks import Chunk, KeyChunk

#: The table as the catalog describes it now (columns renamed, added, dropped or retyped since
#: the plan): each chunk is read in the shape of its read.
Refresh = Callable[[SnapshotTable], SnapshotTable]


class TableGone(SourceFatal):
    """The table a request reads no longer exists: the request ends with this reason."""


class PlanOutdated(Exception):
    """The chunk plan no longer fits the table (its chunk key changed): plan it again."""


def plan_shape(table: SnapshotTable) -> tuple[object, ...]:
    """What a chunk plan's boundaries stand for: the table, and its chunk key's columns by
    attnum (a rename keeps them) and type (the boundaries are values of those types)."""
    ids = {c.name: c.id for c in table.state.table_schema.columns}
    types = {c.name: c.type_oid for c in table.state.relation.columns}
    return table.info.oid, tuple((ids.get(k, k), types.get(k)) for k in table.chunk_key)


def fits(chunk: Chunk, table: SnapshotTable) -> bool:
    """Whether ``chunk`` can range over ``table`` as it is (a plan stored before a restart may
    be of another chunk key): a key chunk needs a key of its bounds' length, a page chunk none."""
    if not isinstance(chunk, KeyChunk):
        return not table.chunk_key
    bound = chunk.lo if chunk.lo is not None else chunk.hi
    return bool(table.chunk_key) and (bound is None or len(bound) == len(table.chunk_key))


def lock_current(conn: psycopg.Connection[Any], job: ChunkJob, refresh: Refresh | None) -> ChunkJob:
    """Lock the job's table (ACCESS SHARE) for the transaction open on ``conn``, which has not
    taken its snapshot yet (``LOCK TABLE`` takes none); then the job in the table's shape now.

    Raises:
        TableGone: the table was dropped (or renamed) since the plan.
        PlanOutdated: its chunk key changed since the plan.
    """
    info = job.table.info
    try:
        # ONLY: a partitioned table's columns change only through it, and its partitions need
        # not be the role's to lock (the read locks them as it reads them).
        conn.execute(
            sql.SQL("LOCK TABLE ONLY {} IN ACCESS SHARE MODE").format(
                sql.Identifier(info.schema, info.table)
            )
        )
    except psycopg.errors.UndefinedTable:
        raise TableGone(
            f"table {info.name} no longer exists (dropped or renamed after its snapshot "
            "was requested): nothing is left to read"
        ) from None
    if refresh is None:
        return job
    # Described on another session: this one holds the lock, so the shape cannot change.
    current = refresh(job.table)
    if plan_shape(current) != plan_shape(job.table) or not fits(job.chunk, current):
        raise PlanOutdated(
            f"the chunk key of {info.name} changed since its plan "
            f"(now {', '.join(current.chunk_key) or 'ctid'}): planned again"
        )
    return replace(job, table=current)
