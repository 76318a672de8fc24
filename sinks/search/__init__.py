"""An embedded full-text index (Tantivy) per table, documents keyed by primary key."""

from sinks.search.sink import SearchSink, SearchSinkConfig, SearchSinkPlugin

__all__ = ["SearchSink", "SearchSinkConfig", "SearchSinkPlugin"]
