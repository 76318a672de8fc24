"""One key's document, for ``cdc trace``: its row and the position its external version packs
(:mod:`.versions`: ``position << 16 | sequence``; a sequence from 65535 on reads as 65535)."""

from __future__ import annotations

from typing import Any

from opensearchpy import exceptions as os_errors

from sinks.opensearch.client import connect, translate
from sinks.opensearch.config import OpenSearchSinkConfig
from sinks.opensearch.documents import doc_id, source_row
from sinks.opensearch.versions import SATURATED, SEQUENCE_BITS

KeyState = tuple[dict[str, Any] | None, tuple[int, int] | None]


def read_key(
    config: OpenSearchSinkConfig,
    schema: str,
    table: str,
    key: dict[str, Any],
    *,
    pipeline: str | None = None,
    any_type: bool = False,
) -> KeyState | None:
    """``(row, (position, sequence))`` of ``key``'s document, ``None`` if there is none (a
    delete leaves none to read: OpenSearch keeps its version only for ``gc_deletes``);
    ``any_type``: the table's key takes a value of any type (:func:`.documents.doc_id`)."""
    client = connect(config)
    try:
        name = config.index_name(pipeline or "", (schema, table))
        hit = client.get(index=name, id=doc_id(key, any_type))
    except os_errors.NotFoundError:
        return None
    except (os_errors.TransportError, os_errors.ImproperlyConfigured) as exc:
        raise translate(exc, config, f"reading a key of {schema}.{table}") from None
    finally:
        client.close()
    if not hit.get("found"):
        return None
    version = int(hit["_version"])
    if list(key) == ["_id"]:
        # A MongoDB document's version is its position alone, with no sequence: not comparable
        # with the log's (position, sequence), so the trace infers the version from the row.
        return source_row(hit["_source"]), None
    return source_row(hit["_source"]), (version >> SEQUENCE_BITS, version & SATURATED)
