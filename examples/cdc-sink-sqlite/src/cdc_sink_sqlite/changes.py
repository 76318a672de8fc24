"""What a batch of records asks of the store: pure functions over records, no SQLite.

Every data record becomes one :class:`Step`: a :class:`Write` (an upsert carries the new row, a
delete carries none) or a :class:`Truncate`. Each carries the record's source position, the
``(position, sequence)`` pair that orders all changes of a key; the store applies a step only
when it is newer than what it holds, so replays and late, older changes change nothing.

A tombstone (a record whose value is null, after every delete) carries its delete's position and
is that delete: compaction keeps a key's latest record and may run while the sink is behind, so
the sink can read the tombstone without the delete. Right after its delete it changes nothing
(the position is not newer). A tombstone without a position (a log written before tombstones
carried one) becomes no step. A delete is applied
by its record key alone: its ``before`` holds placeholders for NOT NULL columns under
PostgreSQL's REPLICA IDENTITY DEFAULT (``0``, ``""``), never values to store or match on, so it
is never read.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import orjson
from cdc.contracts.errors import RecordError
from cdc.contracts.events import topic_name
from cdc.contracts.sink import SinkRecord

Table = tuple[str, str]
Position = tuple[int, int]

_UPSERTS = frozenset({"c", "u", "r"})


@dataclass(frozen=True, slots=True)
class Write:
    """Set (``row`` the JSON of the new row) or delete (``row`` None) one key of a table."""

    table: Table
    key: str
    row: str | None
    pos: Position


@dataclass(frozen=True, slots=True)
class Truncate:
    """Remove every row of ``table`` older than ``pos`` (a later change of a key survives)."""

    table: Table
    pos: Position


Step = Write | Truncate


class TopicTables:
    """The ``(schema, table)`` of a topic, ``<pipeline>.<schema>.<table>``."""

    def __init__(self, pipeline: str, tables: Iterable[Table]) -> None:
        self._prefix = pipeline + "."
        self._known = {topic_name(pipeline, *t): (t[0], t[1]) for t in tables}

    def table(self, topic: str) -> Table:
        found = self._known.get(topic)
        if found is None:  # a table not named up front: the topic's name says which
            schema, _, name = topic.removeprefix(self._prefix).partition(".")
            found = self._known[topic] = (schema, name)
        return found


def position(record: SinkRecord) -> Position:
    """The record's source position as two non-negative integers (what SQLite compares).

    Raises:
        RecordError: the record has none, or not two counts.
    """
    try:
        pos, seq = record.position
    except (KeyError, TypeError, ValueError) as exc:
        raise RecordError(f"no source position at offset {record.offset}", record) from exc
    if type(pos) is not int or type(seq) is not int or pos < 0 or seq < 0:
        raise RecordError(f"source position not two counts at offset {record.offset}", record)
    return pos, seq


def key_text(record: SinkRecord) -> str:
    """The record key as canonical JSON (sorted), the table's primary key.

    Raises:
        RecordError: the record has no key object.
    """
    key = record.key
    if not isinstance(key, dict) or not key:
        raise RecordError(f"no key at offset {record.offset}", record)
    return orjson.dumps(key, option=orjson.OPT_SORT_KEYS).decode()


def step(record: SinkRecord, tables: TopicTables) -> Step | None:
    """The step one data record asks for; ``None`` for a tombstone without a position.

    Raises:
        RecordError: not a change this sink understands (the runner's ``bad_records`` policy
            decides: stop, or dead-letter the record and apply the rest).
    """
    value = record.value
    if value is None:  # a tombstone: its delete, if it carries the delete's position
        if record.pos is None:
            return None
        return Write(tables.table(record.topic), key_text(record), None, position(record))
    op = value.get("op")
    table = tables.table(record.topic)
    if op == "t":
        return Truncate(table, position(record))
    if op == "d":
        return Write(table, key_text(record), None, position(record))
    if op not in _UPSERTS:
        raise RecordError(f"unknown op {op!r} at offset {record.offset}", record)
    after = value.get("after")
    if not isinstance(after, dict):
        raise RecordError(f"op {op!r} without an 'after' row at offset {record.offset}", record)
    return Write(table, key_text(record), orjson.dumps(after).decode(), position(record))


def plan(records: Sequence[SinkRecord], tables: TopicTables) -> list[Step]:
    """Every record's step, in order. All are checked before any is applied, so a bad record
    fails the batch before the transaction starts."""
    steps = (step(record, tables) for record in records)
    return [s for s in steps if s is not None]
