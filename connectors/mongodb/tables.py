"""Collections added to or removed from ``source.tables`` since the last start, and those to
read again or never because of their filters.

The stored entry records the collections the log holds (``captured``). An added one has
documents the log never saw: it is snapshotted as the mode says
(:func:`snapshots.modes.added_tables`). A removed one is no longer watched; its topic and its
rows in the sinks stay. A collection whose filters or transforms changed since the log was
written is read again when ``on_transform_change: resnapshot`` says so
(:func:`resnapshot_due`); one whose ``ops`` leave out ``r`` is never read (:func:`without_reads`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from cdc.contracts.source import SourceContext
from cdc.runtime.fingerprints import OFFSET_KEY, key_check
from cdc.support.logging import Logger
from connectors.mongodb.config import MongoSourceConfig
from connectors.mongodb.filters import CollectionFilter
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


def without_reads(tables: list[str], config: MongoSourceConfig, logger: Logger) -> list[str]:
    """``tables`` without those whose ``ops`` leave out ``r`` (logged: they are not read)."""
    skipped = [t for t in tables if not config.table_entry(t).allows("r")]
    if skipped:
        logger.info(
            "snapshot.tables_skipped",
            tables=skipped,
            reason="their ops leave out r: no snapshot reads them, only their changes stream",
        )
    return [t for t in tables if t not in skipped]


def resnapshot_due(
    config: MongoSourceConfig,
    context: SourceContext,
    stored_offsets: Mapping[str, Any],
    added: list[str],
    logger: Logger,
) -> list[str]:
    """The collections to re-read at this start because their filters or the transforms
    changed (``context.resnapshot``), unless an earlier session of this start already planned
    them: then the log stores this start's fingerprint (:mod:`cdc.runtime.fingerprints`), in
    the transaction that stored the planned snapshot, which resumes as any snapshot does."""
    wanted = [t for t in context.resnapshot if t in config.table_names and t not in added]
    if not wanted or stored_offsets.get(OFFSET_KEY) == _fingerprint(config, context):
        return []
    logger.warning(
        "source.tables_resnapshot",
        tables=wanted,
        reason="their filters or the transforms changed (on_transform_change: resnapshot)",
    )
    return wanted


def _fingerprint(config: MongoSourceConfig, context: SourceContext) -> dict[str, Any]:
    """What :func:`cdc.runtime.fingerprints.current` stores for this pipeline."""
    return {
        "transforms": context.transforms.fingerprint(),
        "tables": {t.name: t.fingerprint() for t in config.tables},
        "mask_key": key_check(config.mask_key_bytes()),
    }


def announce_filters(
    filters: Iterable[CollectionFilter], full_document: str, logger: Logger
) -> None:
    """Say once, at start, what the row filters can do without pre-images."""
    filtered = sorted(f.name for f in filters if f.query is not None)
    if filtered and full_document != "required":
        logger.warning(
            "source.row_filter_without_pre_images",
            tables=filtered,
            consequence="an update whose document does not match is emitted as a delete of its "
            "key, and every delete is emitted: without the document before the change the "
            "source cannot tell whether it matched (harmless to a key the sinks never held)",
            fix="full_document: required (MongoDB 6.0+, changeStreamPreAndPostImages enabled on "
            "each collection) gives exact move-in and move-out",
        )
