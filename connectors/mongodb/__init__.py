"""MongoDB source: change streams with resume tokens, snapshots in ``_id`` ranges."""

from connectors.mongodb.config import MongoSourceConfig
from connectors.mongodb.plugin import MongoSourcePlugin
from connectors.mongodb.source import MongoSource

__all__ = ["MongoSource", "MongoSourceConfig", "MongoSourcePlugin"]
