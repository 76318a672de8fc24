"""Keyed changes: what the key-value sinks (Redis, search) make of a :class:`SinkRecord`.

A record becomes one :class:`Change`: an upsert (``c``, ``u``, ``r``), a delete (``d``), a
tombstone (null value) or a truncate (``t``). Each carries the source position ``pos`` that orders
all changes of a key, and the record's offset. The Redis and search sinks tell a tombstone that
follows a change they already applied from one whose delete they missed by comparing offsets,
which works for tombstones with or without their delete's position (older logs have none).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from enum import Enum
from typing import Any, NamedTuple

import orjson

from cdc.contracts.errors import RecordError
from cdc.contracts.events import topic_name
from cdc.contracts.schema import is_table_schema_key
from cdc.contracts.sink import SchemaLookup, SinkRecord, sink_offsets
from cdc.log.base import TopicPartition

Table = tuple[str, str]
Pos = tuple[int, int]


#: How often a sink asks the schemas again for a table whose schema it has not seen.
ASK_AGAIN_S = 5.0
#: The first characters of every JSON text (whitespace may lead one; NaN and Infinity are the
#: stdlib's, which :func:`any_type_text` also asks).
_JSON_STARTS = frozenset('-0123456789"{[tfnNI \t\n\r')


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
    """Maps topics back to ``(schema, table)``; built once per sink from its context.

    With the context's schemas it also says which tables have an any-type key
    (:meth:`any_type_key`), for the sinks that name a row by its key values as text.
    """

    def __init__(
        self, pipeline: str, tables: Iterable[Table], schemas: SchemaLookup | None = None
    ) -> None:
        self._pipeline = pipeline
        self._known = {topic_name(pipeline, s, t): (s, t) for s, t in tables}
        self._schemas = schemas
        self._any_type: dict[Table, bool] = {}
        self._unknown: dict[Table, float] = {}  # tables without a schema: when last asked

    def any_type_key(self, table: Table) -> bool:
        """Whether ``table``'s key column takes a value of any JSON type
        (:attr:`~cdc.contracts.schema.TableSchema.any_type_key`): its key text must then tell
        the number 5 from the string "5" (:func:`key_suffix`). Kept once the table's schema is
        known (a key's columns keep their types). A source publishes a table's schema before
        its first change, and the runtime's catalog waits for one Kafka shows late; while none
        is known the answer is ``False``, and the schemas are asked again every
        :data:`ASK_AGAIN_S`, not at each record."""
        known = self._any_type.get(table)
        if known is not None:
            return known
        if self._schemas is None:
            return False
        asked = self._unknown.get(table)
        if asked is not None and time.monotonic() - asked < ASK_AGAIN_S:
            return False
        schema = self._schemas.get(*table)
        if schema is None:
            self._unknown[table] = time.monotonic()
            return False
        self._unknown.pop(table, None)
        known = self._any_type[table] = schema.any_type_key
        return known

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


def key_suffix(key: Mapping[str, Any], any_type: bool = False) -> str:
    """Key values in key-column order joined by ``:`` (the Redis key's last part).

    A string is written as it is and anything else as JSON, so a typed key column (PostgreSQL's)
    gives each value one text. Under ``any_type`` (:meth:`TopicTables.any_type_key`) a column
    may hold the number 5 and the string "5" at once: a string that reads as JSON is then written
    as a JSON string (``"5"``), which no other value's text is (:func:`any_type_text`).
    """
    if len(key) == 1:  # the common single-column key, without a generator
        (value,) = key.values()
        if isinstance(value, str):
            return any_type_text(value) if any_type else value
        return str(value) if type(value) is int else orjson.dumps(value).decode()
    return ":".join(v if isinstance(v, str) else orjson.dumps(v).decode() for v in key.values())


def any_type_text(value: str) -> str:
    """An any-type key's string as text: as it is, unless it reads as JSON (``5``, ``true``,
    ``{"$oid": ...}``, ``"x"``): then as a JSON string, so that it differs from the text of the
    value it reads as. A string that reads as no JSON is the text of no other value."""
    if value[:1] not in _JSON_STARTS:
        return value  # no JSON text starts so (most keys: a word, an id): no parse
    try:
        orjson.loads(value)
    except orjson.JSONDecodeError:
        try:  # orjson refuses integers past 64 bits and NaN, which a key's text may hold
            json.loads(value)
        except ValueError:
            return value
    return orjson.dumps(value).decode()


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
