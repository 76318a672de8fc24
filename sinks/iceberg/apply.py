"""One table's buffered records as one Iceberg transaction, with the offsets in its summary.

``current`` mode: the newest change of each key (by source position) is applied when it is
newer than what the table holds for the key (``_cdc_pos``, ``_cdc_seq``) and than the table's
last truncate. A delete is kept as a row of its key with ``_cdc_deleted`` true and every other
column NULL, so a replayed older upsert of the key is refused by its position: readers take
``WHERE NOT _cdc_deleted``.

Copy-on-write, pyiceberg's own: a ``delete`` by the filter of the keys the table holds (the
data files holding one are rewritten without it, as ``Table.upsert`` overwrites matched rows),
then one ``append``, in one transaction. ``upsert`` itself would scan the keys a second time,
overwrite once per matched batch and compare every column. pyiceberg 0.12 cannot write
equality deletes (its merge-on-read delete mode falls back to copy-on-write).

``append`` mode: every change is a row with its operation, position and commit time.

A tombstone carrying its delete's position is that delete (compaction may have taken the delete
while the sink was behind): in ``current`` mode a delete of its key at that position, guarded as
any change, so after its delete it changes nothing; in ``append`` mode a ``d`` row, unless the
changelog holds its delete already (in the same commit, or committed before: looked up by
position). A tombstone without a position (written before tombstones carried one) is skipped.
"""

from __future__ import annotations

import datetime as dt
import warnings
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from pyiceberg.expressions import (
    AlwaysTrue,
    And,
    BooleanExpression,
    EqualTo,
    GreaterThanOrEqual,
    LessThanOrEqual,
    Reference,
)
from pyiceberg.expressions.literals import literal
from pyiceberg.table import DataScan, Table
from pyiceberg.table.upsert_util import create_match_filter

from cdc.contracts.errors import RecordError
from cdc.contracts.schema import TableSchema
from cdc.contracts.sink import SinkContext, SinkRecord, record_options
from cdc.envelope.options import EnvelopeOptions
from sinks.iceberg import tables
from sinks.iceberg.tables import COMMITTED, DELETED, OP, POS, SEQ
from sinks.iceberg.types import Store, Unstorable, storer
from sinks.keyed import Change, Kind, Pos, TopicTables, classify, counted_position

Row = dict[str, Any]


@dataclass(slots=True)
class Commit:
    """What one table's commit needs besides its records."""

    table: Table
    published: TableSchema
    offsets: Mapping[Any, int]
    truncated: Pos | None
    context: SinkContext
    topics: TopicTables
    stores: dict[EnvelopeOptions | None, dict[str, Store]] = field(default_factory=dict)
    formers: dict[str, list[str]] | None = None

    def row(self, change: Change) -> Row:
        """The change's columns as the table stores them."""
        record = change.record
        options = record_options(record, self.context)
        stores = self.stores.get(options)
        if stores is None:
            types = {c.name: c.type for c in self.published.columns}
            stores = self.stores[options] = {n: storer(t, options) for n, t in types.items()}
        source = change.row if change.row is not None else change.key
        out: Row = {}
        for name, store in stores.items():
            value = source[name] if name in source else self._former(source, name)
            try:
                out[name] = store(value)
            except Unstorable as exc:
                raise RecordError(f"column {name}: {exc}", record) from None
            except (ValueError, TypeError, ArithmeticError) as exc:
                # The reason names the error, never the value: the column may be masked.
                reason = f"column {name}: not a value of its type ({type(exc).__name__})"
                raise RecordError(reason, record) from None
        return out

    def _former(self, source: Mapping[str, Any], name: str) -> Any:
        """A renamed column's value in a record written before the rename (newest name
        first), else ``None``."""
        if self.formers is None:
            fields = self.table.schema().fields
            self.formers = {f.name: tables.former_names(f.doc) for f in fields}
        for old in reversed(self.formers.get(name, ())):
            if old in source:
                return source[old]
        return None


