"""The DuckDB warehouse sink: a typed table per source table, upserted by key (optionally with
history), its offsets committed in the same DuckDB transaction as the data."""

from typing import TYPE_CHECKING

from cdc.support.lazy import exports

if TYPE_CHECKING:
    from sinks.duckdb.config import DuckDBSinkConfig
    from sinks.duckdb.plugin import DuckDBSinkPlugin
    from sinks.duckdb.reader import read_rows
    from sinks.duckdb.sink import DuckDBSink

__all__ = ["DuckDBSink", "DuckDBSinkConfig", "DuckDBSinkPlugin", "read_rows"]

# Imported when first used: a command that only reads the pipeline's file needs the config, not
# the client library behind the rest (cdc.support.lazy).
__getattr__ = exports(
    __name__,
    {
        "DuckDBSink": "sinks.duckdb.sink",
        "DuckDBSinkConfig": "sinks.duckdb.config",
        "DuckDBSinkPlugin": "sinks.duckdb.plugin",
        "read_rows": "sinks.duckdb.reader",
    },
)
