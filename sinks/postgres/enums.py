"""Enum columns: the target's enum of the same name where it has one, else ``text``.

A source publishes an enum column by its type's name (``mood``, or ``sales.mood`` outside
``public``: :attr:`cdc.contracts.schema.Column.type`) and writes its labels as strings
(Debezium's ``io.debezium.data.Enum``). When the sink creates or adds such a column, it looks
on the target for an enum of that name: first in the sink's schema, then in the schema the
source named, or, for an unqualified name, along the connection's ``search_path``. Found, the
column takes that enum (and an array of it, its array type); otherwise ``text`` holds the
labels. A column keeps the type it was made with: an enum made on the target later is not
applied to an existing ``text`` column.

The labels are staged by ``COPY`` into a staging table typed as the target, so the enum's own
input function checks each one. A label the target's enum lacks (one the source added by
``ALTER TYPE ... ADD VALUE``) stops this sink alone (:func:`missing_label`): every later row
with it would fail the same way, so it is a schema difference, not a bad record.
"""

from __future__ import annotations

import re
from typing import Any, Final

import psycopg

from cdc.contracts.errors import SinkFatal
from cdc.records.values import normalize_type
from sinks.postgres.catalog import TableInfo
from sinks.postgres.types import target_type

_IDENT: Final = r'(?:[A-Za-z_][A-Za-z0-9_$]*|"(?:[^"]|"")+")'
_NAME: Final = re.compile(rf"(?:({_IDENT})\.)?({_IDENT})((?:\[\])*)")
_FIND: Final = (
    "SELECT format_type(t.oid, NULL), format_type(t.typarray, NULL) FROM pg_type t "
    "JOIN pg_namespace n ON n.oid = t.typnamespace WHERE t.typtype = 'e' AND t.typname = %s "
    "AND n.nspname = ANY(%s) ORDER BY array_position(%s, n.nspname::text) LIMIT 1"
)
#: SQLSTATE invalid_text_representation: what an enum's input function raises for a label
#: it does not hold.
INVALID_TEXT: Final = "22P02"


def resolve(conn: psycopg.Connection[Any], schema: str, source_type: str) -> str | None:
    """The target's enum type (``format_type``'s spelling, so it reads back the same) for a
    column of ``source_type``, or ``None`` where the column is to be typed as usual."""
    if not _kept_as_text(source_type):
        return None
    match = _NAME.fullmatch(source_type.strip())
    if match is None:
        return None
    named, bare, brackets = match.groups()
    if named is not None:
        schemas = [schema, _unquoted(named)]
    else:
        row = conn.execute("SELECT current_schemas(false)::text[]").fetchone()
        schemas = [schema, *(row[0] if row is not None else [])]
    found = conn.execute(_FIND, [_unquoted(bare), schemas, schemas]).fetchone()
    if found is None:
        return None
    enum, array = found
    return str(array if brackets else enum)


def missing_label(info: TableInfo, column: str, source: str) -> SinkFatal:
    """The stop for a label ``column``'s enum lacks; it names no label (values stay out of
    errors), only where and how to mend."""
    kind = info.columns.get(column, "the enum").removesuffix("[]")
    return SinkFatal(
        f"table {source} (target {info.schema}.{info.name}): column {column} is the target's "
        f"enum {kind}, which lacks a label the source wrote (the source's enum has labels the "
        f"target's has not). Add them on the target (ALTER TYPE {kind} ADD VALUE ...) and "
        f"restart the sink, or make the column text (ALTER TABLE {info.schema}.{info.name} "
        f"ALTER COLUMN {column} TYPE text) and restart; the other sinks go on"
    )


def _kept_as_text(source_type: str) -> bool:
    """A type the sink has no column type for (an enum, a domain, an extension's type)."""
    base = normalize_type(source_type).rstrip("[] ")
    return target_type(source_type).removesuffix("[]") == "text" and base not in (
        "text",
        "bpchar",
    )


def _unquoted(ident: str) -> str:
    if ident.startswith('"'):
        return ident[1:-1].replace('""', '"')
    return ident.lower()  # PostgreSQL folds an unquoted name
