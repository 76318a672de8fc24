"""Entry point ``opensearch`` of ``cdc.sinks``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cdc.support import lazy
from sinks.opensearch.config import OpenSearchSinkConfig

# What writes to the store is imported by the method that needs it: a command that only reads
# the pipeline's file loads the config, not the store's client library.
if TYPE_CHECKING:
    from cdc.contracts.sink import SinkContext
    from sinks.opensearch.sink import OpenSearchSink


class OpenSearchSinkPlugin:
    """Builds :class:`OpenSearchSink`; :meth:`read_rows` serves ``cdc verify``, :meth:`search`
    serves ``cdc search``."""

    config_model = OpenSearchSinkConfig
    # Its client library, imported when the sink runs: checked at load (cdc.contracts.plugins).
    requires = ("opensearchpy",)

    @staticmethod
    def create(config: OpenSearchSinkConfig, context: SinkContext) -> OpenSearchSink:
        from sinks.opensearch.sink import OpenSearchSink

        return OpenSearchSink(config, context)

    read_rows = lazy.Attribute("sinks.opensearch.reader", "read_rows")
    # cdc trace: one key's row and position
    read_key = lazy.Attribute("sinks.opensearch.trace", "read_key")
    search = lazy.Attribute("sinks.opensearch.reader", "search")
    # cdc status: the source position stored beside the offsets
    read_consistent_position = lazy.Attribute("sinks.opensearch.reader", "read_consistent_position")
    # cdc doctor: reachable, OpenSearch 2+, may create
    doctor = lazy.Attribute("sinks.opensearch.doctor", "doctor")
