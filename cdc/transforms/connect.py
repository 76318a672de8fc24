"""The Connect schemas (``schemas.enable: true``) of transformed events.

A source hands its events over with their table's Connect schemas
(:attr:`cdc.contracts.events.ChangeEvent.connect`), which carry the column types the values alone do
not tell (an ``int32``, a ``Decimal``, a ``Timestamp``). A transform that renames, adds or routes
edits those schemas the way it edits the rows, so the types of every other column survive;
dropping them instead would have the envelope infer every column's type from its value.

Each edit is cached per schema version: a table's schemas are the same object for all its
changes, so the JSON is parsed and written once per table version, not per event. Where the
rows are not structs (MongoDB's are JSON text, ``io.debezium.data.Json``), the row schemas
stay as they are (the edited document is still such text) and only the names and the key
are edited.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any, Final

import orjson

from cdc.envelope.connect_schema import TableSchemas, field_schema

#: The Connect type of each published column type a transform gives an added field.
CONNECT_TYPES: Final = {
    "bigint": "int64",
    "boolean": "boolean",
    "double precision": "double",
    "text": "string",
}
_ROWS: Final = ("before", "after")

Fields = list[dict[str, Any]]


@lru_cache(maxsize=4096)
def routed(schemas: TableSchemas, topic: str, key_field: str | None) -> TableSchemas:
    """``schemas`` of events routed to ``topic`` (``<pipeline>.<schema>.<table>``): named
    after it, and with ``key_field`` (a string) in the key and the rows."""
    value = orjson.loads(schemas.value)
    key = None if schemas.key is None else orjson.loads(schemas.key)
    rows = _row_structs(value)
    value["name"] = f"{topic}.Envelope"
    for row in rows:
        row["name"] = f"{topic}.Value"
    if key_field is not None:
        added = field_schema("string", key_field, False)
        for row in rows:
            row["fields"] = _with(row["fields"], added)
        if key is None:
            key = {"type": "struct", "fields": [], "optional": False}
        key["fields"] = _with(key["fields"], added)
    if key is not None:
        key["name"] = f"{topic}.Key"
    return TableSchemas.of(value, key)


@lru_cache(maxsize=4096)
def renamed(schemas: TableSchemas, names: tuple[tuple[str, str], ...]) -> TableSchemas:
    """``schemas`` with the row and key fields renamed (``(old, new)`` pairs)."""
    mapping = dict(names)

    def rename(fields: Fields) -> Fields:
        return [{**f, "field": mapping.get(f["field"], f["field"])} for f in fields]

    return _edited(schemas, rename, rename)


@lru_cache(maxsize=4096)
def with_field(schemas: TableSchemas, name: str, column_type: str) -> TableSchemas:
    """``schemas`` with an optional row field ``name`` of published type ``column_type``."""
    added = field_schema(CONNECT_TYPES.get(column_type, "string"), name, True)
    return _edited(schemas, lambda fields: _with(fields, added), None)


def _edited(
    schemas: TableSchemas,
    rows: Callable[[Fields], Fields],
    keys: Callable[[Fields], Fields] | None,
) -> TableSchemas:
    value = orjson.loads(schemas.value)
    for struct in _row_structs(value):
        struct["fields"] = rows(struct["fields"])
    key = None if schemas.key is None else orjson.loads(schemas.key)
    if key is not None and keys is not None:
        key["fields"] = keys(key["fields"])
    return TableSchemas.of(value, key)


def _row_structs(value: Any) -> list[dict[str, Any]]:
    """The ``before`` and ``after`` schemas of an envelope schema that are structs (none
    where the rows are JSON text)."""
    fields = value.get("fields") if isinstance(value, dict) else None
    return [
        f
        for f in fields or ()
        if isinstance(f, dict) and f.get("field") in _ROWS and f.get("type") == "struct"
    ]


def _with(fields: Fields, added: dict[str, Any]) -> Fields:
    """``fields`` with ``added`` last (in place of a field of the same name)."""
    return [*(f for f in fields if f.get("field") != added["field"]), added]
