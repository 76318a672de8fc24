"""Consumed Kafka messages as the log interface's records."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import KafkaError

from cdc.contracts.errors import LogFatal
from cdc.log.base import StoredRecord
from cdc.log.kafka.common import POS_HEADER
from cdc.support.logging import get_logger

MAX_CONSUME = 10_000  # librdkafka's consume() refuses batches over a million

_logger = get_logger(component="kafka_log")

RecordsCallback = Callable[[list[StoredRecord]], None]


def stored(msg: Any) -> StoredRecord:
    """A consumed message as the log interface returns it, its position from the ``cdc.pos``
    header (``None`` for a record without one)."""
    pos = next((data for name, data in msg.headers() or () if name == POS_HEADER), None)
    return StoredRecord(
        msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(), msg.timestamp()[1], pos
    )


def records_of(messages: Sequence[Any]) -> list[StoredRecord]:
    """The records among ``messages``; error events are logged, a fatal one raised."""
    out = []
    for msg in messages:
        err = msg.error()
        if err is None:
            out.append(stored(msg))
        elif err.fatal():
            raise LogFatal(f"kafka log: consumer failed: {err.name()}: {err.str()}")
        elif err.code() != KafkaError._PARTITION_EOF:
            # Broker restarts and leader moves surface here; librdkafka reconnects by itself.
            _logger.warning("kafka.consumer_error", error=err.name(), detail=err.str())
    return out
