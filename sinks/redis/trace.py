"""One key's state in Redis, for ``cdc trace``: its row and the position the version guard
recorded for it (``<prefix>:__pos:<table>``, field ``<key suffix>``: ``<pos>:<offset>``, pos
``%020d%010d``; a deleted key keeps its field, without a row)."""

from __future__ import annotations

from typing import Any

import orjson
from redis import exceptions as rx

from sinks.keyed import key_suffix
from sinks.redis.config import RedisSinkConfig
from sinks.redis.connection import as_str, connect, translate
from sinks.redis.script import Layout

KeyState = tuple[dict[str, Any] | None, tuple[int, int] | None]


def read_key(
    config: RedisSinkConfig,
    schema: str,
    table: str,
    key: dict[str, Any],
    *,
    pipeline: str | None = None,
    any_type: bool = False,
) -> KeyState | None:
    """``(row, (position, sequence))`` of ``key`` (``key``'s columns in key order); ``(None,
    position)`` for a deleted key; ``None`` when Redis holds nothing of it. ``any_type``: the
    table's key takes a value of any type (:func:`sinks.keyed.key_suffix`)."""
    layout = Layout(config.key_prefix or pipeline or "")
    suffix = key_suffix(key, any_type)
    client = connect(config)
    try:
        value = client.get(layout.rows((schema, table)) + suffix)
        mark = client.hget(layout.positions((schema, table)), suffix)
    except rx.RedisError as exc:
        raise translate(exc, config) from exc
    finally:
        client.close()
    if value is None and mark is None:
        return None
    row = None if value is None else orjson.loads(value)
    return row, None if mark is None else parse_mark(as_str(mark))


def parse_mark(mark: str) -> tuple[int, int] | None:
    """``(position, sequence)`` of a guard's ``<pos>:<offset>`` (``None``: not that shape)."""
    pos = mark.partition(":")[0]
    if len(pos) != 30 or not pos.isdigit():
        return None
    return int(pos[:20]), int(pos[20:])
