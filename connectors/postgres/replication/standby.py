"""Decoding on a hot standby (PostgreSQL 16+) and failover slots (17+): what a start checks.

On a standby the slot lives there and decodes the WAL the standby replays; it needs the primary
to keep the catalog rows it still reads. That is ``hot_standby_feedback = on`` on the standby,
and a physical slot upstream (``primary_slot_name``) so the feedback holds across reconnects.
With feedback off, the primary's next catalog vacuum makes the standby invalidate the slot, and
the changes after it are lost: a start refuses rather than fail hours later.

A standby is read-only: nothing the source would write there (the publication, heartbeats,
snapshot watermarks) can be; each of those says so where it happens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cdc.contracts.errors import SourceFatal
from cdc.support.logging import Logger

#: The first version that decodes on a standby.
STANDBY_DECODING_VERSION = 160000

#: One query, for the replication connection (text results) and the catalog one alike.
FACTS_SQL = (
    "SELECT pg_is_in_recovery()::text, current_setting('server_version_num'),"
    " current_setting('hot_standby_feedback'), current_setting('primary_slot_name')"
)

FAILOVER_ON_STANDBY = (
    "source.slot_failover: source.dsn points at a standby, and PostgreSQL makes only a "
    "primary's slots failover slots (a standby gets them by sync_replication_slots); "
    "set slot_failover: false, or point source.dsn at the primary"
)

_FEEDBACK_FIX = (
    "set hot_standby_feedback = on on the standby "
    "(ALTER SYSTEM SET hot_standby_feedback = on; SELECT pg_reload_conf();)"
)


@dataclass(frozen=True, slots=True)
class ServerFacts:
    """Whether the server is a standby, and what decoding there needs."""

    in_recovery: bool
    version: int
    hot_standby_feedback: bool
    primary_slot_name: str

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> ServerFacts:
        """From :data:`FACTS_SQL`'s row (every value as text)."""
        recovery, version, feedback, slot = (str(v or "") for v in row)
        return cls(recovery in ("true", "t"), int(version), feedback == "on", slot)


def check_decoding_here(facts: ServerFacts, failover: bool, logger: Logger) -> None:
    """Refuse what cannot work on a standby; a no-op on a primary.

    Raises:
        SourceFatal: the standby is before PostgreSQL 16, ``hot_standby_feedback`` is off, or
            a failover slot is asked for (only a primary's slot can be one).
    """
    if not facts.in_recovery:
        return
    if facts.version < STANDBY_DECODING_VERSION:
        raise SourceFatal(
            f"source.dsn points at a standby (in recovery) of PostgreSQL {facts.version // 10000}:"
            " logical decoding on a standby needs PostgreSQL 16 or later; point source.dsn at "
            "the primary"
        )
    if failover:
        raise SourceFatal(FAILOVER_ON_STANDBY)
    if not facts.hot_standby_feedback:
        raise SourceFatal(
            "hot_standby_feedback is off on the standby source.dsn points at: the primary's "
            "vacuum would remove catalog rows the slot still needs, the standby would then "
            f"invalidate the slot and the changes after it would be lost; {_FEEDBACK_FIX}"
        )
    if not facts.primary_slot_name:
        logger.warning(
            "standby.no_physical_slot",
            reason="the standby streams without a physical slot (primary_slot_name is empty): "
            "its hot_standby_feedback holds only while it is connected, and a disconnect lets "
            "the primary's vacuum remove rows the slot needs (which invalidates it); set "
            "primary_slot_name to a physical slot on the primary",
        )


def read_only_problem(what: str) -> str:
    """The message for a write the source cannot do on a standby."""
    return (
        f"{what}: source.dsn points at a hot standby, which is read-only; it must be done on "
        "the primary (the standby replays it)"
    )
