"""Keyed changes: what the key-value sinks (Redis, search) make of a :class:`SinkRecord`.

A record becomes one :class:`Change`: an upsert (``c``, ``u``, ``r``), a delete (``d``), a
tombstone (null value) or a truncate (``t``). Each carries the source position ``pos`` that orders
all changes of a key, and the record's offset. The Redis and search sinks tell a tombstone that
follows a change they already applied from one whose delete they missed by comparing offsets,
which works for tombstones with or without their delete's position (older logs have none).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import Enum
from typing import Any, NamedTuple

import orjson

from cdc.contracts.errors import RecordError
from cdc.contracts.events import topic_name
from cdc.contracts.schema import is_table_schema_key
from cdc.contracts.sink import SinkRecord, sink_offsets
from cdc.log.base import TopicPartition

Table = tuple[str, str]
Pos = tuple[int, int]


class Kind(Enum):
    UPSERT = "upsert"
    DELETE = "delete"
    TOMBSTONE = "tombstone"
    TRUNCATE = "truncate"


_KINDS = {
    "c": Kind.UPSERT,
    "u": Kind.UPSERT,
    "r": Kind.UPSERT,
    "d": Kind.DELETE,
    "t": Kind.TRUNCATE,
}


class Change(NamedTuple):
    """One record, classified (a named tuple: one is built per record, and it is the cheapest).

    Attributes:
        kind: what to do.
        table: ``(schema, table)``.
        key: the key object (``{}`` for a truncate).
        pos: ``(position, sequence)``; ``None`` for a tombstone.
        offset: the record's offset in its partition.
        row: the new row (``after``) of an upsert, else ``None``.
        record: the record itself, for error reports.
    """

    kind: Kind
    table: Table
    key: dict[str, Any]
    pos: Pos | None
    offset: int
    row: dict[str, Any] | None
    record: SinkRecord


class TopicTables:
    """Maps topics back to ``(schema, table)``; built once per sink from its context."""

    def __init__(self, pipeline: str, tables: Iterable[Table]) -> None:
        self._pipeline = pipeline
        self._known = {topic_name(pipeline, s, t): (s, t) for s, t in tables}

    def table(self, topic: str) -> Table:
        found = self._known.get(topic)
        if found is None:
            # Not configured up front (a table added later): the topic name says it all.
            rest = topic.removeprefix(self._pipeline + ".")
            schema, _, name = rest.partition(".")
            found = self._known[topic] = (schema, name)
        return found


def counted_position(record: SinkRecord) -> tuple[int, int]:
    """The record's ``(position, sequence)``, both non-negative integers: what a keyed sink
    orders a key's changes by (:attr:`SinkRecord.position`, read here without its two calls
    where the position is beside the value).

    Raises:
        RecordError: no position, or not two counts.
    """
    try:
        pos = record.pos
        position, sequence = orjson.loads(pos) if pos is not None else record.position
    except (KeyError, TypeError, ValueError) as exc:
        raise RecordError(f"no source position at offset {record.offset}", record) from exc
    if type(position) is not int or type(sequence) is not int or position < 0 or sequence < 0:
        raise RecordError(f"source position not two counts at offset {record.offset}", record)
    return position, sequence


def classify(record: SinkRecord, tables: TopicTables) -> Change:
    """The change a record stands for.

    Raises:
        RecordError: the record is not a Debezium envelope this module understands.
    """
    table = tables.table(record.topic)
    key = record.key if record.key is not None else {}
    value = record.value
    if value is None:
        return Change(Kind.TOMBSTONE, table, key, None, record.offset, None, record)
    op = value.get("op")
    kind = _KINDS.get(op) if isinstance(op, str) else None
    if kind is None:
        raise RecordError(f"unknown op {op!r} at offset {record.offset}", record)
    position, sequence = counted_position(record)
    if kind is not Kind.UPSERT:
        return Change(kind, table, key, (position, sequence), record.offset, None, record)
    row = value.get("after")
    if not isinstance(row, dict):
        raise RecordError(f"op {op!r} without an 'after' row at offset {record.offset}", record)
    return Change(kind, table, key, (position, sequence), record.offset, row, record)


def key_suffix(key: Mapping[str, Any]) -> str:
    """Key values in key-column order joined by ``:`` (the Redis key's last part)."""
    if len(key) == 1:  # the common single-column key, without a generator
        (value,) = key.values()
        if isinstance(value, str):
            return value
        return str(value) if type(value) is int else orjson.dumps(value).decode()
    return ":".join(v if isinstance(v, str) else orjson.dumps(v).decode() for v in key.values())


def split_schemas(
    records: list[SinkRecord], schema_topic: str, tables: set[Table]
) -> tuple[list[SinkRecord], list[Table], dict[TopicPartition, int]]:
    """A read's data records, the sink's tables its schema records (on ``schema_topic``)
    announce, in order and once each, and the offsets of those schema records."""
    if schema_topic not in {r.topic for r in records}:  # one call, where any() resumes a record
        return records, [], {}
    schemas = [r for r in records if r.topic == schema_topic]
    announced = [
        (str(r.key.get("schema")), str(r.key.get("table")))
        for r in schemas
        if r.key is not None and r.value is not None and is_table_schema_key(r.key)
    ]
    wanted = [t for t in dict.fromkeys(announced) if t in tables]
    return [r for r in records if r.topic != schema_topic], wanted, sink_offsets(schemas)
