"""Which source column types are text: their values feed the ``text`` field, the default one of
a query. Every other column is still indexed, under ``row.<column>``."""

from __future__ import annotations

from cdc.contracts.schema import TableSchema

_TEXT_TYPES = {"text", "character varying", "varchar", "character", "char", "bpchar", "citext"}


def text_columns(schema: TableSchema | None) -> frozenset[str] | None:
    """Columns whose values go to ``text``; ``None`` (schema unknown): every string value."""
    if schema is None:
        return None
    return frozenset(
        c.name for c in schema.columns if c.type.split("(")[0].rstrip("[]").strip() in _TEXT_TYPES
    )
