"""Entry point ``opensearch`` of ``cdc.sinks``."""

from __future__ import annotations

from cdc.contracts.sink import SinkContext
from sinks.opensearch import doctor as preflight
from sinks.opensearch import reader
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
    search = staticmethod(reader.search)
    doctor = staticmethod(preflight.doctor)  # cdc doctor: reachable, OpenSearch 2+, may create
