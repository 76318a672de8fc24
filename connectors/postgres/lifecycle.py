"""Publication and slot lifecycle: create when missing, reuse when present, fail loudly when a
stored position can no longer be honoured, and drop on request (``cdc drop``)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from enum import Enum
from typing import Final, Literal

import psycopg
import structlog
from psycopg import sql

from cdc.config import redact_url
from cdc.errors import SourceFatal
from cdc.logging import Logger
from connectors.postgres.catalog import Catalog, Query, SlotState, TableInfo
from connectors.postgres.config import PostgresSourceConfig
from connectors.postgres.lsn import Lsn
from connectors.postgres.replication import (
    CreatedSlot,
    ReplicationCommandError,
    ReplicationConnection,
)

#: How long a slot may stay active before we call it taken: a walsender of a process that was
#: just killed needs a moment to notice its client is gone.
ACTIVE_SLOT_GRACE_S = 10.0


def _table_list(tables: Sequence[TableInfo]) -> sql.Composed:
    return sql.SQL(", ").join(sql.Identifier(t.schema, t.table) for t in tables)


def publication_tables(catalog: Catalog, name: str) -> set[tuple[str, str]] | None:
    """``(schema, table)`` of every table in publication ``name``; ``None`` when it is missing."""
    if not catalog.rows(sql.SQL("SELECT 1 FROM pg_publication WHERE pubname = %s"), (name,)):
        return None
    query = sql.SQL(
        "SELECT schemaname::text, tablename::text FROM pg_publication_tables WHERE pubname = %s"
    )
    return {(s, t) for s, t in catalog.rows(query, (name,))}


def ensure_publication(
    catalog: Catalog, name: str, tables: Sequence[TableInfo], role: str, logger: Logger
) -> None:
    """Create publication ``name`` for ``tables``, or add the tables it lacks.

    Raises:
        SourceFatal: the role may not create or alter it; the message gives the DBA's statement.
    """
    published = publication_tables(catalog, name)
    if published is None:
        statement = sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(
            sql.Identifier(name), _table_list(tables)
        )
        _run_ddl(catalog, statement, f"role {role!r} may not create publication {name!r}")
        logger.info("publication.created", publication=name, tables=[t.name for t in tables])
        return
    for table in tables:
        if (table.schema, table.table) in published:
            continue
        statement = sql.SQL("ALTER PUBLICATION {} ADD TABLE {}").format(
            sql.Identifier(name), sql.Identifier(table.schema, table.table)
        )
        _run_ddl(
            catalog,
            statement,
            f"table {table.name} is not in publication {name!r} and role {role!r} may not add it",
        )
        logger.info("publication.table_added", publication=name, table=table.name)


def drop_from_publication(
    catalog: Catalog, name: str, tables: Sequence[tuple[str, str]], logger: Logger
) -> None:
    """Take ``tables`` (no longer captured) out of publication ``name``, so the server stops
    decoding their changes for this slot.

    Not fatal when it cannot be done (no privilege, a ``FOR ALL TABLES`` publication): the
    source skips the changes of a table it does not capture, so capture stops either way; the
    warning gives the DBA's statement.
    """
    published = publication_tables(catalog, name) or set()
    for schema, table in tables:
        if (schema, table) not in published:
            continue  # dropped from the database, or never added
        statement = sql.SQL("ALTER PUBLICATION {} DROP TABLE {}").format(
            sql.Identifier(name), sql.Identifier(schema, table)
        )
        try:
            _run_ddl(catalog, statement, f"cannot take {schema}.{table} out of {name!r}")
        except SourceFatal as exc:
            logger.warning(
                "publication.table_kept",
                publication=name,
                table=f"{schema}.{table}",
                reason=str(exc),
            )
            continue
        logger.info("publication.table_dropped", publication=name, table=f"{schema}.{table}")


def _run_ddl(catalog: Catalog, statement: Query, problem: str) -> None:
    try:
        catalog.run(statement)
    except psycopg.errors.InsufficientPrivilege as exc:
        text = statement.as_string(catalog.conn)
        reason = exc.diag.message_primary
        raise SourceFatal(f"{problem} ({reason}); a DBA must run: {text};") from exc
    except psycopg.errors.ObjectNotInPrerequisiteState as exc:
        raise SourceFatal(f"{problem}: {exc.diag.message_primary}") from exc


class _Unread(Enum):
    UNREAD = "unread"


#: "The slot was not read yet in this start" (``None`` means it was read and is missing).
UNREAD: Final = _Unread.UNREAD
Unread = Literal[_Unread.UNREAD]


def check_slot(
    catalog: Catalog, slot: str, database: str, read: SlotState | Unread | None = UNREAD
) -> SlotState | None:
    """The slot, once no other process holds it.

    Args:
        read: the slot as this start already read it: it is read again only while another
            process holds it.

    Raises:
        SourceFatal: the slot belongs to another plugin or database, or stays active in another
            process past the grace period.
    """
    deadline = time.monotonic() + ACTIVE_SLOT_GRACE_S
    state = catalog.slot(slot) if read is UNREAD else read
    while True:
        if state is None:
            return None
        if state.plugin != "pgoutput" or state.database != database:
            raise SourceFatal(
                f"replication slot {slot!r} exists for plugin {state.plugin!r} in database "
                f"{state.database!r}, not pgoutput in {database!r}; choose another slot name"
            )
        if state.active_pid is None:
            return state
        if time.monotonic() > deadline:
            raise slot_in_use(slot, state.active_pid)
        time.sleep(0.25)
        state = catalog.slot(slot)


def slot_in_use(slot: str, pid: int | None) -> SourceFatal:
    """The error for a slot another process streams from."""
    who = f"process {pid}" if pid else "another process"
    return SourceFatal(
        f"replication slot {slot!r} is active in {who} (is this pipeline running elsewhere?); "
        f"stop it, or terminate it with SELECT pg_terminate_backend({pid or 'pid'})"
    )


def create_slot(
    repl: ReplicationConnection, slot: str, logger: Logger, snapshot: str = "nothing"
) -> CreatedSlot:
    """Create the slot; the caller decides whether a missing slot may be re-created."""
    # The server waits for transactions running now to finish before the slot is consistent:
    # say so, or a long-running transaction elsewhere looks like a hang.
    logger.info("slot.creating", slot=slot)
    try:
        created = repl.create_slot(slot, "export" if snapshot == "export" else "nothing")
    except ReplicationCommandError as exc:
        raise SourceFatal(f"cannot create replication slot {slot!r}: {exc}") from exc
    logger.info("slot.created", slot=slot, consistent_point=created.consistent_point)
    return created


def lost_slot(slot: str, stored: Lsn) -> SourceFatal:
    """The error for a slot that vanished while a position is stored."""
    return SourceFatal(
        f"replication slot {slot!r} no longer exists, but position {stored} is stored: changes "
        "after it may have been lost. Re-snapshot (snapshot: when_needed), or drop the "
        "pipeline's stored state and start over"
    )


#: How long ``cdc drop`` waits for an active slot to be released: the walsender of a pipeline
#: that just stopped ends a moment after its connection closed (longer on a loaded server).
RELEASE_WAIT_S = 10.0


def drop_replication_objects(
    config: PostgresSourceConfig, pipeline_name: str, release_wait_s: float = RELEASE_WAIT_S
) -> list[str]:
    """Drop the pipeline's slot and publication (``cdc drop``).

    A slot still active is waited for, up to ``release_wait_s``: a pipeline stopped just before
    still holds it until its walsender ends.

    Returns:
        What was dropped, e.g. ``["slot shop_slot", "publication shop_pub"]``.

    Raises:
        SourceFatal: the slot is in use, or the role may not drop an object.
        SourceUnavailable: the server cannot be reached.
    """
    logger: Logger = structlog.get_logger().bind(pipeline=pipeline_name)
    dsn = config.dsn.get_secret_value()
    catalog = Catalog(dsn, redact_url(dsn), config.connect_timeout_s)
    dropped: list[str] = []
    try:
        slot = config.slot_name(pipeline_name)
        state = _released(catalog, slot, release_wait_s)
        if state is not None:
            if state.active_pid is not None:
                raise slot_in_use(slot, state.active_pid)
            catalog.rows(sql.SQL("SELECT pg_drop_replication_slot(%s)::text"), (slot,))
            dropped.append(f"slot {slot}")
        publication = config.publication_name(pipeline_name)
        exists = sql.SQL("SELECT 1 FROM pg_publication WHERE pubname = %s")
        if catalog.rows(exists, (publication,)):
            statement = sql.SQL("DROP PUBLICATION {}").format(sql.Identifier(publication))
            _run_ddl(catalog, statement, f"cannot drop publication {publication!r}")
            dropped.append(f"publication {publication}")
    finally:
        catalog.close()
    logger.info("replication_objects.dropped", dropped=dropped)
    return dropped


def _released(catalog: Catalog, slot: str, wait_s: float) -> SlotState | None:
    """The slot's state once no process holds it, or as it is after ``wait_s``."""
    deadline = time.monotonic() + wait_s
    state = catalog.slot(slot)
    while state is not None and state.active_pid is not None and time.monotonic() < deadline:
        time.sleep(0.1)
        state = catalog.slot(slot)
    return state
