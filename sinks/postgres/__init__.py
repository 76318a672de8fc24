"""The PostgreSQL sink (``type: postgres``): the source's tables, typed, kept current (optionally
with history) in a PostgreSQL database, merged by position, offsets in the same transaction."""

from sinks.postgres.config import PostgresSinkConfig
from sinks.postgres.plugin import PostgresSinkPlugin
from sinks.postgres.reader import read_rows
from sinks.postgres.sink import PostgresSink

__all__ = ["PostgresSink", "PostgresSinkConfig", "PostgresSinkPlugin", "read_rows"]
