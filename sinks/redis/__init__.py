"""A Redis cache: one string per row, its JSON, kept in sync under a version guard."""

from sinks.redis.sink import RedisSink, RedisSinkConfig, RedisSinkPlugin

__all__ = ["RedisSink", "RedisSinkConfig", "RedisSinkPlugin"]
