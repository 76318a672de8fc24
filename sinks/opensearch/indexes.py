"""Each table's index: created from its published schema, its mapping extended as the schema
grows, dropped and created again by a truncate or a reset.

The index's mapping ``_meta.cdc`` records the position of the table's last truncate
(``truncated``): a change no newer than it, replayed after the truncate, is not written (the
truncate dropped the index, and with it the versions that would have refused it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from opensearchpy import OpenSearch
from opensearchpy import exceptions as os_errors

from cdc.contracts.errors import SinkFatal
from cdc.contracts.schema import TableSchema
from cdc.envelope.options import EnvelopeOptions
from sinks.keyed import Pos
from sinks.opensearch.client import reason
from sinks.opensearch.config import OpenSearchSinkConfig
from sinks.opensearch.mappings import index_body, properties


@dataclass
class IndexState:
    """What the sink knows of one table's index."""

    name: str
    watermark: Pos | None
    schema: TableSchema | None
    columns: dict[str, int]
    """Column ids by name as the index's ``_meta`` records them (for telling renames)."""


def settings(config: OpenSearchSinkConfig) -> dict[str, Any]:
    out: dict[str, Any] = {
        "number_of_shards": config.shards,
        "gc_deletes": config.gc_deletes,
    }
    if config.replicas is not None:
        out["number_of_replicas"] = config.replicas
    return out


def load(client: OpenSearch, name: str) -> tuple[bool, Pos | None, dict[str, int]]:
    """Whether index ``name`` exists, its truncate watermark and its recorded column ids."""
    # ignore=404: a missing index is an answer here, not a failure for the client to log.
    reply = client.indices.get_mapping(index=name, params={"ignore": 404})
    if reply.get("status") == 404 and "error" in reply:
        return False, None, {}
    found: dict[str, Any] = next(iter(reply.values()), {})
    mapping: dict[str, Any] = found.get("mappings", {})
    cdc: dict[str, Any] = mapping.get("_meta", {}).get("cdc", {})
    mark = cdc.get("truncated")
    watermark = (int(mark[0]), int(mark[1])) if isinstance(mark, list) else None
    return True, watermark, {str(k): int(v) for k, v in (cdc.get("columns") or {}).items()}


def _meta(watermark: Pos | None, columns: dict[str, int]) -> dict[str, Any]:
    truncated = list(watermark) if watermark is not None else None
    return {"cdc": {"truncated": truncated, "columns": columns}}


def column_ids(schema: TableSchema | None) -> dict[str, int]:
    """Each column's id (PostgreSQL's attnum), which a rename keeps, by name."""
    if schema is None:
        return {}
    return {c.name: c.id for c in schema.columns if c.id is not None}


def create(
    client: OpenSearch,
    config: OpenSearchSinkConfig,
    name: str,
    schema: TableSchema | None,
    options: EnvelopeOptions,
    watermark: Pos | None,
) -> None:
    """Create ``name``; one that exists already (another worker made it) is left as it is."""
    meta = _meta(watermark, column_ids(schema))
    try:
        client.indices.create(index=name, body=index_body(schema, options, settings(config), meta))
    except os_errors.RequestError as exc:
        if "resource_already_exists_exception" not in reason(exc):
            raise


def evolve(
    client: OpenSearch,
    state: IndexState,
    schema: TableSchema,
    options: EnvelopeOptions,
    sink: str,
) -> None:
    """Add the schema's new columns to the mapping (a column's mapping never changes).

    Raises:
        SinkFatal: a column was renamed (a field cannot be renamed in place) or its type
            changed so that its mapping would; ``cdc sink --reset-table`` rebuilds the index.
    """
    table = f"{schema.schema}.{schema.table}"
    fix = f"rebuild it with `cdc sink FILE {sink} --reset-table {table}`"
    renamed = _renames(state.columns, schema)
    if renamed:
        raise SinkFatal(
            f"OpenSearch sink {sink}: {table} renamed {', '.join(renamed)}, and index "
            f"{state.name} cannot rename a field in place; {fix}"
        )
    columns = {**state.columns, **column_ids(schema)}
    body = {"_meta": _meta(state.watermark, columns), "properties": properties(schema, options)}
    try:
        client.indices.put_mapping(index=state.name, body=body)
    except os_errors.RequestError as exc:
        raise SinkFatal(
            f"OpenSearch sink {sink}: the mapping of index {state.name} cannot follow "
            f"{table}'s new schema ({reason(exc)}); {fix}"
        ) from exc
    state.columns = columns


def _renames(recorded: dict[str, int], schema: TableSchema) -> list[str]:
    """``old -> new`` for each column of ``schema`` recorded under another name."""
    by_id = {i: n for n, i in recorded.items()}
    out = []
    for column in schema.columns:
        old = by_id.get(column.id) if column.id is not None else None
        if old is not None and old != column.name:
            out.append(f"{old} -> {column.name}")
    return out


def drop(client: OpenSearch, name: str) -> None:
    client.indices.delete(index=name, params={"ignore": 404})
