"""The DuckDB warehouse sink: a typed table per source table, upserted by key (optionally with
history), its offsets committed in the same DuckDB transaction as the data."""

from sinks.duckdb.config import DuckDBSinkConfig
from sinks.duckdb.plugin import DuckDBSinkPlugin
from sinks.duckdb.reader import read_rows
from sinks.duckdb.sink import DuckDBSink

__all__ = ["DuckDBSink", "DuckDBSinkConfig", "DuckDBSinkPlugin", "read_rows"]
