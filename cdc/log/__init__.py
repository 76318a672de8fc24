"""The log between the source and the sinks: the :class:`Log` interface (keyed, compacted topics,
consumer groups, records and source offsets in one transaction), embedded or on Kafka."""

from typing import TYPE_CHECKING

from cdc.log.base import (
    Consumer,
    Log,
    LogTransaction,
    Record,
    StoredRecord,
    TopicInfo,
    TopicPartition,
)
from cdc.support.lazy import exports

if TYPE_CHECKING:
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

# Imported when first used: a command that reads a pipeline's file (its config imports the
# record types) does not load the embedded log's store (cdc.support.lazy).
__getattr__ = exports(__name__, {"EmbeddedLog": "cdc.log.embedded"})
