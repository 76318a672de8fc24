"""A batch of records as per-table changes: pure, no database.

Only what can still matter is kept: records below the stored offsets (applied before) are
dropped, tombstones carry nothing (the delete before them did the work), a key keeps only its
newest change (by source position, never by arrival: one key's changes can be replayed out of
order), and a truncate drops every change of its table older than itself.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from cdc.contracts.errors import RecordError
from cdc.contracts.sink import SinkRecord
from cdc.log.base import TopicPartition
from sinks.keyed import Change, Kind, Pos, Table, TopicTables, classify

#: The hidden position columns are ``bigint``: PostgreSQL LSNs and MongoDB cluster times fit.
MAX_POSITION: Final = 2**63 - 1


@dataclass(slots=True)
class TableChanges:
    """The changes of one table in one flush: the newest of each key, and the newest truncate."""

    table: Table
    latest: dict[Hashable, Change] = field(default_factory=dict)
    truncate: Pos | None = None
    truncate_ms: int = 0
    every: dict[tuple[Hashable, Pos], Change] | None = None
    """History mode: every change, once per key and position (else ``None``)."""

    def changes(self) -> list[Change]:
        """The newest change of each key that is newer than the truncate."""
        cut = self.truncate
        return [c for c in self.latest.values() if cut is None or (c.pos or cut) > cut]

    def versions(self) -> list[Change]:
        """History mode: every change newer than the truncate, in source order."""
        cut = self.truncate
        every = self.every.values() if self.every is not None else ()
        kept = [c for c in every if cut is None or (c.pos or cut) > cut]
        return sorted(kept, key=lambda c: c.pos or (0, 0))


def plan(
    records: Sequence[SinkRecord],
    applied: Mapping[TopicPartition, int],
    tables: TopicTables,
    history: bool = False,
) -> tuple[dict[Table, TableChanges], dict[TopicPartition, int]]:
    """Group ``records`` by table; return the changes and the next offset of each partition
    (``history``: keep every change too).

    Raises:
        RecordError: a record that is not a change envelope with a position.
    """
    batches: dict[Table, TableChanges] = {}
    offsets: dict[TopicPartition, int] = {}
    for record in records:
        tp = TopicPartition(record.topic, record.partition)
        offsets[tp] = record.offset + 1
        if record.value is None or record.offset < applied.get(tp, 0):
            continue
        change = classify(record, tables)
        batch = batches.get(change.table)
        if batch is None:
            batch = batches[change.table] = TableChanges(
                change.table, every={} if history else None
            )
        _add(batch, change)
    return batches, offsets


def _add(batch: TableChanges, change: Change) -> None:
    pos = change.pos
    if pos is None:  # classify gives every non-tombstone a position
        return
    if pos[0] > MAX_POSITION or pos[1] > MAX_POSITION:
        raise RecordError(f"source position {list(pos)} passes bigint", change.record)
    if change.kind is Kind.TRUNCATE:
        if batch.truncate is None or pos > batch.truncate:
            batch.truncate, batch.truncate_ms = pos, commit_ms(change)
        return
    key = _identity(change.key)
    held = batch.latest.get(key)
    if held is None or pos > (held.pos or pos):
        batch.latest[key] = change
    if batch.every is not None:
        batch.every[key, pos] = change


def commit_ms(change: Change) -> int:
    """The change's source commit time in ms (``source.ts_ms``, else the envelope's)."""
    value = change.record.value or {}
    source = value.get("source")
    ts = (source.get("ts_ms") if isinstance(source, dict) else None) or value.get("ts_ms")
    return ts if type(ts) is int else 0


def _identity(key: dict[str, Any]) -> Hashable:
    """What tells a key from another: its values (a source writes a table's key columns in
    one order), or, for values that do not hash (a document key), its canonical JSON."""
    values = tuple(key.values())
    try:
        hash(values)
    except TypeError:
        return orjson.dumps(key, option=orjson.OPT_SORT_KEYS)
    return values
