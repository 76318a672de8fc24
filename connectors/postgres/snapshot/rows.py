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

from functools import partial

from cdc.envelope import encode_key, record_parts, source_head
from cdc.envelope import to_records as envelope_records
from cdc.events import ChangeEvent, EncodedRow, Op, Row, SourceInfo
from cdc.log.base import Record
from connectors.postgres.relations import CONNECTOR, RelationState
from connectors.postgres.snapshot.copytext import split_line
from connectors.postgres.snapshot.reader import SnapshotTable, Values

SEQUENCE_SHIFT = 32
#: A snapshot row: the row (written natively, its values decoded on demand; or converted), and
#: its key's JSON (the record key).
KeyedRow = tuple[Row | EncodedRow, bytes]


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
) -> list[Record]:
    """The ``r`` records of ``lines`` of ``COPY ... TO STDOUT`` text (the table's columns in
    order), as the runtime would write them for the rows' events at ``now_ms``.

    The native encoder writes a whole piece with the interpreter lock released, around the
    chunk's ``source`` head encoded once; a line it declines (an escape, no encoder) becomes
    its event and goes through :func:`cdc.envelope.to_records`.

    Raises:
        ConversionError: a value cannot be converted (the snapshot has no dead-letter path:
            a row that cannot be read is a reason to stop, not to skip).
    """
    state = table.state
    schema, name, topic = table.info.schema, table.info.table, state.topic
    base = (chunk << SEQUENCE_SHIFT) + first_row
    head = source_head(SourceInfo(CONNECTOR, db, schema, name, ts_ms, position, 0, flag), pipeline)
    parts = record_parts(Op.READ, head, position, position, now_ms)
    written = state.copy_records(lines, parts, base)
    if written is None:
        written = [None] * len(lines)
    records = []
    for sequence, (line, record) in enumerate(zip(lines, written, strict=True), base):
        if record is not None:
            records.append(Record(topic, record[0], record[1]))
            continue
        source = SourceInfo(
            CONNECTOR, db, schema, name, ts_ms, position, sequence, flag, None, {"lsn": position}
        )
        key, after = python_row(state, split_line(line))
        event = ChangeEvent(Op.READ, key, None, after, source)
        records.extend(envelope_records(event, pipeline, now_ms))
    return records


def keyed_lines(state: RelationState, lines: list[bytes]) -> list[KeyedRow]:
    """The row and the key's JSON (the record key) of each line of ``COPY ... TO STDOUT`` text.

    The native encoder writes a piece's row and key JSON with the interpreter lock released; the
    row's values are decoded from the line only if something asks for them. A line it declines
    takes the Python path.

    Raises:
        ConversionError: a value cannot be converted.
    """
    written = state.copy_rows(lines)
    if written is None:
        written = [None] * len(lines)
    decode = partial(_convert_line, state)
    rows: list[KeyedRow] = []
    for line, pair in zip(lines, written, strict=True):
        if pair is None:
            key, after = python_row(state, split_line(line))
            rows.append((after, encode_key(key)))
        else:
            key_json, row_json = pair
            rows.append((EncodedRow(row_json, line, decode), key_json))
    return rows


def _convert_line(state: RelationState, line: bytes) -> Row:
    return state.convert(split_line(line))


def python_row(state: RelationState, values: Values) -> tuple[Row, Row]:
    """The key and the row of text values, through the Python converters."""
    after = state.convert(values)
    return {k: after[k] for k in state.key}, after
