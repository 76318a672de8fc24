"""The Kafka transaction's produce loop against a real broker: every record of a large append
lands once, on its murmur2 partition, with its key, value and ``cdc.pos`` header, in order per
partition, whether the producer's local queue has room or is full (``BufferError``), across the
batches the loop serves delivery reports between, and with several topics interleaved."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from cdc.config.models import KafkaLogConfig
from cdc.log.base import Record
from cdc.log.kafka import KafkaLog
from cdc.log.partitioner import partition_for
from tests.unit.log_suite import key, new_topic, read_all

#: Over two of the loop's batches of delivery reports (cdc.log.kafka.txn._POLL_EVERY).
RECORDS = 2_500


@pytest.fixture
def open_log(kafka_server: Any) -> Iterator[Any]:
    opened: list[KafkaLog] = []

    def factory(**properties: str) -> KafkaLog:
        config = KafkaLogConfig(
            type="kafka",
            bootstrap_servers=kafka_server.bootstrap_servers,
            partitions=3,
            properties=properties,
        )
        log = KafkaLog(f"produce_{uuid.uuid4().hex[:10]}", config)
        opened.append(log)
        return log

    yield factory
    for log in opened:
        log.close()


def _records(many: str, single: str) -> list[Record]:
    """Two topics interleaved; every third record without a position; a truncate (no key)."""
    out = []
    for i in range(RECORDS):
        topic = single if i % 7 == 0 else many
        pos = None if i % 3 == 0 else b"[%d,0]" % i
        out.append(Record(topic, key(i), b"value %d" % i, pos))
    out.append(Record(many, None, b'{"op":"t"}', b"[9999,0]"))
    return out


@pytest.mark.parametrize(
    "properties",
    [{}, {"queue.buffering.max.messages": "64"}],  # a full local queue: produce waits for room
    ids=["room", "full-queue"],
)
def test_every_record_lands_once_with_its_header_on_its_partition(
    open_log: Any, properties: dict[str, str]
) -> None:
    log = open_log(**properties)
    many, single = new_topic(), new_topic()
    log.ensure_topics([many])
    _create_compacted(log.servers, single, 1)  # a one-partition topic beside a three-partition one
    records = _records(many, single)
    txn = log.begin()
    txn.append(records)
    txn.store_offsets({"pos": 1})
    txn.commit()
    stored = read_all(log, many) + read_all(log, single)
    assert len(stored) == len(records)
    sent = {(r.topic, r.key or b"{}"): r for r in records}
    for got in stored:
        want = sent.pop((got.topic, got.key))
        assert (got.value, got.pos) == (want.value, want.pos)
        partitions = 3 if got.topic == many else 1
        assert got.partition == partition_for(got.key, partitions)
    assert not sent
    for topic in (many, single):  # in append order within each partition
        for partition in log.end_offsets(topic):
            values = [r.value for r in log.read(topic, partition, 0, RECORDS * 2)]
            here = set(values)
            assert values == [r.value for r in records if r.topic == topic and r.value in here]


def _create_compacted(servers: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": servers})
    new = NewTopic(topic, partitions, 1, config={"cleanup.policy": "compact"})
    for future in admin.create_topics([new]).values():
        future.result(30)
