"""The PostgreSQL source (the ``postgres`` plugin): logical replication with pgoutput, grouped by
job in replication/, pgoutput/, assembly/, types/, publication/, snapshot/ and doctor/."""

from typing import TYPE_CHECKING

from cdc.support.lazy import exports

if TYPE_CHECKING:
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

# Imported when first used: a command that only reads the pipeline's file needs the config, not
# the client library behind the rest (cdc.support.lazy).
__getattr__ = exports(
    __name__,
    {
        "PostgresSource": "connectors.postgres.source",
        "PostgresSourceConfig": "connectors.postgres.config",
        "PostgresSourcePlugin": "connectors.postgres.plugin",
        "drop_replication_objects": "connectors.postgres.lifecycle",
    },
)
