"""Entry point ``iceberg`` of ``cdc.sinks``."""

from __future__ import annotations

from cdc.contracts.sink import SinkContext
from sinks.iceberg import doctor as preflight
from sinks.iceberg import reader
from sinks.iceberg import trace as key_trace
from sinks.iceberg.config import IcebergSinkConfig
from sinks.iceberg.sink import IcebergSink


class IcebergSinkPlugin:
    """Builds :class:`IcebergSink`; :meth:`read_rows` reads a table back for ``cdc verify``,
    :meth:`read_consistent_position` the stored position for ``cdc status``."""

    config_model = IcebergSinkConfig
    # One committer per table: on Kafka other workers stand by (cdc.runtime.standby). Several
    # would still be correct (each commit is checked by the catalog, docs/sinks/iceberg.md), but
    # they would only make each other retry; the commit check stays the fence of a paused leader.
    single_writer = True
    rows_decoded = True  # read_rows gives values by their meaning, not the envelope's encoding

    @staticmethod
    def create(config: IcebergSinkConfig, context: SinkContext) -> IcebergSink:
        return IcebergSink(config, context)

    read_rows = staticmethod(reader.read_rows)
    read_key = staticmethod(key_trace.read_key)  # cdc trace: one key's row and position
    doctor = staticmethod(preflight.doctor)  # cdc doctor: reachable, pyiceberg, may create
    # cdc status: the position stored in the namespace's properties (sinks.iceberg.position)
    read_consistent_position = staticmethod(reader.read_consistent_position)
