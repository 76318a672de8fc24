"""Snapshot rows as ``r`` change events.

Ordering, and why: a sink skips any change whose ``(position, sequence)`` is not newer than what
it holds for the key. Snapshot rows of an exported snapshot carry ``consistent point - 1``: every
streamed transaction commits at or after the consistent point (a commit record may start exactly
there), so each streamed change of a key sorts after the key's snapshot row. Incremental
(watermark) rows carry the high watermark's LSN: changes after it are newer, and changes of the
same key inside the window were dropped from the chunk. ``sequence`` is ``chunk << 32 | row``, so
no two rows of a table share one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import count, repeat
from typing import NamedTuple, cast

from cdc.contracts.events import ChangeEvent, Op, Row, SourceInfo
from cdc.envelope.connect_schema import TableSchemas
from cdc.envelope.encode import (
    EncodedRow,
    RecordTemplate,
    batch_records,
    order_json,
)
from cdc.envelope.options import READABLE, EnvelopeOptions
from cdc.log.base import Record
from cdc.runtime.source_task import letter_record
from cdc.runtime.transformed import apply_chain
from cdc.transforms.chain import TransformChain
from connectors.postgres.assembly.connect import relation_schemas
from connectors.postgres.assembly.relation_state import CONNECTOR, RelationState
from connectors.postgres.assembly.source_fields import lsn_extra, lsn_fields, pg_order
from connectors.postgres.lsn import Lsn
from connectors.postgres.snapshot.reader import SnapshotTable
from connectors.postgres.types.encoder import KeyedRow

SEQUENCE_SHIFT = 32
__all__ = ["SEQUENCE_SHIFT", "KeyedRow", "keyed_lines", "read_template", "to_records"]


def read_template(
    db: str,
    table: SnapshotTable,
    position: int,
    flag: str,
    ts_ms: int,
    pipeline: str,
    schemas: TableSchemas | None = None,
    tx_id: int | None = None,
) -> RecordTemplate:
    """The template of a chunk's ``r`` records, at ``position``, with ``source.snapshot``
    ``flag`` and ``source.txId`` ``tx_id`` (the snapshot transaction's)."""
    info = table.info
    source = SourceInfo(CONNECTOR, db, info.schema, info.table, ts_ms, position, 0, flag, tx_id)
    return RecordTemplate.of(Op.READ, source, pipeline, schemas=schemas)


def snapshot_order(lsn: int) -> bytes:
    """``source.sequence`` of snapshot rows: ``[null,"<lsn>"]`` (Debezium's)."""
    return order_json(pg_order(None, lsn))


def to_records(
    table: SnapshotTable,
    lines: list[bytes],
    *,
    pipeline: str,
    db: str,
    position: int,
    chunk: int,
    first_row: int,
    flag: str,
    ts_ms: int,
    now_ms: int,
    schemas: TableSchemas | None = None,
    lsn: Lsn | None = None,
    tx_id: int | None = None,
    options: EnvelopeOptions = READABLE,
    transforms: Transforms | None = None,
) -> list[Record]:
    """The ``r`` records of ``lines`` of ``COPY ... TO STDOUT`` text (the table's columns in
    order), as the runtime would write them for the rows' events at ``now_ms``, with
    ``source.lsn`` and ``source.sequence`` at ``lsn`` (the snapshot point; ``position`` if not
    given) and ``source.txId`` ``tx_id``: through the
    chunk's :class:`~cdc.envelope.encode.RecordTemplate`, its ``source`` head encoded once. The
    relation's encoder writes them (the Rust one with the interpreter lock released). With
    ``transforms``, each row becomes its event first and goes through them (:func:`event_records`).

    Raises:
        ConversionError: a value cannot be converted (the snapshot has no dead-letter path:
            a row that cannot be read is a reason to stop, not to skip).
        TransformError: a transform failed on a row, under ``bad_records: fail``.
    """
    base = (chunk << SEQUENCE_SHIFT) + first_row
    # The row writers get a plain int, as from the stream: once a piece, not a row.
    point = position if lsn is None else int(lsn)
    if transforms:
        source = SourceInfo(
            CONNECTOR, db, table.info.schema, table.info.table, ts_ms, position, 0, flag, tx_id
        )
        source.extra, source.order = lsn_fields(point), pg_order(None, point)
        rows = table.state.encoder.copy_rows(lines)
        return event_records(table, rows, source, base, pipeline, now_ms, options, transforms)
    template = read_template(db, table, position, flag, ts_ms, pipeline, schemas, tx_id)
    order, extra = snapshot_order(point), lsn_extra(point)
    written = table.state.encoder.copy_records(lines, template, order, extra, now_ms, base)
    if not written:
        return []
    keys, values = zip(*written, strict=True)
    if schemas is not None:
        keys = tuple(map(schemas.wrap_key, keys))
    return list(map(Record, repeat(table.state.topic), keys, values, positions(template, base)))


def positions(template: RecordTemplate, first: int) -> map[bytes]:
    """``template.pos(s)`` of each sequence ``s`` from ``first`` on (endless), with no Python
    call a row: the position's JSON is written into the format once. A comprehension calling
    ``pos`` and building each record took about 30% of a reader's busy time in a profile."""
    pos = b"[%b,%%d]" % template.position.replace(b"%", b"%%")
    return map(pos.__mod__, count(first))


def keyed_lines(state: RelationState, lines: list[bytes]) -> list[KeyedRow]:
    """The row and the key's JSON (the record key) of each line of ``COPY ... TO STDOUT`` text.

    The Rust encoder writes a piece's row and key JSON with the interpreter lock released; the
    row's values are decoded from the line only if something asks for them.

    Raises:
        ConversionError: a value cannot be converted.
    """
    return state.encoder.copy_rows(lines)


class Gone(NamedTuple):
    """A row a purging read found outside the table's row filter (a re-read after the filter
    changed): its record is a delete of its key, the row its ``before``."""

    row: EncodedRow
    key: bytes


@dataclass(frozen=True)
class Transforms:
    """The pipeline's transforms as a snapshot applies them, with its ``bad_records``."""

    chain: TransformChain
    bad_records: str = "fail"

    def __bool__(self) -> bool:
        return bool(self.chain)


def event_records(
    table: SnapshotTable,
    rows: Sequence[KeyedRow],
    source: SourceInfo,
    first: int,
    pipeline: str,
    now_ms: int,
    options: EnvelopeOptions,
    transforms: Transforms,
) -> list[Record]:
    """The records of snapshot ``rows`` as events through the pipeline's transforms: each row
    an ``r`` event with ``source`` (its sequence counting from ``first``), or a ``d`` of a row
    a purging read found outside the row filter, then the records the runtime writes for what
    the transforms return, and the dead letters of those they fail on. Without a transform
    that changes them, an ``r`` row's bytes are those of :func:`to_records`."""
    state = table.state
    connect = relation_schemas(state, options) if options.schemas_enable else None
    events = []
    for sequence, keyed in enumerate(rows, first):
        row = keyed[0]
        src = replace(source, sequence=sequence, extra=dict(source.extra))
        key = {name: row[name] for name in state.key}
        if not isinstance(keyed, Gone):
            events.append(ChangeEvent(Op.READ, key, None, row, src, connect=connect))
        else:
            # Read like a Row, written as the encoder wrote it (the envelope embeds its JSON).
            before = cast(Row, row)
            events.append(ChangeEvent(Op.DELETE, key, before, None, src, connect=connect))
    kept, letters = apply_chain(transforms.chain, events, transforms.bad_records)
    records = batch_records(kept, pipeline, now_ms, options)
    records.extend(letter_record(pipeline, letter) for letter in letters)
    return records
