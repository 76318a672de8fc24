"""Collections added to or removed from ``source.tables`` since the last start.

The stored entry records the collections the log holds (``captured``). An added one has
documents the log never saw: it is snapshotted as the mode says
(:func:`snapshots.modes.added_tables`). A removed one is no longer watched; its topic and its
rows in the sinks stay.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from cdc.logging import Logger
from snapshots.modes import Action, AddedTables, added_tables, table_changes

Doc = dict[str, Any]


def captured_changes(
    entry: Doc, configured: list[str], published: Collection[str], logger: Logger
) -> list[str]:
    """The collections added since the last start; records every configured one as captured
    in ``entry`` and logs the removed ones.

    A state stored before the log recorded its collections falls back to the schemas published
    (``published``): a collection with documents was snapshotted or streamed, so it has one.
    """
    stored = entry.get("captured")
    if not entry.get("streams"):
        stored = configured  # a first start: whatever it snapshots, it finds
    elif stored is None:
        stored = [t for t in configured if t in published]
    changes = table_changes(configured, stored)
    running = entry.get("snapshot")
    if running and changes.removed:  # an unfinished snapshot reads them no further
        for name in changes.removed:
            running["collections"].pop(name, None)
        if not running["collections"]:
            del entry["snapshot"]
    if changes.removed:
        logger.warning(
            "source.tables_removed",
            tables=changes.removed,
            reason="no longer in source.tables: their changes are not captured from now on; "
            "their topics and the rows in the sinks stay",
        )
    entry["captured"] = sorted(configured)
    return changes.added


def announce_added(added: list[str], mode: str, whole: bool, logger: Logger) -> AddedTables:
    """Log what this start does about ``added`` (``whole``: its snapshot reads every table)."""
    plan = added_tables(mode, Action.EXPORT if whole else Action.STREAM)
    log = logger.info if plan.snapshot else logger.warning
    log("source.tables_added", tables=added, snapshot=plan.snapshot, reason=plan.reason)
    return plan
