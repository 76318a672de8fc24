"""What a start does about snapshots, in words every source shares (pure): the actions
(:class:`Action`), a decision and its reason, and what becomes of tables added to
``source.tables`` since the last start. Each source decides its own start from what its log and
server hold (PostgreSQL: ``connectors/postgres/snapshot/modes.py``).

A table added to ``source.tables`` after the first start has rows the log never saw: it is
snapshotted while streaming (the ``cdc snapshot`` path) in every mode but ``never``, unless this
start reads every table anyway. A table removed from it is no longer captured; its topic stays.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum


class Action(Enum):
    STREAM = "stream"  # no snapshot work
    EXPORT = "export"  # create the slot with an exported snapshot, read it, then stream
    RESUME = "resume"  # stream; read the stored snapshot's remaining chunks with watermarks
    WATERMARK_ALL = "watermark_all"  # stream; re-read every table with watermarks


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    reason: str


@dataclass(frozen=True, slots=True)
class TableChanges:
    """How ``source.tables`` changed since the tables the log holds were recorded."""

    added: list[str]
    removed: list[str]


def table_changes(configured: Sequence[str], captured: Sequence[str]) -> TableChanges:
    """Tables configured now but not captured before, and the other way round, in order."""
    return TableChanges(
        [t for t in configured if t not in captured],
        [t for t in captured if t not in configured],
    )


@dataclass(frozen=True, slots=True)
class AddedTables:
    """Whether this start snapshots the tables added to ``source.tables``, and why (logged)."""

    snapshot: bool
    reason: str


def added_tables(mode: str, action: Action) -> AddedTables:
    """What this start does about tables added to ``source.tables`` (pure)."""
    if action is Action.EXPORT:
        return AddedTables(False, "the snapshot of this start reads every table")
    if action is Action.WATERMARK_ALL:
        return AddedTables(False, "this start re-reads every table while streaming")
    if mode == "never":
        return AddedTables(
            False, "snapshot mode never: their existing rows are not read, only later changes"
        )
    return AddedTables(
        True,
        f"added to source.tables since the last start (snapshot mode {mode}): their existing "
        "rows are snapshotted, as `cdc snapshot` would",
    )
