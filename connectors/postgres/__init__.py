"""PostgreSQL source: logical replication with pgoutput."""

from connectors.postgres.config import PostgresSourceConfig
from connectors.postgres.lifecycle import drop_replication_objects
from connectors.postgres.plugin import PostgresSourcePlugin
from connectors.postgres.source import PostgresSource

__all__ = [
    "PostgresSource",
    "PostgresSourceConfig",
    "PostgresSourcePlugin",
    "drop_replication_objects",
]
