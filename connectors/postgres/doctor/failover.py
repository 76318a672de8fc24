"""``cdc doctor``'s checks for a source on a standby (PostgreSQL 16+) and for failover slots (17+).

Failover (``source.slot_failover``) needs, on the primary, a failover slot and
``synchronized_standby_slots`` naming the standbys' physical slots (else the pipeline may read
transactions a promoted standby never had); on each standby ``sync_replication_slots = on``,
``primary_slot_name``, ``hot_standby_feedback = on`` and a ``dbname`` in ``primary_conninfo``.
Only the primary's side can be read from the primary; the detail names the standby's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from psycopg import sql

from cdc.contracts.checks import Check, failed, passed, warned
from connectors.postgres.catalog import Catalog
from connectors.postgres.lifecycle import UNGUARDED
from connectors.postgres.replication.connection import FAILOVER_VERSION, quote_ident
from connectors.postgres.replication.standby import FAILOVER_ON_STANDBY, STANDBY_DECODING_VERSION

_STANDBY_SIDE = (
    "each standby needs sync_replication_slots = on, primary_slot_name, "
    "hot_standby_feedback = on and dbname in primary_conninfo"
)

_FAILOVER = sql.SQL(
    "SELECT current_setting('synchronized_standby_slots'),"
    " (SELECT failover FROM pg_replication_slots WHERE slot_name = %s)"
)

_PHYSICAL = sql.SQL(
    "SELECT slot_name::text, slot_type::text, active FROM pg_replication_slots"
    " WHERE slot_name = ANY(%s)"
)


@dataclass(frozen=True, slots=True)
class Standby:
    """What a standby's own settings say (read on it)."""

    version_num: int
    hot_standby_feedback: str
    primary_slot_name: str


def standby_check(standby: Standby) -> Check:
    """Decoding here needs PostgreSQL 16, ``hot_standby_feedback`` and a physical slot upstream
    (the feedback then holds while the standby is disconnected too)."""
    if standby.version_num < STANDBY_DECODING_VERSION:
        detail = "a standby: PostgreSQL before 16 decodes changes on the primary only"
        return failed("standby", detail, "point source.dsn at the primary")
    if standby.hot_standby_feedback != "on":
        detail = (
            "a standby with hot_standby_feedback off: the primary's vacuum removes catalog rows "
            "the slot needs, and the standby then invalidates the slot (a start refuses)"
        )
        fix = "ALTER SYSTEM SET hot_standby_feedback = on; SELECT pg_reload_conf(); (on it)"
        return failed("standby", detail, fix)
    if not standby.primary_slot_name:
        detail = (
            "a standby without a physical slot upstream (primary_slot_name is empty): its "
            "feedback lapses while it is disconnected, and the slot can be invalidated then"
        )
        fix = "create a physical slot on the primary and set primary_slot_name to it"
        return warned("standby", detail, fix)
    detail = (
        f"a standby, hot_standby_feedback on, physical slot {standby.primary_slot_name}: the "
        "slot decodes here; heartbeats and online snapshots (watermarks) are off, the "
        "publication must come from the primary"
    )
    return passed("standby", detail)


def failover_checks(
    catalog: Catalog, slot: str, version_num: int, in_recovery: bool, wanted: bool
) -> list[Check]:
    """The failover checks, when ``source.slot_failover`` is on (none otherwise)."""
    label = "slot failover"
    if not wanted:
        return []
    if version_num < FAILOVER_VERSION:
        detail = (
            f"source.slot_failover needs PostgreSQL 17 or later; this is {version_num // 10000}"
        )
        return [failed(label, detail, "set slot_failover: false, or upgrade the server")]
    if in_recovery:
        return [failed(label, FAILOVER_ON_STANDBY, "point source.dsn at the primary")]
    standby_slots, failover = catalog.rows(_FAILOVER, (slot,))[0]
    checks = [_slot_failover(slot, failover)]
    names = [n.strip() for n in str(standby_slots or "").split(",") if n.strip()]
    return checks + _standby_slots(catalog, names)


def _slot_failover(slot: str, failover: bool | None) -> Check:
    label = f"slot {slot}: failover"
    if failover is None:
        return passed(label, "the slot does not exist yet: cdc run creates it with FAILOVER")
    if failover:
        return passed(label, "a failover slot: standbys with sync_replication_slots copy it")
    detail = "not a failover slot: standbys do not copy it, a failover would lose it"
    fix = f"cdc run makes it one (ALTER_REPLICATION_SLOT {quote_ident(slot)} (FAILOVER true))"
    return warned(label, detail, fix)


def _standby_slots(catalog: Catalog, names: Sequence[str]) -> list[Check]:
    label = "synchronized_standby_slots"
    if not names:
        return [warned(label, f"empty: {UNGUARDED.partition(': ')[2]}", _STANDBY_SIDE)]
    found = {row[0]: row for row in catalog.rows(_PHYSICAL, (list(names),))}
    checks = []
    for name in names:
        row = found.get(name)
        if row is None or row[1] != "physical":
            what = "does not exist" if row is None else f"is a {row[1]} slot"
            detail = f"names {name}, which {what}: the pipeline waits for it forever"
            create = sql.SQL("SELECT pg_create_physical_replication_slot({});")
            fix = f"{create.format(sql.Literal(name)).as_string(catalog.conn)} or name another"
            checks.append(failed(label, detail, fix))
        elif not row[2]:
            detail = f"names {name}, but no standby streams through it: the pipeline waits"
            checks.append(warned(label, detail, f"start the standby; {_STANDBY_SIDE}"))
        else:
            checks.append(passed(label, f"{name}: a standby streams through it; {_STANDBY_SIDE}"))
    return checks
