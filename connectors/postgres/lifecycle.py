"""Publication and slot lifecycle: create when missing, reuse when present, fail loudly when a
stored position can no longer be honoured, and drop on request (``cdc drop``).

The publication's own functions live in :mod:`connectors.postgres.publication.spec` (re-exported
here, where the callers have always found them)."""

from __future__ import annotations

import contextlib
from enum import Enum
from typing import Final, Literal

import structlog
from psycopg import sql

from cdc.config.pipeline import redact_url
from cdc.contracts.errors import SourceFatal
from cdc.support.logging import Logger
from cdc.support.wait import WaitTimeout, wait_until
from connectors.postgres.catalog import Catalog, SlotState
from connectors.postgres.config import PostgresSourceConfig
from connectors.postgres.lsn import Lsn
from connectors.postgres.publication.spec import (
    drop_from_publication,
    ensure_publication,
    publication_tables,
)
from connectors.postgres.publication.spec import run_ddl as _run_ddl
from connectors.postgres.replication.connection import (
    CreatedSlot,
    ReplicationCommandError,
    ReplicationConnection,
    require_failover_version,
)
from connectors.postgres.replication.standby import (
    FACTS_SQL,
    FAILOVER_ON_STANDBY,
    ServerFacts,
    check_decoding_here,
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

_log: Logger = structlog.get_logger()


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
            process past the grace period; on a standby, what decoding there lacks
            (:func:`connectors.postgres.replication.standby.check_decoding_here`).
    """
    state = catalog.slot(slot) if read is UNREAD else read
    if state is not None:
        # A slot that exists is checked here; a new one by create_slot before it is made.
        check_decoding_here(ServerFacts.from_row(catalog.rows(sql.SQL(FACTS_SQL))[0]), False, _log)
    last: list[SlotState | None] = []  # the latest look; the first is the one already read

    def free() -> tuple[SlotState | None] | None:
        last[:] = [catalog.slot(slot) if last else state]
        return _free(last[0], slot, database)

    try:
        return wait_until(free, ACTIVE_SLOT_GRACE_S, 0.25)[0]
    except WaitTimeout:
        held = last[0]
        raise slot_in_use(slot, held.active_pid if held else None) from None


def _free(state: SlotState | None, slot: str, database: str) -> tuple[SlotState | None] | None:
    """``(state,)`` when the slot is absent or free, ``None`` while another process holds it.

    Raises:
        SourceFatal: the slot belongs to another plugin or database.
    """
    if state is None:
        return (None,)
    if state.plugin != "pgoutput" or state.database != database:
        raise SourceFatal(
            f"replication slot {slot!r} exists for plugin {state.plugin!r} in database "
            f"{state.database!r}, not pgoutput in {database!r}; choose another slot name"
        )
    return (state,) if state.active_pid is None else None


def slot_in_use(slot: str, pid: int | None) -> SourceFatal:
    """The error for a slot another process streams from."""
    who = f"process {pid}" if pid else "another process"
    return SourceFatal(
        f"replication slot {slot!r} is active in {who} (is this pipeline running elsewhere?); "
        f"stop it, or terminate it with SELECT pg_terminate_backend({pid or 'pid'})"
    )


def create_slot(
    repl: ReplicationConnection,
    slot: str,
    logger: Logger,
    snapshot: str = "nothing",
    failover: bool = False,
) -> CreatedSlot:
    """Create the slot (a failover slot when asked); the caller decides whether a missing slot
    may be re-created.

    Raises:
        SourceFatal: the server refused, or cannot make this slot (a failover slot before
            PostgreSQL 17 or on a standby; a standby that cannot decode).
    """
    facts = ServerFacts.from_row(repl.command(FACTS_SQL.encode())[0])
    check_decoding_here(facts, failover, logger)
    if failover:
        require_failover_version(facts.version)
    # The server waits for transactions running now to finish before the slot is consistent:
    # say so, or a long-running transaction elsewhere looks like a hang. On a standby it waits
    # for the primary's next running-transactions record, which an idle primary never writes.
    if facts.in_recovery:
        logger.info(
            "slot.creating",
            slot=slot,
            on_standby=True,
            note="waits for the primary's next running-transactions record (about every 15 s "
            "while the primary writes; SELECT pg_log_standby_snapshot(); on the primary "
            "makes one now)",
        )
    else:
        logger.info("slot.creating", slot=slot, failover=failover)
    try:
        created = repl.create_slot(slot, "export" if snapshot == "export" else "nothing", failover)
    except ReplicationCommandError as exc:
        raise SourceFatal(f"cannot create replication slot {slot!r}: {exc}") from exc
    logger.info("slot.created", slot=slot, consistent_point=created.consistent_point)
    return created


_FAILOVER = sql.SQL(
    "SELECT s.failover, current_setting('synchronized_standby_slots'), pg_is_in_recovery()"
    " FROM pg_replication_slots s WHERE s.slot_name = %s"
)


def ensure_failover(
    catalog: Catalog, repl: ReplicationConnection, slot: str, wanted: bool, logger: Logger
) -> None:
    """With ``source.slot_failover``: make the existing slot a failover slot, and warn when the
    primary does not wait for a standby before sending (``synchronized_standby_slots``).

    Run before streaming starts (altering a slot needs it inactive).

    Raises:
        SourceFatal: the server is before PostgreSQL 17, or the slot lives on a standby.
    """
    if not wanted:
        return
    require_failover_version(repl.server_version)
    found = catalog.rows(_FAILOVER, (slot,))
    if not found:
        return
    failover, standby_slots, in_recovery = found[0]
    if in_recovery:
        raise SourceFatal(FAILOVER_ON_STANDBY)
    if not failover:
        try:
            repl.enable_failover(slot)
        except ReplicationCommandError as exc:
            raise SourceFatal(f"cannot make slot {slot!r} a failover slot: {exc}") from exc
        logger.info("slot.failover_enabled", slot=slot)
    if not standby_slots:
        logger.warning("slot.failover_unguarded", slot=slot, reason=UNGUARDED)


#: Why ``synchronized_standby_slots`` matters (the start's warning and ``cdc doctor``).
UNGUARDED = (
    "synchronized_standby_slots is empty on the primary: the pipeline may receive "
    "transactions a standby has not received yet, which a promoted standby would not have; "
    "name the standbys' physical slots there (ALTER SYSTEM SET synchronized_standby_slots = "
    "'<physical slot>'; SELECT pg_reload_conf();)"
)


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
        if catalog.rows(exists, (publication,)) and not _on_standby(catalog, publication, logger):
            statement = sql.SQL("DROP PUBLICATION {}").format(sql.Identifier(publication))
            _run_ddl(catalog, statement, f"cannot drop publication {publication!r}")
            dropped.append(f"publication {publication}")
    finally:
        catalog.close()
    logger.info("replication_objects.dropped", dropped=dropped)
    return dropped


def _on_standby(catalog: Catalog, publication: str, logger: Logger) -> bool:
    """Whether the server is a standby, where the publication (the primary's) stays."""
    if not catalog.in_recovery():
        return False
    logger.warning(
        "publication.kept",
        publication=publication,
        reason="source.dsn points at a standby: the publication is the primary's; drop it "
        "there when no other pipeline uses it",
    )
    return True


def _released(catalog: Catalog, slot: str, wait_s: float) -> SlotState | None:
    """The slot's state once no process holds it, or as it is after ``wait_s``."""
    last: list[SlotState | None] = []

    def released() -> bool:
        last[:] = [catalog.slot(slot)]
        return last[0] is None or last[0].active_pid is None

    with contextlib.suppress(WaitTimeout):  # then the slot as it is now is the answer
        wait_until(released, wait_s, 0.1)
    return last[0]
