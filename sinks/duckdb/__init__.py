"""The DuckDB warehouse sink: typed tables upserted by key, offsets kept with the data."""

from sinks.duckdb.config import DuckDBSinkConfig
from sinks.duckdb.plugin import DuckDBSinkPlugin
from sinks.duckdb.reader import read_rows
from sinks.duckdb.sink import DuckDBSink

__all__ = ["DuckDBSink", "DuckDBSinkConfig", "DuckDBSinkPlugin", "read_rows"]
