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
from typing import Any

from cdc.events import ChangeEvent, EncodedRow, Op, Row, SourceInfo
from connectors.postgres.relations import CONNECTOR, RelationState
from snapshots.reader import SnapshotTable, Values

SEQUENCE_SHIFT = 32


def to_events(
    table: SnapshotTable,
    rows: Sequence[Values],
    *,
    db: str,
    position: int,
    chunk: int,
    first_row: int,
    flag: str,
    ts_ms: int,
) -> list[ChangeEvent]:
    """``r`` events for ``rows`` (text values in the table's column order).

    Raises:
        ConversionError: a value cannot be converted (the snapshot has no dead-letter path:
            a row that cannot be read is a reason to stop, not to skip).
    """
    state = table.state
    schema, name = table.info.schema, table.info.table
    extra: dict[str, Any] = {"lsn": position}
    base = (chunk << SEQUENCE_SHIFT) + first_row
    read = Op.READ
    events = []
    for offset, values in enumerate(rows):
        key, after = keyed_row(state, values)
        source = SourceInfo(
            CONNECTOR, db, schema, name, ts_ms, position, base + offset, flag, None, extra
        )
        events.append(ChangeEvent(read, key, None, after, source))
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
        return encoded
    after = state.convert(values)
    return {k: after[k] for k in state.key}, after
