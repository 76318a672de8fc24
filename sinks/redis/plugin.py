"""Entry point ``redis`` of ``cdc.sinks``."""

from __future__ import annotations

from cdc.contracts.sink import SinkContext
from sinks.redis import doctor as preflight
from sinks.redis import position as stored
from sinks.redis import reader
from sinks.redis import trace as key_trace
from sinks.redis.config import RedisSinkConfig
from sinks.redis.sink import RedisSink


class RedisSinkPlugin:
    """Builds :class:`RedisSink`; :meth:`read_rows` reads a table back for ``cdc verify``."""

    config_model = RedisSinkConfig
    rebuild_into = ("url",)  # cdc sink --rebuild --into: a copy in another database

    @staticmethod
    def create(config: RedisSinkConfig, context: SinkContext) -> RedisSink:
        return RedisSink(config, context)

    read_rows = staticmethod(reader.read_rows)
    read_key = staticmethod(key_trace.read_key)  # cdc trace: one key's row and position
    doctor = staticmethod(preflight.doctor)  # cdc doctor: PING, and a probe key's SET and DEL
    # cdc status: the source position stored with the offsets
    read_consistent_position = staticmethod(stored.read_consistent_position)
