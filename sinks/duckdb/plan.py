"""Turn a batch of records into per-table changes: pure, no database.

Within a batch only what can still matter is kept: records already applied (offset below the
stored one) are dropped, tombstones carry nothing (the delete before them did the work), a
truncate drops every change of its table older than itself, and in current-state mode only the
newest change per key survives. Order is decided by ``source.pos``, never by arrival, because a
truncate and the rows of its table may sit on different partitions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from cdc.errors import RecordError
from cdc.log.base import TopicPartition
from cdc.sink import SinkRecord

Pos = tuple[int, int]
TableId = tuple[str, str]


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
    """The changes of one table in one flush."""

    table: TableId
    changes: dict[bytes, list[Change]] = field(default_factory=dict)
    truncate: Truncate | None = None
    first: SinkRecord | None = None

    def rows(self) -> list[Change]:
        return [c for changes in self.changes.values() for c in changes]


def plan(
    records: Sequence[SinkRecord],
    applied: Mapping[TopicPartition, int],
    keep_all: bool,
) -> tuple[dict[TableId, TableBatch], dict[TopicPartition, int]]:
    """Group ``records`` by table; return the batches and the next offset per partition.

    Args:
        records: the records, in the order the runner handed them over.
        applied: next offset per partition already stored with the data (older is skipped).
        keep_all: keep every change of a key (history mode), not only the newest.

    Raises:
        RecordError: a record that is not a change envelope.
    """
    batches: dict[TableId, TableBatch] = {}
    offsets: dict[TopicPartition, int] = {}
    for record in records:
        tp = record.tp
        offsets[tp] = record.offset + 1
        if record.value is None or record.offset < applied.get(tp, 0):
            continue
        table, op, pos, ts_ms = _envelope(record)
        batch = batches.get(table)
        if batch is None:
            batch = batches[table] = TableBatch(table, first=record)
        if op == "t":
            _truncate(batch, Truncate(pos, ts_ms))
        elif batch.truncate is None or pos > batch.truncate.pos:
            _add(batch, _change(record, op, pos, ts_ms), keep_all)
    return batches, offsets


def _envelope(record: SinkRecord) -> tuple[TableId, str, Pos, int]:
    value = record.value or {}
    try:
        source = value["source"]
        position, sequence = source["pos"]
        op = value["op"]
        table = (str(source["schema"]), str(source["table"]))
        ts_ms = int(source.get("ts_ms") or value.get("ts_ms") or 0)
        return table, op, (int(position), int(sequence)), ts_ms
    except (KeyError, TypeError, ValueError) as exc:
        raise RecordError(f"not a change envelope with source.pos: {exc!r}", record) from exc


def _change(record: SinkRecord, op: str, pos: Pos, ts_ms: int) -> Change:
    value = record.value or {}
    key = record.key or {}
    if op == "d":
        row = value.get("before") or key
    elif op in ("c", "u", "r"):
        row = value.get("after")
        if not isinstance(row, dict):
            raise RecordError(f"op {op!r} without an 'after' image", record)
    else:
        raise RecordError(f"unknown op {op!r}", record)
    return Change(record, op, pos, ts_ms, key, row)


def _add(batch: TableBatch, change: Change, keep_all: bool) -> None:
    ident = orjson.dumps(change.key, option=orjson.OPT_SORT_KEYS)
    known = batch.changes.get(ident)
    if known is None:
        batch.changes[ident] = [change]
    elif keep_all:
        known.append(change)
    elif change.pos > known[0].pos:
        known[0] = change


def _truncate(batch: TableBatch, truncate: Truncate) -> None:
    if batch.truncate is not None and batch.truncate.pos >= truncate.pos:
        return
    batch.truncate = truncate
    for ident in list(batch.changes):
        kept = [c for c in batch.changes[ident] if c.pos > truncate.pos]
        if kept:
            batch.changes[ident] = kept
        else:
            del batch.changes[ident]
