"""Entry point ``iceberg`` of ``cdc.sinks``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cdc.support import lazy
from sinks.iceberg.config import IcebergSinkConfig

# What writes to the store is imported by the method that needs it: a command that only reads
# the pipeline's file loads the config, not the store's client library.
if TYPE_CHECKING:
    from cdc.contracts.sink import SinkContext
    from sinks.iceberg.sink import IcebergSink


class IcebergSinkPlugin:
    """Builds :class:`IcebergSink`; :meth:`read_rows` reads a table back for ``cdc verify``,
    :meth:`read_consistent_position` the stored position for ``cdc status``."""

    config_model = IcebergSinkConfig
    # Its client library, imported when the sink runs: checked at load (cdc.contracts.plugins).
    requires = ("pyiceberg", "pyarrow")
    # One committer per table: on Kafka other workers stand by (cdc.runtime.standby). Several
    # would still be correct (each commit is checked by the catalog, docs/sinks/iceberg.md), but
    # they would only make each other retry; the commit check stays the fence of a paused leader.
    single_writer = True
    rows_decoded = True  # read_rows gives values by their meaning, not the envelope's encoding

    @staticmethod
    def create(config: IcebergSinkConfig, context: SinkContext) -> IcebergSink:
        from sinks.iceberg.sink import IcebergSink

        return IcebergSink(config, context)

    read_rows = lazy.Attribute("sinks.iceberg.reader", "read_rows")
    # cdc trace: one key's row and position
    read_key = lazy.Attribute("sinks.iceberg.trace", "read_key")
    # cdc doctor: reachable, pyiceberg, may create
    doctor = lazy.Attribute("sinks.iceberg.doctor", "doctor")
    # cdc status: the position stored in the namespace's properties (sinks.iceberg.position)
    read_consistent_position = lazy.Attribute("sinks.iceberg.reader", "read_consistent_position")
