"""The schema published for a schemaless collection: ``_id`` plus every top-level field seen.

MongoDB has no schema to publish, and a field's BSON type may differ between documents, so no
column gets a real type: each is published with the type ``""``, which the sinks read as a
schemaless JSON value (DuckDB: a ``JSON`` column; ``cdc verify``: compared as JSON). Columns
only ever grow, in the order fields were first seen; a field no document holds any more stays,
as a dropped column does in the warehouse.

The set of known fields is restored at start from the schema the log already holds, so a
restart does not publish a narrower shape.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from cdc.contracts.schema import Column, TableSchema

JSON_TYPE = ""
KEY = "_id"


class FieldTracker:
    """Known top-level fields per collection; says when a wider schema must be published."""

    def __init__(self, connector: str) -> None:
        self._connector = connector
        self._fields: dict[tuple[str, str], dict[str, None]] = {}
        self._announced: set[tuple[str, str]] = set()

    def restore(self, schema: TableSchema) -> None:
        """Start from a schema published earlier (its columns are already known downstream)."""
        known = self._fields.setdefault((schema.schema, schema.table), {KEY: None})
        known.update((c.name, None) for c in schema.columns)
        self._announced.add((schema.schema, schema.table))

    def observe(
        self, table: tuple[str, str], rows: Iterable[Mapping[str, Any] | None]
    ) -> TableSchema | None:
        """The schema to publish before ``rows``, or ``None`` if nothing new was seen."""
        known = self._fields.setdefault(table, {KEY: None})
        grew = False
        for row in rows:
            if row is None:
                continue
            for name in row:
                if name not in known:
                    known[name] = None
                    grew = True
        if not grew and table in self._announced:
            return None
        self._announced.add(table)
        return self.schema(table)

    def schema(self, table: tuple[str, str]) -> TableSchema:
        names = self._fields.setdefault(table, {KEY: None})
        columns = tuple(Column(n, JSON_TYPE, key=n == KEY, nullable=n != KEY) for n in names)
        return TableSchema(self._connector, table[0], table[1], columns)
