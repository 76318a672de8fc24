"""Publication and slot lifecycle: create when missing, reuse when present, fail loudly when a
stored position can no longer be honoured, and drop on request (``cdc drop``).

The publication's own functions live in :mod:`connectors.postgres.publication` (re-exported
here, where the callers have always found them)."""

from __future__ import annotations

import time
from enum import Enum
from typing import Final, Literal

import structlog
from psycopg import sql

from cdc.config import redact_url
from cdc.errors import SourceFatal
from cdc.logging import Logger
from connectors.postgres.catalog import Catalog, SlotState
from connectors.postgres.config import PostgresSourceConfig
from connectors.postgres.lsn import Lsn
from connectors.postgres.publication import (
    drop_from_publication,
    ensure_publication,
    publication_tables,
)
from connectors.postgres.publication import run_ddl as _run_ddl
from connectors.postgres.replication import (
    CreatedSlot,
    ReplicationCommandError,
    ReplicationConnection,
)

__all__ = [
    "drop_from_publication",
    "drop_replication_objects",
    "ensure_publication",
    "publication_tables",
]

#: How long a slot may stay active before we call it taken: a walsender of a process that was
#: just killed needs a moment to notice its client is gone.
ACTIVE_SLOT_GRACE_S = 10.0


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
