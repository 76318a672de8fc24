"""The MongoDB source (the ``mongodb`` plugin): change streams resumed from points stored in the
log, a snapshot in ``_id`` ranges, and records in the shapes of Debezium's MongoDB connector."""

from connectors.mongodb.config import MongoSourceConfig
from connectors.mongodb.plugin import MongoSourcePlugin
from connectors.mongodb.source import MongoSource

__all__ = ["MongoSource", "MongoSourceConfig", "MongoSourcePlugin"]