def apply_current(commit: Commit, records: Sequence[SinkRecord]) -> Pos | None:
    """Apply the newest change of each key; return the table's truncate position after it."""
    latest, truncate = _newest(records, commit.topics)
    truncated = commit.truncated
    tx = commit.table.transaction()
    if truncate is not None and (truncated is None or truncate > truncated):
        truncated = truncate
        with warnings.catch_warnings():  # an empty table: "did not match any records"
            warnings.simplefilter("ignore")
            tx.delete(AlwaysTrue(), snapshot_properties=tables.summary(commit.offsets, truncated))
    changes = [c for c in latest.values() if truncated is None or (c.pos or (0, 0)) > truncated]
    keys = commit.published.key_columns
    rows = [_current_row(commit, c) for c in changes]
    arrow = commit.table.schema().as_arrow()
    props = tables.summary(commit.offsets, truncated)
    if rows:
        held = _held(tx, commit.table, rows, keys)
        rows = [r for r in rows if (r[POS], r[SEQ]) > held.get(_identity(r, keys), (-1, -1))]
        # Copy-on-write: the files holding a key the batch replaces are rewritten without it
        # (one delete by the keys the table holds; a new key needs none), then one append.
        replaced = [r for r in rows if _identity(r, keys) in held]
        if replaced:
            doomed = pa.Table.from_pylist(replaced, schema=arrow).select(keys)
            tx.delete(create_match_filter(doomed, keys), snapshot_properties=props)
    # An empty append still commits a snapshot: the offsets move on with it.
    tx.append(pa.Table.from_pylist(rows, schema=arrow), snapshot_properties=props)
    tx.commit_transaction()
    return truncated


def apply_append(commit: Commit, records: Sequence[SinkRecord]) -> None:
    """Append every change of ``records`` as a changelog row."""
    rows, tombstones = [], []
    for record in records:
        if record.value is not None:
            rows.append(_append_row(commit, classify(record, commit.topics)))
            continue
        change = tombstone(record, commit.topics)
        if change is not None:
            tombstones.append(_append_row(commit, change))
    rows += _unrecorded(commit, rows, tombstones)
    arrow = commit.table.schema().as_arrow()
    props = tables.summary(commit.offsets, None)
    tx = commit.table.transaction()
    tx.append(pa.Table.from_pylist(rows, schema=arrow), snapshot_properties=props)
    tx.commit_transaction()


def tombstone(record: SinkRecord, topics: TopicTables) -> Change | None:
    """The delete a tombstone stands for (its key, its delete's position), or ``None`` for one
    written before tombstones carried a position: its delete did the work.

    Raises:
        RecordError: a position that is not two counts.
    """
    if record.pos is None:
        return None
    key = record.key if record.key is not None else {}
    pos = counted_position(record)
    return Change(Kind.DELETE, topics.table(record.topic), key, pos, record.offset, None, record)


def _append_row(commit: Commit, change: Change) -> Row:
    pos = change.pos or (0, 0)
    row = {} if change.kind is Kind.TRUNCATE else commit.row(change)
    value = change.record.value
    op: Any = "d"
    # A tombstone has no commit time, nor does the log keep one beside it: NULL says "not
    # known" where any time would be a guess (the delete's own row, when there is one, has it).
    when: dt.datetime | None = None
    if value is not None:
        op, when = value.get("op"), dt.datetime.fromtimestamp(commit_ms(change) / 1000, dt.UTC)
    row.update({OP: op, POS: pos[0], SEQ: pos[1], COMMITTED: when})
    return row


