"""Turn a batch of records into per-table changes: pure, no database.

Within a batch only what can still matter is kept: records already applied (offset below the
stored one) are dropped, and a truncate drops every change of its table older than itself. A
tombstone carries its delete's position: it is that delete (compaction may have taken the
delete), guarded like any change, and skipped at no cost right after its delete. Order is
decided by ``source.pos``, never by arrival, because a truncate and the rows of its table may
sit on different partitions.

A table's changes are kept as parallel lists, one entry per change: they are staged column by
column (see :mod:`sinks.duckdb.stage`), and a few lists allocate far less than an object per
change on this hot path.
"""

from __future__ import annotations

import itertools
import operator
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from cdc.contracts.errors import RecordError
from cdc.contracts.sink import SinkRecord
from cdc.log.base import TopicPartition
from sinks.keyed import TopicTables

Pos = tuple[int, int]
TableId = tuple[str, str]
_UPSERTS = frozenset({"c", "u", "r"})
#: About the most bytes of values one transaction applies. DuckDB holds a transaction's rows
#: outside ``memory_limit`` until its commit has written them, at some 2.5 times their size
#: (200 values of 1 MB committed at +510 MB RSS), and parses a staged document into one buffer
#: of its size rounded up to a power of two from ``memory_limit`` (256 MiB for those 200: out of
#: memory under the sink's default limit). The runner's default ``batch_bytes``: one
#: transaction a read unless the pipeline asks for more.
TRANSACTION_BYTES: Final = 16 * 1024 * 1024
_VALUE = operator.attrgetter("value")
_NO_VALUE: Final[dict[str, Any]] = {}


@dataclass(slots=True)
class Truncate:
    pos: Pos
    ts_ms: int


@dataclass(slots=True)
class TableBatch:
    """The changes of one table in one flush, in arrival order, as parallel lists.

    ``rows`` holds the new image, or for a delete its key alone: a delete is applied by its
    key (the sink contract, :mod:`cdc.contracts.sink`), and its other columns stay NULL.
    """

    table: TableId
    records: list[SinkRecord] = field(default_factory=list)
    ops: list[str] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    sequences: list[int] = field(default_factory=list)
    times: list[int] = field(default_factory=list)
    keys: list[dict[str, Any]] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    truncate: Truncate | None = None

    def __len__(self) -> int:
        return len(self.ops)

    def pos(self, index: int) -> Pos:
        return self.positions[index], self.sequences[index]

    def subset(self, indices: Sequence[int]) -> TableBatch:
        """The changes at ``indices``, in that order."""

        if len(indices) < 2:  # itemgetter of one index returns the value, not a tuple

            def pick(values: list[Any]) -> list[Any]:
                return [values[i] for i in indices]

        else:
            get = operator.itemgetter(*indices)

            def pick(values: list[Any]) -> list[Any]:
                return list(get(values))

        return TableBatch(
            self.table,
            records=pick(self.records),
            ops=pick(self.ops),
            positions=pick(self.positions),
            sequences=pick(self.sequences),
            times=pick(self.times),
            keys=pick(self.keys),
            rows=pick(self.rows),
            truncate=self.truncate,
        )


