"""What a view writes to the log: its documents (``<pipeline>.views.<name>``), its state
(``<pipeline>.__views.<name>.state``, compacted) and its table's schema for the sinks."""

from __future__ import annotations

from typing import Any

import orjson

from cdc.config.views import POSITIONS_FIELD, VIEW_SCHEMA, ViewConfig
from cdc.contracts.events import topic_name
from cdc.contracts.schema import Column, TableSchema, schema_record
from cdc.envelope.encode import write_pos
from cdc.log.base import Record
from cdc.support.clock import now_ms
from cdc.views.join import Key, Pos

#: The connector name in a view document's ``source`` block.
VIEW_CONNECTOR = "cdc-view"
#: The state key of the view's own counters: its high-water position (the highest source
#: position it has read) and its documents' sequence at that position.
META_KEY = b'{"meta":"view"}'
#: How the state key of a table's truncate floor starts (a row's starts ``{"t":``).
FLOOR_PREFIX = b'{"truncated":'
#: The type of an embedded field and of ``_positions`` in the view's published schema.
JSON_TYPE = "jsonb"


def view_topic(pipeline: str, view: ViewConfig) -> str:
    return topic_name(pipeline, VIEW_SCHEMA, view.name)


def state_topic(pipeline: str, view: ViewConfig) -> str:
    return f"{pipeline}.__views.{view.name}.state"


def view_group(pipeline: str, view: ViewConfig) -> str:
    """The consumer group the view reads its tables through (its offsets commit with the
    documents and the state, in one log transaction)."""
    return f"{pipeline}.view.{view.name}"


def state_key(table: str, key: Key) -> bytes:
    return b'{"t":%b,"k":%b}' % (orjson.dumps(table), key)


def state_record(
    pipeline: str, view: ViewConfig, table: str, key: Key, row: Any, pos: Pos
) -> Record:
    """A row of the state as of its last applied change; a deleted row, a tombstone."""
    value = None if row is None else orjson.dumps({"row": row, "pos": list(pos)})
    return Record(state_topic(pipeline, view), state_key(table, key), value)


def floor_record(pipeline: str, view: ViewConfig, table: str, pos: Pos) -> Record:
    """The position of the newest truncate of ``table`` the view applied: a change of the
    table older than it, read later, is not applied (:meth:`cdc.views.store.ViewStore.truncate`)."""
    key = FLOOR_PREFIX + orjson.dumps(table) + b"}"
    return Record(state_topic(pipeline, view), key, orjson.dumps({"pos": list(pos)}))


def parse_floor(key: bytes, value: bytes) -> tuple[str, Pos]:
    """A floor record back to ``(table, pos)``."""
    return orjson.loads(key)["truncated"], tuple(orjson.loads(value)["pos"])


def meta_record(pipeline: str, view: ViewConfig, high: Pos, seq: int, token: str) -> Record:
    """The view's counters as of a batch, with the batch's commit token (its local store
    records the same token once it holds the batch: :mod:`cdc.views.store`)."""
    value = orjson.dumps({"high": list(high), "seq": seq, "token": token})
    return Record(state_topic(pipeline, view), META_KEY, value)


def parse_state_key(key: bytes) -> tuple[str, Key]:
    """A state record's key back to ``(table, key)``."""
    k = orjson.loads(key)
    return k["t"], orjson.dumps(k["k"], option=orjson.OPT_SORT_KEYS)


def parse_state(key: bytes, value: bytes) -> tuple[str, Key, dict[str, Any], Pos]:
    """A state record back to ``(table, key, row, pos)``."""
    v = orjson.loads(value)
    return (*parse_state_key(key), v["row"], tuple(v["pos"]))


def document_records(
    pipeline: str, view: ViewConfig, key: Key, doc: dict[str, Any] | None, pos: Pos
) -> list[Record]:
    """A document as a Debezium-shaped change of the view's table (``after`` the document);
    a root row gone, a delete and its tombstone. ``pos`` travels beside the value."""
    topic = view_topic(pipeline, view)
    at = write_pos(pos[0], pos[1])
    ts = now_ms()
    source = {
        "version": "1",
        "connector": VIEW_CONNECTOR,
        "name": pipeline,
        "ts_ms": ts,
        "snapshot": "false",
        "db": "",
        "schema": VIEW_SCHEMA,
        "table": view.name,
    }
    if doc is not None:
        value = {"before": None, "after": doc, "source": source, "op": "u", "ts_ms": ts}
        return [Record(topic, key, orjson.dumps(value), at)]
    deleted = {"before": orjson.loads(key), "after": None, "source": source, "op": "d", "ts_ms": ts}
    return [Record(topic, key, orjson.dumps(deleted), at), Record(topic, key, None, at)]


def view_schema(view: ViewConfig, root: TableSchema) -> TableSchema:
    """The view's table for the sinks: the root's columns, then each embed's field and
    ``_positions`` as JSON columns.

    Raises:
        ValueError: an embed's field has a root column's name.
    """
    names = {c.name for c in root.columns}
    clash = [e.field for e in view.embed if e.field in names]
    if clash:
        raise ValueError(f"embed field(s) {', '.join(clash)} are columns of {view.root} too")
    extra = [Column(e.field, JSON_TYPE) for e in view.embed] + [Column(POSITIONS_FIELD, JSON_TYPE)]
    columns = tuple(Column(c.name, c.type, c.key, c.nullable) for c in root.columns) + tuple(extra)
    return TableSchema(VIEW_CONNECTOR, VIEW_SCHEMA, view.name, columns, root.position)


def view_schema_record(pipeline: str, schema: TableSchema) -> Record:
    return schema_record(pipeline, schema)
