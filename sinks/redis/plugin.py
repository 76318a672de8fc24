"""Entry point ``redis`` of ``cdc.sinks``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cdc.support import lazy
from sinks.redis.config import RedisSinkConfig

# What writes to the store is imported by the method that needs it: a command that only reads
# the pipeline's file loads the config, not the store's client library.
if TYPE_CHECKING:
    from cdc.contracts.sink import SinkContext
    from sinks.redis.sink import RedisSink


class RedisSinkPlugin:
    """Builds :class:`RedisSink`; :meth:`read_rows` reads a table back for ``cdc verify``."""

    config_model = RedisSinkConfig
    # Its client library, imported when the sink runs: checked at load (cdc.contracts.plugins).
    requires = ("redis",)
    rebuild_into = ("url",)  # cdc sink --rebuild --into: a copy in another database

    @staticmethod
    def create(config: RedisSinkConfig, context: SinkContext) -> RedisSink:
        from sinks.redis.sink import RedisSink

        return RedisSink(config, context)

    read_rows = lazy.Attribute("sinks.redis.reader", "read_rows")
    # cdc trace: one key's row and position
    read_key = lazy.Attribute("sinks.redis.trace", "read_key")
    # cdc doctor: PING, and a probe key's SET and DEL
    doctor = lazy.Attribute("sinks.redis.doctor", "doctor")
    # cdc status: the source position stored with the offsets
    read_consistent_position = lazy.Attribute("sinks.redis.position", "read_consistent_position")
