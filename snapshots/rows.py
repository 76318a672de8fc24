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
from functools import partial
from typing import Any

from cdc.envelope import source_head, value_head
from cdc.events import ChangeEvent, EncodedRow, Op, Row, SourceInfo
from connectors.postgres.relations import CONNECTOR, RelationState
from snapshots.copytext import split_line
from snapshots.reader import SnapshotTable, Values

SEQUENCE_SHIFT = 32


def to_events(
    table: SnapshotTable,
    lines: Sequence[bytes],
    *,
    pipeline: str,
    db: str,
    position: int,
    chunk: int,
    first_row: int,
    flag: str,
    ts_ms: int,
) -> list[ChangeEvent]:
    """``r`` events for ``lines`` of ``COPY ... TO STDOUT`` text (the table's columns in order).

    The native encoder reads a line as it is, and the event gets its record written too
    (:attr:`ChangeEvent.encoded`), with the chunk's ``source`` head encoded once; a line it
    declines (an escape, no encoder) is split and converted in Python.

    Raises:
        ConversionError: a value cannot be converted (the snapshot has no dead-letter path:
            a row that cannot be read is a reason to stop, not to skip).
    """
    state = table.state
    schema, name, topic = table.info.schema, table.info.table, state.topic
    extra: dict[str, Any] = {"lsn": position}
    base = (chunk << SEQUENCE_SHIFT) + first_row
    read = Op.READ
    head = source_head(SourceInfo(CONNECTOR, db, schema, name, ts_ms, position, 0, flag), pipeline)
    decode = partial(_convert_line, state)
    events = []
    for sequence, line in enumerate(lines, base):
        source = SourceInfo(
            CONNECTOR, db, schema, name, ts_ms, position, sequence, flag, None, extra
        )
        encoded = state.encoded_copy(line, decode)
        if encoded is None:
            key, after = python_row(state, split_line(line))
            events.append(ChangeEvent(read, key, None, after, source))
            continue
        key, row, key_json = encoded
        value = value_head(read, head, row.json, position, sequence, position)
        record = (pipeline, topic, key_json, value)
        events.append(ChangeEvent(read, key, None, row, source, record))
    return events


def keyed_row(state: RelationState, values: Values) -> tuple[Row, Row | EncodedRow]:
    """The key and the row of one snapshot row's text values.

    The relation's native encoder writes the row's JSON when it is built (see
    :mod:`connectors.postgres.fast`); otherwise, or for a row it declines, the converters run.

    Raises:
        ConversionError: a value cannot be converted.
    """
    encoded = state.encoded_values(values)
    if encoded is not None:
        return encoded[0], encoded[1]
    return python_row(state, values)


def _convert_line(state: RelationState, line: bytes) -> Row:
    return state.convert(split_line(line))


def python_row(state: RelationState, values: Values) -> tuple[Row, Row]:
    """The key and the row of text values, through the Python converters."""
    after = state.convert(values)
    return {k: after[k] for k in state.key}, after