def plan(
    records: Sequence[SinkRecord],
    applied: Mapping[TopicPartition, int],
    tables: TopicTables | None = None,
) -> tuple[dict[TableId, TableBatch], dict[TopicPartition, int]]:
    """Group ``records`` by table; return the batches and the next offset per partition.

    Args:
        records: the records, in the order the runner handed them over.
        applied: next offset per partition already stored with the data (older is skipped).
        tables: each topic's table: a record's table is its topic's (``route`` sends several
            source tables to one); ``None``: the ``source`` block's.

    Raises:
        RecordError: a record that is not a change envelope.
    """
    batches: dict[TableId, TableBatch] = {}
    # Plain (topic, partition) tuples: TopicPartition is a NamedTuple, so they hash and compare
    # alike, and building one per record shows on the hot path.
    offsets: dict[tuple[str, int], int] = {}
    floor: Mapping[Any, int] = applied
    by_topic: dict[str, TableId] = {}  # tables.table's answers, without a call a record
    prev: SinkRecord | None = None
    lone: set[TableId] = set()  # tables with a tombstone planned as its delete
    for record in records:
        tp = (record.topic, record.partition)
        offsets[tp] = record.offset + 1
        value, before, prev = record.value, prev, record
        if value is None:
            # A tombstone is its delete. Right after it (same topic, same position) it is that
            # delete, already planned: skipped for the cost of a comparison. One without a
            # position was written before tombstones carried one: its delete did the work.
            if record.pos is None or (
                before is not None and record.pos == before.pos and record.topic == before.topic
            ):
                continue
            if record.offset < floor.get(tp, 0):
                continue
            value = _NO_VALUE
            table, op, position, sequence, ts_ms = _tombstone(record, tables)
            lone.add(table)
        elif record.offset < floor.get(tp, 0):
            continue
        else:
            # _envelope's reading, inline (a call a record was a fifth of the plan's time); a
            # record it cannot read, or whose position is no pair of integers, goes to
            # _envelope, which reads it again and names what is wrong.
            try:
                source = value["source"]
                pos = record.pos  # record.position's common case, without its two calls
                position, sequence = orjson.loads(pos) if pos is not None else record.position
                ts_ms = source.get("ts_ms") or value.get("ts_ms") or 0
                table, op = (source["schema"], source["table"]), value["op"]
            except (KeyError, TypeError, ValueError):
                table, op, position, sequence, ts_ms = _envelope(record, value)
            if type(position) is not int or type(sequence) is not int or type(ts_ms) is not int:
                table, op, position, sequence, ts_ms = _envelope(record, value)
        if tables is not None:
            table = by_topic.get(record.topic) or by_topic.setdefault(
                record.topic, tables.table(record.topic)
            )
        batch = batches.get(table)
        if batch is None:
            batch = batches[table] = TableBatch(table)
        if op == "t":
            batches[table] = _truncated(batch, Truncate((position, sequence), ts_ms))
        elif batch.truncate is None or (position, sequence) > batch.truncate.pos:
            key = record.key or {}
            batch.records.append(record)
            batch.ops.append(op)
            batch.positions.append(position)
            batch.sequences.append(sequence)
            batch.times.append(ts_ms)
            batch.keys.append(key)
            after = value.get("after") if op in _UPSERTS else None
            batch.rows.append(after if after.__class__ is dict else _image(record, value, op, key))
    for table in lone:
        batches[table] = _once(batches[table])
    return batches, {TopicPartition(*tp): offset for tp, offset in offsets.items()}


def _envelope(record: SinkRecord, value: dict[str, Any]) -> tuple[TableId, str, int, int, int]:
    try:
        source = value["source"]
        # sinks.keyed.counted_position's reading, inline: a call a record is a quarter of
        # this path's per-row budget (tests/perf/budgets.json), and this check differs.
        pos = record.pos  # record.position's common case, without its two calls
        position, sequence = orjson.loads(pos) if pos is not None else record.position
        ts_ms = source.get("ts_ms") or value.get("ts_ms") or 0
        table, op = (source["schema"], source["table"]), value["op"]
    except (KeyError, TypeError, ValueError) as exc:
        raise RecordError(f"not a change envelope with a source position: {exc!r}", record) from exc
    # Checked here, per record, so a bad one follows the bad-records policy instead of failing
    # the whole staged batch inside DuckDB.
    if type(position) is not int or type(sequence) is not int or type(ts_ms) is not int:
        raise RecordError(f"the position and ts_ms must be integers: {record.position!r}", record)
    return table, op, position, sequence, ts_ms


