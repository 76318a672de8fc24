"""A record the producer reports delivered at no offset aborts the Kafka transaction.

Seen against the real broker (rarely, in tests/integration/test_kafka_log.py): a delivery
report without error or offset, and the record absent after the commit. The broker cannot be
made to do it on demand, so the producer here is a stand-in that reports it; the transaction
code under test is the real one.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from cdc.contracts.errors import LogUnavailable
from cdc.log.base import Record
from cdc.log.kafka.common import ConnectionWatch
from cdc.log.kafka.txn import KafkaTransaction


class FakeMessage:
    def __init__(self, topic: str, key: bytes | None, offset: int | None) -> None:
        self._topic, self._key, self._offset = topic, key, offset

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return 0

    def key(self) -> bytes | None:
        return self._key

    def offset(self) -> int | None:
        return self._offset


class FakeProducer:
    """Delivers on flush; the record keyed ``unplaced`` comes back at no offset."""

    def __init__(self) -> None:
        self.pending: list[tuple[Any, FakeMessage]] = []
        self.calls: list[str] = []
        self.next_offset = 0

    def begin_transaction(self) -> None:
        self.calls.append("begin")

    def produce(  # confluent-kafka's signature: the transaction passes these by position
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int = -1,
        callback: Any = None,
        on_delivery: Any = None,
        timestamp: int = 0,
        headers: Any = None,
    ) -> None:
        offset = None if key == b"unplaced" else self.next_offset
        self.next_offset += 1
        self.pending.append((callback or on_delivery, FakeMessage(topic, key, offset)))

    def poll(self, timeout: float) -> int:
        return 0

    def flush(self, timeout: float) -> int:
        for callback, message in self.pending:
            callback(None, message)
        self.pending.clear()
        return 0

    def commit_transaction(self, timeout: float) -> None:
        self.calls.append("commit")

    def abort_transaction(self, timeout: float) -> None:
        self.calls.append("abort")


class FakeWriter:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.owner: int | None = None
        self.timeout_s = 5.0
        self.servers = "fake:9092"
        self.fake = FakeProducer()
        self.watch = ConnectionWatch("producer")

    def producer(self) -> FakeProducer:
        return self.fake

    def discard(self) -> None:
        pass


class FakeLog:
    offsets_topic = "p.__offsets"
    visible: list[dict[tuple[str, int], int]] = []

    def prepare(self, records: list[Record]) -> dict[str, int]:
        return {r.topic: 0 for r in records}

    def wait_visible(self, last: dict[tuple[str, int], int]) -> None:
        self.visible.append(dict(last))


def _transaction(writer: FakeWriter) -> KafkaTransaction:
    return KafkaTransaction(FakeLog(), writer)  # type: ignore[arg-type]


def test_a_record_delivered_at_no_offset_aborts_instead_of_committing() -> None:
    writer = FakeWriter()
    tx = _transaction(writer)
    tx.append([Record("t", b"placed", b"1"), Record("t", b"unplaced", b"2")])
    tx.store_offsets({"n": 1})
    with pytest.raises(LogUnavailable, match="no offset"):
        tx.commit()
    assert writer.fake.calls == ["begin", "abort"]  # never committed
    assert not writer.lock.locked()  # the next transaction can begin


def test_records_delivered_at_their_offsets_commit() -> None:
    writer = FakeWriter()
    tx = _transaction(writer)
    tx.append([Record("t", b"a", b"1"), Record("t", b"b", b"2")])
    tx.commit()
    assert writer.fake.calls == ["begin", "commit"]
