"""Entry point ``opensearch`` of ``cdc.sinks``."""

from __future__ import annotations

from cdc.contracts.sink import SinkContext
from sinks.opensearch import doctor as preflight
from sinks.opensearch import reader
from sinks.opensearch import trace as key_trace
from sinks.opensearch.config import OpenSearchSinkConfig
from sinks.opensearch.sink import OpenSearchSink


class OpenSearchSinkPlugin:
    """Builds :class:`OpenSearchSink`; :meth:`read_rows` serves ``cdc verify``, :meth:`search`
    serves ``cdc search``."""

    config_model = OpenSearchSinkConfig

    @staticmethod
    def create(config: OpenSearchSinkConfig, context: SinkContext) -> OpenSearchSink:
        return OpenSearchSink(config, context)

    read_rows = staticmethod(reader.read_rows)
    read_key = staticmethod(key_trace.read_key)  # cdc trace: one key's row and position
    search = staticmethod(reader.search)
    # cdc status: the source position stored beside the offsets
    read_consistent_position = staticmethod(reader.read_consistent_position)
    doctor = staticmethod(preflight.doctor)  # cdc doctor: reachable, OpenSearch 2+, may create
