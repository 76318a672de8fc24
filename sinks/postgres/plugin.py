"""Entry point ``postgres`` of ``cdc.sinks``."""

from __future__ import annotations

from cdc.contracts.sink import SinkContext
from sinks.postgres import doctor as preflight
from sinks.postgres import offsets as stored
from sinks.postgres import reader
from sinks.postgres import trace as key_trace
from sinks.postgres.config import PostgresSinkConfig
from sinks.postgres.sink import PostgresSink


class PostgresSinkPlugin:
    """Builds :class:`PostgresSink`; :meth:`read_rows` reads a table back for ``cdc verify``."""

    config_model = PostgresSinkConfig
    rebuild_into = ("dsn", "schema")  # cdc sink --rebuild --into: another database or schema
    rows_decoded = True  # read_rows gives values by their meaning, not the envelope's encoding

    @staticmethod
    def create(config: PostgresSinkConfig, context: SinkContext) -> PostgresSink:
        return PostgresSink(config, context)

    read_rows = staticmethod(reader.read_rows)
    read_key = staticmethod(key_trace.read_key)  # cdc trace: one key's row and position
    doctor = staticmethod(preflight.doctor)  # cdc doctor: reachable, version 14+, may create
    # cdc status: the source position stored with the offsets
    read_consistent_position = staticmethod(stored.read_consistent_position)
