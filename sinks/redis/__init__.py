"""The Redis cache sink: one string per row (its JSON), written by a script under a version guard
that skips a replayed change; a batch's last call stores its consumed offsets."""

from typing import TYPE_CHECKING

from cdc.support.lazy import exports

if TYPE_CHECKING:
    from sinks.redis.config import RedisSinkConfig
    from sinks.redis.plugin import RedisSinkPlugin
    from sinks.redis.sink import RedisSink

__all__ = ["RedisSink", "RedisSinkConfig", "RedisSinkPlugin"]

# Imported when first used: a command that only reads the pipeline's file needs the config, not
# the client library behind the rest (cdc.support.lazy).
__getattr__ = exports(
    __name__,
    {
        "RedisSink": "sinks.redis.sink",
        "RedisSinkConfig": "sinks.redis.config",
        "RedisSinkPlugin": "sinks.redis.plugin",
    },
)
