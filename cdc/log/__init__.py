"""The log: interface and implementations."""

from cdc.log.base import (
    Consumer,
    Log,
    LogTransaction,
    Record,
    StoredRecord,
    TopicInfo,
    TopicPartition,
)
from cdc.log.embedded import EmbeddedLog

__all__ = [
    "Consumer",
    "EmbeddedLog",
    "Log",
    "LogTransaction",
    "Record",
    "StoredRecord",
    "TopicInfo",
    "TopicPartition",
]
