"""Reading the indexes back: ``cdc verify`` (every document) and ``cdc search`` (a query).

``read_rows`` refreshes the index first, so it sees every write the cluster acknowledged;
``cdc search`` sees what the index's last refresh made visible (``refresh_interval``, 1 s by
default). Documents hold the rows as the records carry them (the envelope's encoding), so the
plugin does not set ``rows_decoded``: ``cdc verify`` decodes them as it decodes the log's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from opensearchpy import OpenSearch, helpers
from opensearchpy import exceptions as os_errors

from cdc.contracts.errors import SinkFatal
from sinks.opensearch.client import connect, reason, translate
from sinks.opensearch.config import OpenSearchSinkConfig
from sinks.opensearch.documents import source_row
from sinks.opensearch.offsets import read_position

_PAGE = 1000


def read_rows(
    config: OpenSearchSinkConfig, schema: str, table: str, *, pipeline: str | None = None
) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """Yield ``({"_id": id}, row)`` for every document of ``schema.table``'s index (nothing if
    the sink has not made it). ``pipeline`` names the index (its template may use it); verify
    takes the key columns from the row."""
    client = connect(config)
    try:
        name = config.index_name(pipeline or "", (schema, table))
        yield from _scan(client, name)
    except os_errors.NotFoundError:
        return
    except (os_errors.TransportError, os_errors.ImproperlyConfigured) as exc:
        raise translate(exc, config, f"reading {schema}.{table}") from None
    finally:
        client.close()


def read_consistent_position(config: OpenSearchSinkConfig, *, pipeline: str) -> str | None:
    """``cdc status``: the source position stored beside the sink's offsets (none: ``None``).

    Raises:
        SinkUnavailable, SinkFatal: the cluster cannot be read.
    """
    client = connect(config)
    try:
        return read_position(client, config.offsets_index, pipeline, config.name)
    except os_errors.NotFoundError:
        return None  # no offsets index yet
    except (os_errors.TransportError, os_errors.ImproperlyConfigured) as exc:
        raise translate(exc, config, "reading the stored position") from None
    finally:
        client.close()


def _scan(client: OpenSearch, name: str) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    # A search sees what the last refresh made visible; verify wants every acknowledged write.
    # A user who may read but not refresh reads what the refresh interval made visible.
    with contextlib.suppress(os_errors.AuthorizationException):
        client.indices.refresh(index=name)
    body = {"query": {"match_all": {}}, "sort": ["_doc"]}
    for hit in helpers.scan(client, query=body, index=name, size=_PAGE, scroll="2m"):
        yield {"_id": hit["_id"]}, source_row(hit["_source"])


def search(
    config: OpenSearchSinkConfig,
    schema: str,
    table: str,
    query: str,
    limit: int = 10,
    *,
    pipeline: str | None = None,
) -> list[dict[str, Any]]:
    """The rows of ``schema.table`` best matching ``query``, best first.

    ``query`` is OpenSearch's ``query_string`` syntax: bare words search every indexed field,
    ``column:value`` one column, ``AND``/``OR``/``-``, ``"phrases"``, ranges ``qty:[1 TO 5]``.

    Raises:
        SinkFatal: the table has no index, or the query is invalid.
    """
    client = connect(config)
    name = config.index_name(pipeline or "", (schema, table))
    body = {"query": {"query_string": {"query": query, "lenient": True}}, "size": limit}
    try:
        reply = client.search(index=name, body=body)
    except os_errors.NotFoundError:
        raise SinkFatal(f"opensearch: no index {name} for {schema}.{table}") from None
    except os_errors.RequestError as exc:
        raise SinkFatal(f"opensearch: invalid query {query!r}: {reason(exc)}") from None
    except os_errors.TransportError as exc:
        raise translate(exc, config, "searching") from None
    finally:
        client.close()
    return [source_row(hit["_source"]) for hit in reply["hits"]["hits"]]
