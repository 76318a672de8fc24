"""Index mappings from the pipeline's published table schemas.

Each column maps by its source type and the pipeline's envelope encoding (the documents hold
the values as the records carry them). Mappings are ``dynamic: false``: a field the schema does
not know is kept in ``_source`` but not indexed, so an odd value never makes a write fail. Dates
and numbers are ``ignore_malformed`` (``infinity``, a BC date, ``NaN`` stay in ``_source``,
unindexed). What cannot be searched usefully (JSON documents, bytes, unknown types) is stored
only (``enabled: false``, which takes any JSON value).
"""

from __future__ import annotations

from typing import Any, Final

from cdc.contracts.schema import TableSchema
from cdc.envelope.options import EnvelopeOptions
from cdc.records.values import normalize_type
from sinks.opensearch.documents import stored_name

_LONG: Final = frozenset({"smallint", "integer", "bigint", "int2", "int4", "int8", "oid"})
_DOUBLE: Final = frozenset({"real", "double precision", "float4", "float8"})
_DECIMAL: Final = frozenset({"numeric", "decimal", "money"})
_TEXT: Final = frozenset({"text", "character varying", "varchar", "character", "char", "citext"})
_KEYWORD: Final = frozenset(
    {"uuid", "inet", "cidr", "macaddr", "macaddr8", "name", "time", "timetz", "interval"}
)
_TEMPORAL: Final = frozenset({"date", "timestamp", "timestamptz"})
_STORED: Final = {"type": "object", "enabled": False}
TEXT: Final = {"type": "text", "fields": {"keyword": {"type": "keyword", "ignore_above": 256}}}


def base(type_name: str) -> str:
    """The type without modifiers, array brackets or time-zone words."""
    name = normalize_type(type_name).removesuffix("[]").split("(")[0].strip()
    name = name.replace(" without time zone", "").replace(" with time zone", "tz")
    return {"time withtz": "timetz", "timestamp withtz": "timestamptz"}.get(name, name)


def field(type_name: str, options: EnvelopeOptions) -> dict[str, Any]:
    """The mapping of one column (an array column maps as its element: OpenSearch fields take
    arrays as they are)."""
    kind = base(type_name)
    if kind in _LONG:
        return {"type": "long", "ignore_malformed": True}
    if kind in _DOUBLE:
        return {"type": "double", "ignore_malformed": True}
    if kind in _DECIMAL:
        if options.decimal_handling_mode == "precise":  # base64 of the unscaled bytes
            return dict(_STORED)
        return {"type": "double", "ignore_malformed": True}  # the text, coerced; _source exact
    if kind in ("boolean", "bool"):
        return {"type": "boolean"}
    if kind in _TEMPORAL:
        if options.time_precision_mode == "isostring":
            return {"type": "date", "ignore_malformed": True}
        return {"type": "long", "ignore_malformed": True}  # epoch days, ms or µs
    if kind in _TEXT:
        return dict(TEXT)
    if kind in _KEYWORD:
        return {"type": "keyword", "ignore_above": 1024}
    return dict(_STORED)


def properties(schema: TableSchema | None, options: EnvelopeOptions) -> dict[str, Any]:
    """The ``properties`` of a table's mapping (none without a published schema)."""
    if schema is None:
        return {}
    return {stored_name(c.name): field(c.type, options) for c in schema.columns}


def index_body(
    schema: TableSchema | None, options: EnvelopeOptions, settings: dict[str, Any], meta: Any
) -> dict[str, Any]:
    """The body of a create-index request."""
    return {
        "settings": settings,
        "mappings": {"dynamic": False, "_meta": meta, "properties": properties(schema, options)},
    }
