"""Turn a batch of records into per-table changes: pure, no database.

Within a batch only what can still matter is kept: records already applied (offset below the
stored one) are dropped, tombstones carry nothing (the delete before them did the work), and a
truncate drops every change of its table older than itself. Order is decided by
``source.pos``, never by arrival, because a truncate and the rows of its table may sit on
different partitions. Keeping only the newest change per key is left to SQL (see
:func:`sinks.duckdb.merge.select_latest`), where it costs less than a Python dict per record.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cdc.errors import RecordError
from cdc.log.base import TopicPartition
from cdc.sink import SinkRecord

Pos = tuple[int, int]
TableId = tuple[str, str]
_UPSERTS = frozenset({"c", "u", "r"})


@dataclass(slots=True)
class Change:
    """One row change: ``row`` is the new image, or for a delete the old one (or the key)."""

    record: SinkRecord
    op: str
    pos: Pos
    ts_ms: int
    key: dict[str, Any]
    row: dict[str, Any]


@dataclass(slots=True)
class Truncate:
    pos: Pos
    ts_ms: int


@dataclass(slots=True)
class TableBatch:
    """The changes of one table in one flush, in arrival order."""

    table: TableId
    changes: list[Change] = field(default_factory=list)
    truncate: Truncate | None = None


def plan(
    records: Sequence[SinkRecord], applied: Mapping[TopicPartition, int]
) -> tuple[dict[TableId, TableBatch], dict[TopicPartition, int]]:
    """Group ``records`` by table; return the batches and the next offset per partition.

    Args:
        records: the records, in the order the runner handed them over.
        applied: next offset per partition already stored with the data (older is skipped).

    Raises:
        RecordError: a record that is not a change envelope.
    """
    batches: dict[TableId, TableBatch] = {}
    # Plain (topic, partition) tuples: TopicPartition is a NamedTuple, so they hash and compare
    # alike, and building one per record shows on the hot path.
    offsets: dict[tuple[str, int], int] = {}
    floor: Mapping[Any, int] = applied
    for record in records:
        tp = (record.topic, record.partition)
        offsets[tp] = record.offset + 1
        if record.value is None or record.offset < floor.get(tp, 0):
            continue
        table, change = _change(record)
        batch = batches.get(table)
        if batch is None:
            batch = batches[table] = TableBatch(table)
        if change.op == "t":
            _truncate(batch, Truncate(change.pos, change.ts_ms))
        elif batch.truncate is None or change.pos > batch.truncate.pos:
            batch.changes.append(change)
    return batches, {TopicPartition(*tp): offset for tp, offset in offsets.items()}


def _change(record: SinkRecord) -> tuple[TableId, Change]:
    value: dict[str, Any] = record.value or {}
    try:
        source = value["source"]
        position, sequence = source["pos"]
        op = value["op"]
        ts_ms = source.get("ts_ms") or value.get("ts_ms") or 0
        table = (source["schema"], source["table"])
    except (KeyError, TypeError, ValueError) as exc:
        raise RecordError(f"not a change envelope with source.pos: {exc!r}", record) from exc
    key = record.key or {}
    if op in _UPSERTS:
        row = value.get("after")
        if type(row) is not dict:
            raise RecordError(f"op {op!r} without an 'after' image", record)
    elif op == "d":
        before = value.get("before")
        row = {**before, **key} if isinstance(before, dict) else dict(key)
    elif op != "t":
        raise RecordError(f"unknown op {op!r}", record)
    else:
        row = {}
    return table, Change(record, op, (position, sequence), ts_ms, key, row)


def _truncate(batch: TableBatch, truncate: Truncate) -> None:
    if batch.truncate is not None and batch.truncate.pos >= truncate.pos:
        return
    batch.truncate = truncate
    batch.changes = [c for c in batch.changes if c.pos > truncate.pos]
