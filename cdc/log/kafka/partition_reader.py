"""Reading partitions of the Kafka log without a consumer group: from an offset, or whole."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaPartition

from cdc.contracts.errors import LogUnavailable
from cdc.log.base import StoredRecord
from cdc.log.kafka.brokerless import RenewedClient
from cdc.log.kafka.common import translated
from cdc.log.kafka.messages import MAX_CONSUME, RecordsCallback, records_of
from cdc.support.logging import get_logger

_READ_TIMEOUT_S = 20.0
#: How long the metadata of a topic new to the reader's consumer may take to arrive.
_METADATA_TIMEOUT_S = 10.0

_logger = get_logger(component="kafka_log")


def _scanned(topic: str, messages: Sequence[Any], todo: dict[int, int]) -> list[StoredRecord]:
    """The records of ``messages`` below each partition's end; a partition is done (dropped
    from ``todo``) at its end or at its EOF event."""
    out = []
    for msg in messages:
        if msg.topic() != topic:
            continue
        err = msg.error()
        if err is not None and err.code() == KafkaError._PARTITION_EOF:
            todo.pop(msg.partition(), None)
            continue
        for record in records_of([msg]):
            end = todo.get(record.partition)
            if end is None:
                continue
            if record.offset < end:
                out.append(record)
            if record.offset >= end - 1:
                del todo[record.partition]
    return out


class PartitionReader:
    """Reads one partition from an offset with an assigned consumer: no group, no commits.

    One consumer serves every read (creating one costs a broker round trip or two); a lock makes
    reads from several threads take turns.
    """

    def __init__(self, config: dict[str, Any]) -> None:
        self._servers = str(config.get("bootstrap.servers"))
        self._renewed = RenewedClient(Consumer, config, "partition_reader")
        self._consumer = self._renewed.current()
        self._lock = threading.Lock()
        #: Topics whose metadata the current consumer holds (see :meth:`_assign`).
        self._known: set[str] = set()

    def read(
        self, topic: str, partition: int, offset: int, max_records: int, end: int
    ) -> list[StoredRecord]:
        """Records from ``offset`` on, at most ``max_records``, stopping at ``end`` (the LSO)."""
        if offset >= end or max_records <= 0:
            return []
        with self._lock, translated(f"reading {topic}[{partition}]", self._servers):
            self._assign(topic, [KafkaPartition(topic, partition, offset)])
            try:
                return self._fetch(topic, partition, offset, max_records, end)
            finally:
                # Stop the background prefetch: it would hold memory for nobody.
                self._consumer.unassign()

    def scan(self, topic: str, ends: Mapping[int, int], batch: int, apply: RecordsCallback) -> None:
        """Hand every record of ``topic`` below ``ends`` (per partition, the LSOs) to ``apply``,
        in lists of at most ``batch``, each partition in offset order: one pass over the whole
        topic, without the round trips of a :meth:`read` per batch.
        """
        todo = {partition: end for partition, end in ends.items() if end > 0}
        if not todo:
            return
        with self._lock, translated(f"reading {topic}", self._servers):
            self._assign(topic, [KafkaPartition(topic, p, 0) for p in todo])
            try:
                self._scan(topic, todo, min(batch, MAX_CONSUME), apply)
            finally:
                self._consumer.unassign()

    def _assign(self, topic: str, partitions: list[KafkaPartition]) -> None:
        """Assign ``partitions`` of ``topic`` to the current consumer, its metadata asked for
        first when the consumer has not read the topic yet.

        librdkafka asks for the metadata of a topic new to a consumer only at its next scan of
        its topics, once a second: a first read of each topic waited about 1 s for it (``cdc
        status`` on Kafka read a dozen topics in 3 s, a fence waited on it). Asked for here, it
        is one round trip.
        """
        consumer = self._renewed.current()
        if consumer is not self._consumer:
            self._known.clear()  # a renewed client knows nothing yet
        self._consumer = consumer
        if topic not in self._known:
            consumer.list_topics(topic, timeout=_METADATA_TIMEOUT_S)
            self._known.add(topic)
        consumer.assign(partitions)

    def _scan(self, topic: str, todo: dict[int, int], batch: int, apply: RecordsCallback) -> None:
        deadline = time.monotonic() + _READ_TIMEOUT_S
        while todo:
            messages = self._consumer.consume(batch, 0.2)
            if not messages:
                if time.monotonic() > deadline:
                    raise LogUnavailable(
                        f"kafka log ({self._servers}): no answer reading {topic} within "
                        f"{_READ_TIMEOUT_S:.0f} s"
                    )
                continue
            deadline = time.monotonic() + _READ_TIMEOUT_S
            out = _scanned(topic, messages, todo)
            if out:
                apply(out)

    def _fetch(
        self, topic: str, partition: int, offset: int, max_records: int, end: int
    ) -> list[StoredRecord]:
        out: list[StoredRecord] = []
        deadline = time.monotonic() + _READ_TIMEOUT_S
        while len(out) < max_records:
            first = self._consumer.poll(0.2)
            if first is None:
                if time.monotonic() > deadline:
                    raise LogUnavailable(
                        f"kafka log ({self._servers}): no answer reading {topic}[{partition}] "
                        f"within {_READ_TIMEOUT_S:.0f} s"
                    )
                continue
            batch = [first, *self._consumer.consume(min(max_records, MAX_CONSUME), 0)]
            for msg in batch:
                if msg.topic() != topic or msg.partition() != partition:
                    continue
                err = msg.error()
                if err is not None and err.code() == KafkaError._PARTITION_EOF:
                    return out[:max_records]
                for record in records_of([msg]):
                    if record.offset >= offset:
                        out.append(record)
            if out and out[-1].offset >= end - 1:
                break
        return out[:max_records]

    def close(self) -> None:
        """Close the reader's consumer (it never joined a group: nothing to leave)."""
        with self._lock:
            try:
                self._consumer.close()
            except (KafkaException, RuntimeError) as exc:
                _logger.warning("kafka.reader_close_failed", error=str(exc))
