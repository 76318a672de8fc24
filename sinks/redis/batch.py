"""A batch of records as the apply script's calls, built in one pass over the records.

Each record becomes one entry of a :class:`Chunk` (one ``apply`` call of at most ``CHUNK``
changes), with the checks and errors of :func:`sinks.keyed.classify`. A truncate ends its
:class:`Segment`: the chunks before it are sent, then the truncate runs, then the next segment.

This is the sink's hot path, so the record is read once and no intermediate object is made
per change: classifying into a :class:`~sinks.keyed.Change` first, then encoding it, was about
a third of the client's time a change.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from cdc.contracts.errors import RecordError
from cdc.contracts.sink import SinkRecord
from sinks.keyed import Change, Kind, TopicTables, counted_position, key_suffix
from sinks.redis.script import Chunk

CHUNK: Final = 500  # changes per script call: long scripts block every other Redis client
# The script's op codes; a truncate ("t") is no entry but ends a segment.
_CODES: Final = {"c": "s", "u": "s", "r": "s", "d": "d", "t": "t"}


@dataclass(slots=True)
class Segment:
    """Chunks to send in order, then, if any, the truncate that follows them."""

    chunks: list[Chunk] = field(default_factory=list)
    truncate: Change | None = None


def segments(records: Sequence[SinkRecord], tables: TopicTables) -> list[Segment]:
    """The records as script calls, split at each truncate.

    Raises:
        RecordError: a record that is not a change envelope with a source position (as
            :func:`sinks.keyed.classify` says).
    """
    out = [Segment()]
    chunk = Chunk()
    table_of, dumps = tables.table, orjson.dumps
    for record in records:
        table, value, offset = table_of(record.topic), record.value, record.offset
        key = record.key if record.key is not None else {}
        if value is None:
            code, pos, extra = "x", "", ""
        else:
            code, position, sequence, row = _read(record, value)
            if code == "t":
                out[-1].truncate = Change(
                    Kind.TRUNCATE, table, key, (position, sequence), offset, None, record
                )
                out.append(Segment())
                chunk = Chunk()
                continue
            pos = f"{position:020d}{sequence:010d}"
            # A delete's is offset + 1: its own tombstone follows it and must change nothing.
            extra = dumps(row).decode() if row is not None else f"{offset + 1:015d}"
        if not chunk.entries:
            out[-1].chunks.append(chunk)
        number = chunk.tables.get(table)
        if number is None:
            number = chunk.tables[table] = len(chunk.tables) + 1
        if len(key) == 1 and (one := next(iter(key.values()))).__class__ is int:
            suffix = str(one)  # key_suffix's common case, without its call
        else:
            suffix = key_suffix(key, tables.any_type_key(table))
        chunk.entries.append((code, number, suffix, pos, f"{offset:015d}", extra))
        if len(chunk.entries) >= CHUNK:
            chunk = Chunk()
    return out


def _read(record: SinkRecord, value: dict[str, Any]) -> tuple[str, int, int, dict[str, Any] | None]:
    """The script's op code, the position, and for an upsert its row."""
    op = value.get("op")
    code = _CODES.get(op) if isinstance(op, str) else None
    if code is None:
        raise RecordError(f"unknown op {op!r} at offset {record.offset}", record)
    position, sequence = counted_position(record)
    if code != "s":
        return code, position, sequence, None
    row = value.get("after")
    if not isinstance(row, dict):
        raise RecordError(f"op {op!r} without an 'after' row at offset {record.offset}", record)
    return code, position, sequence, row
