"""The log between the source and the sinks: the :class:`Log` interface (keyed, compacted topics,
consumer groups, records and source offsets in one transaction), embedded or on Kafka."""

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
