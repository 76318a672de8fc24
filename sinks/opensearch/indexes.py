"""Each table's index: created from its published schema, its mapping extended as the schema
grows, dropped and created again by a truncate or a reset.

The index's mapping ``_meta.cdc`` records the position of the table's last truncate
(``truncated``): a change no newer than it, replayed after the truncate, is not written (the
truncate dropped the index, and with it the versions that would have refused it).
"""

from __future__ import annotations

import contextlib
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


def settings(config: OpenSearchSinkConfig) -> dict[str, Any]:
    out: dict[str, Any] = {
        "number_of_shards": config.shards,
        "gc_deletes": config.gc_deletes,
    }
    if config.replicas is not None:
        out["number_of_replicas"] = config.replicas
    return out


def load(client: OpenSearch, name: str) -> tuple[bool, Pos | None]:
    """Whether index ``name`` exists, and its truncate watermark."""
    try:
        reply = client.indices.get_mapping(index=name)
    except os_errors.NotFoundError:
        return False, None
    found: dict[str, Any] = next(iter(reply.values()), {})
    mapping: dict[str, Any] = found.get("mappings", {})
    mark = mapping.get("_meta", {}).get("cdc", {}).get("truncated")
    return True, (int(mark[0]), int(mark[1])) if isinstance(mark, list) else None


def create(
    client: OpenSearch,
    config: OpenSearchSinkConfig,
    name: str,
    schema: TableSchema | None,
    options: EnvelopeOptions,
    watermark: Pos | None,
) -> None:
    """Create ``name``; one that exists already (another worker made it) is left as it is."""
    meta = {"cdc": {"truncated": list(watermark) if watermark is not None else None}}
    try:
        client.indices.create(index=name, body=index_body(schema, options, settings(config), meta))
    except os_errors.RequestError as exc:
        if "resource_already_exists_exception" not in reason(exc):
            raise


def evolve(
    client: OpenSearch, name: str, schema: TableSchema, options: EnvelopeOptions, sink: str
) -> None:
    """Add the schema's new columns to the mapping (a column's mapping never changes).

    Raises:
        SinkFatal: a column's type changed so that its mapping would (``cdc sink --reset-table``
            rebuilds the index).
    """
    try:
        client.indices.put_mapping(index=name, body={"properties": properties(schema, options)})
    except os_errors.RequestError as exc:
        table = f"{schema.schema}.{schema.table}"
        raise SinkFatal(
            f"OpenSearch sink {sink}: the mapping of index {name} cannot follow {table}'s new "
            f"schema ({reason(exc)}); rebuild it with `cdc sink FILE {sink} --reset-table "
            f"{table}`"
        ) from exc


def drop(client: OpenSearch, name: str) -> None:
    with contextlib.suppress(os_errors.NotFoundError):
        client.indices.delete(index=name)
