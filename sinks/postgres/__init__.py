"""The PostgreSQL sink (``type: postgres``)."""

from sinks.postgres.config import PostgresSinkConfig
from sinks.postgres.plugin import PostgresSinkPlugin
from sinks.postgres.reader import read_rows
from sinks.postgres.sink import PostgresSink

__all__ = ["PostgresSink", "PostgresSinkConfig", "PostgresSinkPlugin", "read_rows"]