def _unrecorded(commit: Commit, rows: list[Row], tombstones: list[Row]) -> list[Row]:
    """The tombstones' ``d`` rows whose delete the changelog does not hold: neither among
    ``rows`` (the usual [d, tombstone] pair in one commit) nor in the table (the pair split by
    a commit; the scan is by position range, which the files' bounds prune)."""
    if not tombstones:
        return []
    keys = commit.published.key_columns  # none: the position alone names the delete

    def change(row: Row) -> Hashable:
        return (_identity(row, keys), row[POS], row[SEQ])

    held = {change(r) for r in rows if r[OP] == "d"}
    left = [t for t in tombstones if change(t) not in held]
    if not left:
        return []
    low, high = min(t[POS] for t in left), max(t[POS] for t in left)
    scan = commit.table.scan(
        row_filter=And(
            EqualTo(term=Reference(OP), value=literal("d")),
            And(
                GreaterThanOrEqual(term=Reference(POS), value=low),
                LessThanOrEqual(term=Reference(POS), value=high),
            ),
        ),
        selected_fields=(*keys, POS, SEQ),
    )
    held = {change(r) for r in scan.to_arrow().to_pylist()}
    return [t for t in left if change(t) not in held]


def _newest(
    records: Sequence[SinkRecord], topics: TopicTables
) -> tuple[dict[Hashable, Change], Pos | None]:
    """The newest change of each key (by source position, not arrival), and of truncates."""
    latest: dict[Hashable, Change] = {}
    truncate: Pos | None = None
    for record in records:
        if record.value is not None:
            change = classify(record, topics)
        else:  # a tombstone: its delete, guarded below and by the table as any change
            found = tombstone(record, topics)
            if found is None:
                continue
            change = found
        pos = change.pos or (0, 0)
        if change.kind is Kind.TRUNCATE:
            truncate = pos if truncate is None or pos > truncate else truncate
            continue
        key = _identity(change.key, list(change.key))
        held = latest.get(key)
        if held is None or pos > (held.pos or (0, 0)):
            latest[key] = change
    return latest, truncate


def _current_row(commit: Commit, change: Change) -> Row:
    pos = change.pos or (0, 0)
    deleted = change.kind is Kind.DELETE
    row = commit.row(change)
    if deleted:  # by its key alone: the before image holds placeholders
        keys = set(commit.published.key_columns)
        row = {n: (v if n in keys else None) for n, v in row.items()}
    row.update({POS: pos[0], SEQ: pos[1], DELETED: deleted})
    return row


def _held(tx: Any, table: Table, rows: list[Row], keys: list[str]) -> dict[Hashable, Pos]:
    """The position the table holds (as of ``tx``: after its truncate) for each key of ``rows``.

    A single orderable key is scanned by its range, then matched in Arrow: pyiceberg binds an
    ``In`` of thousands of values slowly, and prunes files by their bounds either way.
    """
    wanted = {_identity(r, keys) for r in rows}
    scan = DataScan(
        table_metadata=tx.table_metadata,
        io=table.io,
        row_filter=_key_filter(rows, keys),
        selected_fields=(*keys, POS, SEQ),
    )
    found: dict[Hashable, Pos] = {}
    for row in scan.to_arrow().to_pylist():
        identity = _identity(row, keys)
        if identity in wanted:
            found[identity] = (row[POS] or 0, row[SEQ] or 0)
    return found


def _key_filter(rows: list[Row], keys: list[str]) -> BooleanExpression:
    values = [r[keys[0]] for r in rows]
    if len(keys) == 1 and all(type(v) is int for v in values):
        low, high = min(values), max(values)
        key = Reference(keys[0])
        return And(GreaterThanOrEqual(term=key, value=low), LessThanOrEqual(term=key, value=high))
    return create_match_filter(pa.Table.from_pylist([{k: r[k] for k in keys} for r in rows]), keys)


def _identity(row: Mapping[str, Any], keys: list[str]) -> Hashable:
    values = tuple(row[k] for k in keys)
    try:
        hash(values)
    except TypeError:
        return repr(values)
    return values


def commit_ms(change: Change) -> int:
    """The change's source commit time in ms (``source.ts_ms``, else the envelope's)."""
    value = change.record.value or {}
    source = value.get("source")
    ts = (source.get("ts_ms") if isinstance(source, dict) else None) or value.get("ts_ms")
    return ts if type(ts) is int else 0
