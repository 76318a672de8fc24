"""Reading the indexes without writing them: ``cdc verify`` and ``cdc search``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from cdc.contracts.errors import SinkFatal
from sinks.search.config import SearchSinkConfig, table_dir
from sinks.search.index import live_rows, open_reader, search_rows


def read_rows(
    config: SearchSinkConfig, schema: str, table: str, *, pipeline: str | None = None
) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """Every row the index of ``schema.table`` holds as ``(key, row)``, for ``cdc verify``.

    A table never written has no index: it holds no rows. ``pipeline`` is not needed: the
    index directory is the sink's own.
    """
    path = table_dir(config, schema, table)
    if not path.exists():
        return iter(())
    return live_rows(open_reader(path))


def search(
    config: SearchSinkConfig,
    schema: str,
    table: str,
    query: str,
    limit: int = 10,
    *,
    pipeline: str | None = None,  # not needed: the index directory is the sink's own
) -> list[dict[str, Any]]:
    """The rows of ``schema.table`` best matching ``query``, best first.

    ``query`` is Tantivy's query language: bare words search the table's text columns,
    ``row.<column>:value`` one column (any type), ``AND``/``OR``/``-``, ``"phrases"``.

    Raises:
        SinkFatal: the table has no index under ``config.path``, or the query is invalid.
    """
    path = table_dir(config, schema, table)
    if not path.exists():
        raise SinkFatal(f"search: no index for {schema}.{table} under {config.path}")
    try:
        return search_rows(open_reader(path), query, limit)
    except ValueError as exc:
        raise SinkFatal(f"search: invalid query {query!r}: {exc}") from exc
