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

__all__ = [
    "Consumer",
    "Log",
    "LogTransaction",
    "Record",
    "StoredRecord",
    "TopicInfo",
    "TopicPartition",
]
