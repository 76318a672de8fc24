"""The ``opensearch`` sink: each source table kept as an OpenSearch index, one document a key,
written with the Bulk API under external versions derived from the source position."""

from sinks.opensearch.config import OpenSearchSinkConfig
from sinks.opensearch.plugin import OpenSearchSinkPlugin
from sinks.opensearch.sink import OpenSearchSink

__all__ = ["OpenSearchSink", "OpenSearchSinkConfig", "OpenSearchSinkPlugin"]
