"""A Redis cache: one string per row, its JSON, kept in sync under a version guard."""

from sinks.redis.config import RedisSinkConfig
from sinks.redis.plugin import RedisSinkPlugin
from sinks.redis.sink import RedisSink

__all__ = ["RedisSink", "RedisSinkConfig", "RedisSinkPlugin"]
