"""Reading a table back out of Redis, for ``cdc verify``."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import orjson
import redis
from redis import exceptions as rx

from cdc.contracts.errors import SinkFatal
from sinks.keyed import Table
from sinks.redis.config import RedisSinkConfig
from sinks.redis.connection import SCAN_COUNT, as_str, connect, translate
from sinks.redis.script import Layout

Rows = Iterator[tuple[dict[str, Any], dict[str, Any]]]


def read_rows(
    config: RedisSinkConfig,
    schema: str,
    table: str,
    *,
    pipeline: str | None = None,
    key_columns: Sequence[str] | None = None,
) -> Rows:
    """Every row the sink holds for ``schema.table`` as ``(key, row)``, for ``cdc verify``.

    Args:
        config: the sink's config.
        schema: schema of the table.
        table: table name.
        pipeline: the pipeline name, the key prefix when ``config.key_prefix`` is unset; when
            neither is given, the prefix is found from the sink's offsets hash.
        key_columns: build each key from these columns of the row; when ``None`` the key is
            ``{"key": "<key values joined by ':'>"}``, as in the Redis key.

    Raises:
        SinkFatal: the prefix is not given and several prefixes hold this sink's offsets.
        SinkUnavailable: Redis cannot be reached.
    """
    client = connect(config)
    try:
        prefix = config.key_prefix or pipeline or _find_prefix(client, config.name)
        if prefix is None:
            return  # the sink never stored a batch: it holds no rows
        yield from _table_rows(client, Layout(prefix), (schema, table), key_columns)
    except rx.RedisError as exc:
        raise translate(exc, config) from exc
    finally:
        client.close()


def _table_rows(
    client: redis.Redis, layout: Layout, table: Table, key_columns: Sequence[str] | None
) -> Rows:
    rows = layout.rows(table)
    # Every row key under the table's prefix, not only those the sink's positions hash names:
    # a row written into Redis by something else is in the cache too, and verify must see it.
    for suffixes in _row_suffixes(client, rows):
        for suffix, value in zip(suffixes, client.mget([rows + s for s in suffixes]), strict=True):
            if value is not None:  # a deleted row's position marker
                row: dict[str, Any] = orjson.loads(value)
                key = (
                    {"key": suffix} if key_columns is None else {c: row.get(c) for c in key_columns}
                )
                yield key, row


def _row_suffixes(client: redis.Redis, rows: str) -> Iterator[list[str]]:
    """The key suffixes of the row keys starting with ``rows``, a ``SCAN`` page at a time (a
    key may come twice: the comparison counts it once)."""
    cursor = 0
    pattern = _glob_escape(rows) + "*"
    while True:
        cursor, found = client.scan(cursor, match=pattern, count=SCAN_COUNT)
        if found:
            yield [as_str(key)[len(rows) :] for key in found]
        if cursor == 0:
            return


def _find_prefix(client: redis.Redis, sink_name: str) -> str | None:
    """The key prefix whose offsets hash belongs to ``sink_name`` (a keyspace ``SCAN``)."""
    marker = Layout("").offsets(sink_name)  # ":__offsets:<sink name>"
    found = {
        as_str(key).removesuffix(marker)
        for key in client.scan_iter(match="*" + _glob_escape(marker), count=SCAN_COUNT)
    }
    if len(found) > 1:
        raise SinkFatal(
            f"redis: sink {sink_name!r} has offsets under several key prefixes "
            f"({', '.join(sorted(found))}); set key_prefix"
        )
    return found.pop() if found else None


def _glob_escape(pattern: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in pattern)
