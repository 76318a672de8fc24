"""The fence and the sink's group offsets on a real Kafka log, where each transaction's commit
marker takes an offset of every partition it wrote.

A source's offsets here are ``{"pos": n}`` (a plain position), stored in the same transaction as
that step's records, as a source does. A sink's progress is its group's committed offsets, set
here with a plain consumer's commit where a test needs one exact offset.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaPartition

from cdc.config.models import KafkaLogConfig
from cdc.contracts.positions import Offsets
from cdc.fence import Fence, FenceTimeout
from cdc.log.base import Record, TopicPartition
from cdc.log.kafka import KafkaLog
from cdc.log.kafka import admin as admin_mod
from cdc.log.partitioner import partition_for
from cdc.testing import wait_until


def decode(offsets: Offsets) -> Any:
    return offsets.get("pos")


@pytest.fixture
def log(kafka_server: Any) -> Iterator[KafkaLog]:
    config = KafkaLogConfig(
        type="kafka",
        bootstrap_servers=kafka_server.bootstrap_servers,
        partitions=1,
        session_timeout_ms=6000,
    )
    log = KafkaLog(f"fence_{uuid.uuid4().hex[:10]}", config)
    yield log
    log.close()


def names(log: KafkaLog) -> tuple[str, str]:
    """A topic of the pipeline (created) and a sink group, new to the broker."""
    topic = f"{log.pipeline}.public.t"
    log.ensure_topics([topic])
    return topic, f"{log.pipeline}.sink.cache"


def write(
    log: KafkaLog, topic: str, key: bytes, pos: int | None = None, abort: bool = False
) -> int:
    """One record in a transaction of its own (with the source's position ``pos``); its
    offset."""
    before = log.end_offsets(topic)[0]
    txn = log.begin()
    txn.append([Record(topic, key, b"{}")])
    if pos is not None:
        txn.store_offsets({"pos": pos})
    if abort:
        txn.abort()
    else:
        txn.commit()
    return before


def set_committed(log: KafkaLog, group: str, topic: str, offset: int) -> None:
    """The sink's group has committed ``offset`` (it applied everything before it)."""
    consumer = Consumer({"bootstrap.servers": log.servers, "group.id": group})
    try:
        consumer.commit(offsets=[KafkaPartition(topic, 0, offset)], asynchronous=False)
    finally:
        consumer.close()


def test_a_fence_passes_the_commit_marker_after_the_sinks_last_record(log: KafkaLog) -> None:
    """The group committed the offset after its last record, where the commit marker sits (a
    sink task's commit before its consumer served the marker): nothing is left to apply, and
    the fence returns, where it once waited for the sink's idle commit past the marker."""
    topic, group = names(log)
    offset = write(log, topic, b"k1", pos=1)
    assert log.end_offsets(topic) == {0: offset + 2}  # the record, then its commit marker
    set_committed(log, group, topic, offset + 1)
    assert Fence(log, group, [topic]).wait(decode, 1, timeout_s=20) == 1


def test_a_fence_passes_an_aborted_transaction_but_not_a_record(log: KafkaLog) -> None:
    topic, group = names(log)
    first = write(log, topic, b"k1", pos=1)
    write(log, topic, b"k2", abort=True)  # its record and its abort marker
    second = write(log, topic, b"k3", pos=2)
    set_committed(log, group, topic, first + 1)
    fence = Fence(log, group, [topic])
    # The record of position 2 lies between the group's offset and the end: not applied yet.
    with pytest.raises(FenceTimeout, match="more record"):
        fence.wait(decode, 2, timeout_s=1)
    set_committed(log, group, topic, second)  # past the aborted transaction, not the record
    with pytest.raises(FenceTimeout, match="more record"):
        fence.wait(decode, 2, timeout_s=1)
    set_committed(log, group, topic, second + 1)
    assert fence.wait(decode, 2, timeout_s=20) == 2


def test_the_groups_offsets_are_read_on_one_kept_consumer_until_the_log_closes(
    log: KafkaLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each read of a group's offsets once opened a consumer (some 60 ms: it finds the group
    coordinator first); a fence reads them every poll."""
    opened: list[Any] = []

    class Counted(Consumer):  # type: ignore[misc]  # confluent-kafka's type is untyped
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            opened.append(self)

    monkeypatch.setattr(admin_mod, "Consumer", Counted)
    topic, group = names(log)
    other = f"{log.pipeline}.sink.search"
    offset = write(log, topic, b"k1", pos=1)
    set_committed(log, group, topic, offset + 1)
    fence = Fence(log, group, [topic])
    for _ in range(3):
        assert fence.wait(decode, 1, timeout_s=20) == 1
    for _ in range(3):
        assert log.committed_offsets(group) == {TopicPartition(topic, 0): offset + 1}
        assert log.committed_offsets(other) == {}
    assert len(opened) == 2  # one for each group
    log.close()
    for consumer in opened:
        with pytest.raises(RuntimeError):  # closed with the log
            consumer.committed([KafkaPartition(topic, 0)], timeout=1)


def test_a_sinks_commit_moves_its_other_partitions_past_their_markers(
    kafka_server: Any,
) -> None:
    """A partition whose last records are committed, and whose consumer has since served only
    the commit marker, moves past it with the member's next commit of another partition,
    without waiting for a poll that comes back empty (a busy sink's other partitions)."""
    config = KafkaLogConfig(
        type="kafka",
        bootstrap_servers=kafka_server.bootstrap_servers,
        partitions=2,
        session_timeout_ms=6000,
    )
    with KafkaLog(f"fence_{uuid.uuid4().hex[:10]}", config) as log:
        topic, group = f"{log.pipeline}.public.t", f"{log.pipeline}.sink.cache"
        log.ensure_topics([topic])
        keys = {partition_for(b"k%d" % i, 2): b"k%d" % i for i in range(20)}
        p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
        consumer = log.consumer(group, [topic])
        try:
            first = log.begin()
            first.append([Record(topic, keys[0], b"{}")])
            first.commit()
            (record,) = consumer.poll(10, 10.0)
            # The sink's commit before its consumer served the marker (as a sink task's may):
            consumer._commit({p0: record.offset + 1})
            native = consumer._consumer
            serves = KafkaPartition(topic, 0)
            # librdkafka serves the marker on its next call; nothing else is there to return.
            wait_until(
                lambda: (
                    native.poll(0.05) is None
                    and native.position([serves])[0].offset == record.offset + 2
                ),
                10,
                describe="the consumer to serve the commit marker",
            )
            assert log.committed_offsets(group)[p0] == record.offset + 1
            second = log.begin()
            second.append([Record(topic, keys[1], b"{}")])
            second.commit()
            (other,) = consumer.poll(10, 10.0)
            consumer.commit({p1: other.offset + 1})
            committed = log.committed_offsets(group)
            assert committed[p0] == record.offset + 2
            assert committed[p1] >= other.offset + 1
        finally:
            consumer.close()
