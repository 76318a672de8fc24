"""Table schemas, published so sinks create faithfully typed tables without guessing.

A source publishes a :class:`TableSchema` to the pipeline's schema topic
(``<pipeline>.__schemas``, keyed by ``{"schema", "table"}``) before the first change of a table
and again whenever the table's shape changes. The record envelope itself stays Debezium's. The
same topic holds the log's envelope encoding under a key of its own kind (``{"kind":
"encoding"}``, :mod:`cdc.log.encoding`); readers of the topic skip it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from cdc.log.base import Record


@dataclass(frozen=True, slots=True)
class Column:
    """One column.

    Attributes:
        name: column name.
        type: the source's type name with its modifiers, e.g. ``numeric(12,2)``,
            ``timestamp with time zone``, ``text[]``.
        key: part of the record key.
        nullable: the column accepts NULL (``True`` where the source does not say).
        id: the column's identity in its table, kept when the column is renamed and never
            given to another column (PostgreSQL: its ``attnum``); ``None`` where the source
            does not know it. A sink tells a rename (same ``id``, new name) from a drop and an
            add by it.
    """

    name: str
    type: str
    key: bool = False
    nullable: bool = True
    id: int | None = None


@dataclass(frozen=True, slots=True)
class TableSchema:
    """The shape of one table, as of a source position."""

    connector: str
    schema: str
    table: str
    columns: tuple[Column, ...]
    position: int = 0

    @property
    def key_columns(self) -> list[str]:
        return [c.name for c in self.columns if c.key]

    @property
    def any_type_key(self) -> bool:
        """A key column has no type, so takes a value of any JSON type (a schemaless source's:
        MongoDB publishes ``_id`` with the type ``""``), and the number 5 and the string "5"
        are two keys: a sink naming rows by their key's text must tell them apart."""
        return any(c.key and not c.type for c in self.columns)

    def to_json(self) -> dict[str, Any]:
        return {
            "connector": self.connector,
            "schema": self.schema,
            "table": self.table,
            "position": self.position,
            "columns": [_column_json(c) for c in self.columns],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TableSchema:
        return cls(
            connector=data["connector"],
            schema=data["schema"],
            table=data["table"],
            position=int(data.get("position", 0)),
            columns=tuple(
                Column(
                    c["name"],
                    c["type"],
                    bool(c.get("key")),
                    bool(c.get("nullable", True)),
                    None if c.get("id") is None else int(c["id"]),
                )
                for c in data["columns"]
            ),
        )

    def same_shape(self, other: TableSchema | None) -> bool:
        return other is not None and self.columns == other.columns


def _column_json(column: Column) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": column.name,
        "type": column.type,
        "key": column.key,
        "nullable": column.nullable,
    }
    if column.id is not None:  # absent, not null: a source without ids writes what it wrote
        out["id"] = column.id
    return out


def schema_topic(pipeline: str) -> str:
    return f"{pipeline}.__schemas"


def dead_letter_topic(pipeline: str) -> str:
    return f"{pipeline}.__dlq"


def schema_record(pipeline: str, schema: TableSchema, transformed: bool = False) -> Record:
    """The record publishing ``schema`` to sinks; ``transformed``: the shape the pipeline's
    transforms gave the table, not the source's own (which :func:`source_shape_record` keeps)."""
    key = orjson.dumps({"schema": schema.schema, "table": schema.table})
    value = schema.to_json()
    if transformed:
        value["transformed"] = True
    return Record(topic=schema_topic(pipeline), key=key, value=orjson.dumps(value))


#: The key kind of a source table's own shape, kept beside a transformed one: the source
#: compares a table's next shape with it (``schema.changed``), sinks never read it.
SOURCE_SHAPE = "source_shape"


def source_shape_record(pipeline: str, schema: TableSchema) -> Record:
    """The record keeping ``schema`` as the source saw it, where transforms changed it."""
    key = orjson.dumps({"kind": SOURCE_SHAPE, "schema": schema.schema, "table": schema.table})
    return Record(topic=schema_topic(pipeline), key=key, value=orjson.dumps(schema.to_json()))


def is_table_schema_key(key: bytes | dict[str, Any] | None) -> bool:
    """Whether a schema-topic key (raw or parsed) is a table's published schema: not the
    stored encoding's nor a source shape's (both carry a ``kind``)."""
    if isinstance(key, bytes | bytearray):
        try:
            key = orjson.loads(key)
        except orjson.JSONDecodeError:
            return False
    return isinstance(key, dict) and "kind" not in key
