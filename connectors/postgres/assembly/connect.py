"""A relation's Connect schemas (``schemas.enable``), built once per relation version.

The row fields come from :func:`connectors.postgres.types.connect.column_schema`, the source
struct is Debezium's PostgreSQL one (:data:`POSTGRES_SOURCE`, registered with
:mod:`cdc.envelope.connect_schema` for events without schemas of their own) with our ``pos``.
Debezium makes a key column and a ``NOT NULL`` column ``optional: false``.
"""

from __future__ import annotations

import threading
from typing import Any, Final

import orjson

from cdc.envelope.connect_schema import (
    TableSchemas,
    envelope_schema,
    field_schema,
    key_schema,
    register_source_fields,
    source_struct,
)
from cdc.envelope.options import EnvelopeOptions
from connectors.postgres.assembly.relation_state import CONNECTOR, RelationState
from connectors.postgres.types import TypeRegistry
from connectors.postgres.types.connect import column_schema

#: The fields after ``ts_ns`` of Debezium's PostgreSQL source struct.
POSTGRES_SOURCE: Final = (
    field_schema("string", "schema", False),
    field_schema("string", "table", False),
    field_schema("int64", "txId", True),
    field_schema("int64", "lsn", True),
    field_schema("int64", "xmin", True),
    field_schema("string", "origin", True),
    field_schema("int64", "origin_lsn", True),
)
register_source_fields(CONNECTOR, POSTGRES_SOURCE)

_CACHE: dict[int, tuple[RelationState, EnvelopeOptions, TableSchemas]] = {}
_LOCK = threading.Lock()


def relation_schemas(
    state: RelationState, options: EnvelopeOptions, registry: TypeRegistry | None = None
) -> TableSchemas:
    """The Connect schemas of ``state``'s records, cached per relation state (a new
    ``Relation`` message builds a new state, so a new shape gets new schemas)."""
    found = _CACHE.get(id(state))
    # ``is`` first: one options object serves a whole run, and pydantic's ``==`` costs a µs.
    if found is not None and found[0] is state and (found[1] is options or found[1] == options):
        return found[2]
    schemas = _build(state, options, registry)
    with _LOCK:
        if len(_CACHE) > 4096:  # states of dropped or altered tables: bound the cache
            _CACHE.clear()
        _CACHE[id(state)] = (state, options, schemas)  # keeps state alive: ids stay unique
    return schemas


def _build(
    state: RelationState, options: EnvelopeOptions, registry: TypeRegistry | None
) -> TableSchemas:
    fields: dict[str, dict[str, Any]] = {}
    for column, published in zip(state.relation.columns, state.table_schema.columns, strict=True):
        optional = published.nullable and not published.key
        if column.name in state.masks:  # what the mask writes: text, or always null
            fields[column.name] = field_schema("string", column.name, optional)
            continue
        fields[column.name] = column_schema(
            column.type_oid,
            column.type_modifier,
            column.name,
            optional,
            options,
            registry or state.registry,
        )
    value = envelope_schema(
        state.topic, list(fields.values()), source_struct(CONNECTOR, POSTGRES_SOURCE)
    )
    keys = [fields[name] for name in state.key]
    return TableSchemas.of(value, key_schema(state.topic, keys) if keys else None)


_EMPTY: dict[str, Any] = {
    "int8": 0,
    "int16": 0,
    "int32": 0,
    "int64": 0,
    "float": 0.0,
    "double": 0.0,
    "boolean": False,
    "string": "",
    "bytes": "",
    "array": [],
}


def key_only_before(
    state: RelationState, options: EnvelopeOptions, registry: TypeRegistry | None = None
) -> dict[str, Any]:
    """The ``before`` image of a delete whose old tuple has the key only (REPLICA IDENTITY
    DEFAULT), as Debezium writes it: every column, the key ones to fill in, a nullable one
    null, a ``NOT NULL`` one its Connect type's empty value (Debezium's converters give a
    non-optional field with no value their fallback: ``""``, ``0``, ``false``). Built once
    per relation state; the caller copies it and sets the key."""
    found = _BEFORE.get(id(state))
    if found is not None and found[0] is state and found[1] == options:
        return found[2]
    row: dict[str, Any] = {}
    value = relation_schemas(state, options, registry)
    fields = _row_fields(value.value)
    for column in state.table_schema.columns:
        schema = fields.get(column.name, {})
        row[column.name] = None if schema.get("optional", True) else _EMPTY.get(schema["type"])
    with _LOCK:
        if len(_BEFORE) > 4096:
            _BEFORE.clear()
        _BEFORE[id(state)] = (state, options, row)
    return row


def _row_fields(envelope: bytes) -> dict[str, dict[str, Any]]:
    parsed = orjson.loads(envelope)
    return {f["field"]: f for f in parsed["fields"][0]["fields"]}


_BEFORE: dict[int, tuple[RelationState, EnvelopeOptions, dict[str, Any]]] = {}
