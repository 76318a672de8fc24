"""The Redis cache sink: one string per row (its JSON), written by a script under a version guard
that skips a replayed change; a batch's last call stores its consumed offsets."""

from sinks.redis.config import RedisSinkConfig
from sinks.redis.plugin import RedisSinkPlugin
from sinks.redis.sink import RedisSink

__all__ = ["RedisSink", "RedisSinkConfig", "RedisSinkPlugin"]
