"""The search sink: an embedded full-text index (Tantivy) per table, documents keyed by primary
key, each holding its change's source position so that a replayed change is skipped."""

from sinks.search.config import SearchSinkConfig
from sinks.search.plugin import SearchSinkPlugin
from sinks.search.sink import SearchSink

__all__ = ["SearchSink", "SearchSinkConfig", "SearchSinkPlugin"]
