"""The MongoDB source (the ``mongodb`` plugin): change streams resumed from points stored in the
log, a snapshot in ``_id`` ranges, and records in the shapes of Debezium's MongoDB connector."""

from typing import TYPE_CHECKING

from cdc.support.lazy import exports

if TYPE_CHECKING:
    from connectors.mongodb.config import MongoSourceConfig
    from connectors.mongodb.plugin import MongoSourcePlugin
    from connectors.mongodb.source import MongoSource

__all__ = ["MongoSource", "MongoSourceConfig", "MongoSourcePlugin"]

# Imported when first used: a command that only reads the pipeline's file needs the config, not
# the client library behind the rest (cdc.support.lazy).
__getattr__ = exports(
    __name__,
    {
        "MongoSource": "connectors.mongodb.source",
        "MongoSourceConfig": "connectors.mongodb.config",
        "MongoSourcePlugin": "connectors.mongodb.plugin",
    },
)
