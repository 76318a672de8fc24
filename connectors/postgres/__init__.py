"""The PostgreSQL source (the ``postgres`` plugin): logical replication with pgoutput, grouped by
job in replication/, pgoutput/, assembly/, types/, publication/, snapshot/ and doctor/."""

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
