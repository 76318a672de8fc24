"""The search sink: an embedded full-text index (Tantivy) per table, documents keyed by primary
key, each holding its change's source position so that a replayed change is skipped."""

from typing import TYPE_CHECKING

from cdc.support.lazy import exports

if TYPE_CHECKING:
    from sinks.search.config import SearchSinkConfig
    from sinks.search.plugin import SearchSinkPlugin
    from sinks.search.sink import SearchSink

__all__ = ["SearchSink", "SearchSinkConfig", "SearchSinkPlugin"]

# Imported when first used: a command that only reads the pipeline's file needs the config, not
# the client library behind the rest (cdc.support.lazy).
__getattr__ = exports(
    __name__,
    {
        "SearchSink": "sinks.search.sink",
        "SearchSinkConfig": "sinks.search.config",
        "SearchSinkPlugin": "sinks.search.plugin",
    },
)