def _tombstone(
    record: SinkRecord, tables: TopicTables | None
) -> tuple[TableId, str, int, int, int]:
    """A tombstone read without its delete, as that delete: its table from its topic (it has
    no ``source`` block), its position beside it.

    Its time, which history mode records as the delete's: a tombstone has no ``ts_ms`` and a
    :class:`SinkRecord` no log timestamp, so the time it is applied, the first moment the sink
    knows of the delete (never before the version it closes, whose commit came first).
    """
    if tables is None:
        raise RecordError("a tombstone's table is its topic's: no topic map given", record)
    try:
        position, sequence = record.position
    except (KeyError, TypeError, ValueError) as exc:
        raise RecordError(f"a tombstone without a readable position: {exc!r}", record) from exc
    if type(position) is not int or type(sequence) is not int:
        raise RecordError(f"the position must be integers: {record.position!r}", record)
    return tables.table(record.topic), "d", position, sequence, int(time.time() * 1000)


def _once(batch: TableBatch) -> TableBatch:
    """``batch`` with each delete once: a tombstone planned as its delete may meet the delete
    in the same batch (not right before it), and history mode would record both."""
    seen: set[tuple[int, int, bytes]] = set()
    keep = []
    for index, op in enumerate(batch.ops):
        if op == "d":
            key = orjson.dumps(batch.keys[index], option=orjson.OPT_SORT_KEYS)
            ident = (batch.positions[index], batch.sequences[index], key)
            if ident in seen:
                continue
            seen.add(ident)
        keep.append(index)
    return batch if len(keep) == len(batch) else batch.subset(keep)


def _image(record: SinkRecord, value: dict[str, Any], op: str, key: dict[str, Any]) -> Any:
    if op in _UPSERTS:
        after = value.get("after")
        if type(after) is not dict:
            raise RecordError(f"op {op!r} without an 'after' image", record)
        return after
    if op == "d":
        # Never the before image: under REPLICA IDENTITY DEFAULT its other NOT NULL columns
        # hold Debezium's placeholders (0, ""), which no typed column may store or cast.
        return dict(key)
    raise RecordError(f"unknown op {op!r}", record)


def _truncated(batch: TableBatch, truncate: Truncate) -> TableBatch:
    """``batch`` without the changes ``truncate`` removes, remembering the newest truncate."""
    if batch.truncate is not None and batch.truncate.pos >= truncate.pos:
        return batch
    kept = batch.subset([i for i in range(len(batch)) if batch.pos(i) > truncate.pos])
    kept.truncate = truncate
    return kept


def byte_parts(records: Sequence[SinkRecord], most: int = TRANSACTION_BYTES) -> list[slice]:
    """``records`` cut into runs of at most ``most`` bytes of values as JSON (a bigger record
    alone), in order: each run is applied as a transaction of its own.

    Each run is a prefix of what is left, so the offsets it stores after its commit are true:
    the runner hands a partition's records over in offset order. The sizes are measured in C
    (one ``orjson.dumps`` of all, then ``map`` where they must be cut): no Python call a
    record.
    """
    values = list(map(_VALUE, records))
    try:
        # The common case in one call: the values as one JSON list are their sizes summed,
        # plus its brackets and commas.
        total = len(orjson.dumps(values)) - len(values) - 1
    except orjson.JSONEncodeError:  # one too deep for orjson inside a list: measured alone
        total = most + 1
    if total <= most:
        return [slice(0, len(records))]
    try:
        sizes = list(map(len, map(orjson.dumps, values)))
    except orjson.JSONEncodeError:  # not JSON: left to plan and staging to name
        return [slice(0, len(records))]
    starts, base = [0], 0
    for index, total in enumerate(itertools.accumulate(sizes)):
        if total - base > most and index > starts[-1]:
            starts.append(index)
            base = total - sizes[index]
    return [slice(a, b) for a, b in itertools.pairwise([*starts, len(records)])]
