"""Reading back the source position the Redis sink stored with its offsets, for ``cdc status``.

The sink writes it in the script call that stores its offsets, as the offsets hash's field
:data:`~sinks.offsets.POSITION_FIELD` (:mod:`sinks.redis.sink`).
"""

from __future__ import annotations

from redis import exceptions as rx

from sinks.offsets import POSITION_FIELD
from sinks.redis.config import RedisSinkConfig
from sinks.redis.connection import as_str, connect, translate
from sinks.redis.script import Layout


def read_consistent_position(config: RedisSinkConfig, *, pipeline: str) -> str | None:
    """The stored position; ``None`` when none is.

    Raises:
        SinkUnavailable: Redis cannot be reached.
    """
    client = connect(config)
    try:
        offsets_key = Layout(config.key_prefix or pipeline).offsets(config.name)
        found = client.hget(offsets_key, POSITION_FIELD)
    except rx.RedisError as exc:
        raise translate(exc, config) from exc
    finally:
        client.close()
    return None if found is None else as_str(found)
