"""Entry point ``postgres`` of ``cdc.sinks``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cdc.support import lazy
from sinks.postgres.config import PostgresSinkConfig

# What writes to the store is imported by the method that needs it: a command that only reads
# the pipeline's file loads the config, not the store's client library.
if TYPE_CHECKING:
    from cdc.contracts.sink import SinkContext
    from sinks.postgres.sink import PostgresSink


class PostgresSinkPlugin:
    """Builds :class:`PostgresSink`; :meth:`read_rows` reads a table back for ``cdc verify``."""

    config_model = PostgresSinkConfig
    # Its client library, imported when the sink runs: checked at load (cdc.contracts.plugins).
    requires = ("psycopg",)
    rebuild_into = ("dsn", "schema")  # cdc sink --rebuild --into: another database or schema
    rows_decoded = True  # read_rows gives values by their meaning, not the envelope's encoding

    @staticmethod
    def create(config: PostgresSinkConfig, context: SinkContext) -> PostgresSink:
        from sinks.postgres.sink import PostgresSink

        return PostgresSink(config, context)

    read_rows = lazy.Attribute("sinks.postgres.reader", "read_rows")
    # cdc trace: one key's row and position
    read_key = lazy.Attribute("sinks.postgres.trace", "read_key")
    # cdc doctor: reachable, version 14+, may create
    doctor = lazy.Attribute("sinks.postgres.doctor", "doctor")
    # cdc status: the source position stored with the offsets
    read_consistent_position = lazy.Attribute("sinks.postgres.offsets", "read_consistent_position")
