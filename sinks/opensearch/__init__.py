"""The ``opensearch`` sink: each source table kept as an OpenSearch index, one document a key,
written with the Bulk API under external versions derived from the source position."""

from typing import TYPE_CHECKING

from cdc.support.lazy import exports

if TYPE_CHECKING:
    from sinks.opensearch.config import OpenSearchSinkConfig
    from sinks.opensearch.plugin import OpenSearchSinkPlugin
    from sinks.opensearch.sink import OpenSearchSink

__all__ = ["OpenSearchSink", "OpenSearchSinkConfig", "OpenSearchSinkPlugin"]

# Imported when first used: a command that only reads the pipeline's file needs the config, not
# the client library behind the rest (cdc.support.lazy).
__getattr__ = exports(
    __name__,
    {
        "OpenSearchSink": "sinks.opensearch.sink",
        "OpenSearchSinkConfig": "sinks.opensearch.config",
        "OpenSearchSinkPlugin": "sinks.opensearch.plugin",
    },
)
