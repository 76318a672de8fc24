"""A batch of records as per-table changes: pure, no database.

Only what can still matter is kept: records below the stored offsets (applied before) are
dropped, a key keeps only its newest change (by source position, never by arrival: one key's
changes can be replayed out of order), and a truncate drops every change of its table older
than itself. A tombstone carries its delete's position and is that delete (compaction may
have taken the delete while the sink was behind), guarded like any change; right after its
delete it is skipped, and one without a position (written before they carried one) too.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from cdc.contracts.errors import RecordError
from cdc.contracts.sink import SinkRecord
from cdc.log.base import TopicPartition
from sinks.keyed import Change, Kind, Pos, Table, TopicTables, classify, counted_position

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
    prev: SinkRecord | None = None
    for record in records:
        tp = TopicPartition(record.topic, record.partition)
        offsets[tp] = record.offset + 1
        value, before, prev = record.value, prev, record
        if record.offset < applied.get(tp, 0) or (value is None and _done(record, before)):
            continue
        change = classify(record, tables) if value is not None else _delete(record, tables)
        batch = batches.get(change.table)
        if batch is None:
            batch = batches[change.table] = TableChanges(
                change.table, every={} if history else None
            )
        _add(batch, change)
    return batches, offsets


def _done(tombstone: SinkRecord, before: SinkRecord | None) -> bool:
    """Whether the tombstone's delete did its work: it is right after it (same topic and
    position), or it has no position (written before tombstones carried their delete's)."""
    record = tombstone
    if record.pos is None:
        return True
    return before is not None and before.pos == record.pos and before.topic == record.topic


def _delete(record: SinkRecord, tables: TopicTables) -> Change:
    """A tombstone read without its delete, as that delete: its table is its topic's (it has
    no ``source`` block), its position the delete's, kept beside it."""
    table, key = tables.table(record.topic), record.key if record.key is not None else {}
    pos = counted_position(record)
    return Change(Kind.DELETE, table, key, pos, record.offset, None, record)


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
    """The change's source commit time in ms (``source.ts_ms``, else the envelope's).

    A tombstone read as its delete has neither, and a :class:`SinkRecord` no log timestamp:
    the time it is applied stands for the delete's, the first moment the sink knew of it
    (never before the version it closes, whose commit came first).
    """
    value = change.record.value
    if value is None:
        return int(time.time() * 1000)
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
