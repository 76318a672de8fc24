"""A sink's consumer whose librdkafka client knows no broker any more is replaced by one that
bootstraps again, and the sink reads on from its last commit.

A broker that shuts down cleanly answers metadata without itself and librdkafka then drops it:
a client of a one-broker cluster is left with no broker and never bootstraps again
(confluentinc/librdkafka#5301). Whether that answer reaches a client during a shutdown is a
race (about one clean restart in seven in the e2e outage test), so here the client's statistics
report is fed the state the race leaves (only the group coordinator's logical handle) — the
one stand-in in this test: the broker, the group, the commits and the new client are real.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, MutableMapping
from typing import Any

import orjson
import pytest
import structlog

from cdc.contracts.errors import LogUnavailable
from cdc.log.base import Record
from cdc.log.kafka import KafkaLog
from cdc.log.kafka import brokerless as kafka_brokerless
from cdc.log.kafka import consumer as kafka_consumer
from tests.integration.test_kafka_commit_outage import next_offsets, poll_until
from tests.integration.test_kafka_log import kafka_config
from tests.unit.log_suite import append, key, new_topic

#: A statistics report of a client that knows no broker: librdkafka keeps only the logical
#: handle of the group coordinator, without an address.
BROKERLESS = orjson.dumps({"brokers": {"GroupCoordinator": {"source": "logical", "nodeid": -1}}})


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[MutableMapping[str, Any]]]:
    with structlog.testing.capture_logs() as logs:
        monkeypatch.setattr(kafka_consumer, "_logger", structlog.get_logger())
        yield logs


@pytest.fixture
def log(kafka_server: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[KafkaLog]:
    # The clients' own reports would overwrite the one fed in (every 5 s in the product): here
    # they report once an hour, so only the fed-in report counts.
    monkeypatch.setattr(kafka_brokerless, "STATS_INTERVAL_MS", 3_600_000)
    opened = KafkaLog(
        f"rejoin_{uuid.uuid4().hex[:10]}", kafka_config(kafka_server.bootstrap_servers)
    )
    yield opened
    opened.close()


def strand(consumer: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Leave the consumer's client as the race does: its next reports name no broker."""
    monkeypatch.setattr(kafka_brokerless, "STUCK_AFTER_S", 0.0)
    consumer._brokerless.on_stats(BROKERLESS.decode())


def test_a_brokerless_client_is_replaced_and_reading_resumes_from_the_last_commit(
    log: KafkaLog, captured: list[MutableMapping[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = new_topic()
    log.ensure_topics([topic])
    append(log, [Record(topic, key(i), b"%d" % i) for i in range(10)])
    consumer = log.consumer(f"sink-{uuid.uuid4().hex[:8]}", [topic])
    try:
        first = poll_until(consumer, 10, 4)
        assert sorted(int(r.value) for r in first) == list(range(10))
        consumer.commit(next_offsets(first[:6]))  # the last four applied but not committed
        old = consumer._consumer
        strand(consumer, monkeypatch)
        again = poll_until(consumer, 4, 100)
        assert consumer._consumer is not old
        # The new member reads from the last commit: what was not committed comes again.
        assert sorted(r.value for r in again) == sorted(r.value for r in first[6:])
        consumer.commit(next_offsets(again))
        append(log, [Record(topic, key(10), b"10")])
        assert [r.value for r in poll_until(consumer, 1, 100)] == [b"10"]
    finally:
        consumer.close()
    rejoins = [e for e in captured if e["event"] == "kafka.consumer_rejoining"]
    assert len(rejoins) == 1 and rejoins[0]["reason"] == "the client knows no broker"


def test_a_commit_waiting_on_a_brokerless_client_fails_and_the_retry_lands(
    log: KafkaLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = new_topic()
    log.ensure_topics([topic])
    append(log, [Record(topic, key(i), b"%d" % i) for i in range(3)])
    consumer = log.consumer(f"sink-{uuid.uuid4().hex[:8]}", [topic])
    try:
        records = poll_until(consumer, 3, 100)
        strand(consumer, monkeypatch)
        # The stuck client is noticed while the commit waits: the commit cannot be answered.
        with pytest.raises(LogUnavailable, match="knew no broker"):
            consumer.commit(next_offsets(records))
        # The old client's commit was sent before it was given up: it may have landed (this
        # broker is up) or not (the race's broker is gone). Either way the new member reads on
        # from the last commit, and the sink's retry lands.
        again: list[Any] = []
        deadline = time.monotonic() + 60
        while not consumer.assignment() and time.monotonic() < deadline:
            again += consumer.poll(100, 0.5)
        assert sorted(r.value for r in again) in ([], sorted(r.value for r in records))
        consumer.commit(next_offsets(records))
        assert log.committed_offsets(consumer._group) == next_offsets(records)
    finally:
        consumer.close()


def test_a_brokerless_admin_client_and_partition_reader_are_renewed(
    log: KafkaLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = new_topic()
    log.ensure_topics([topic])
    append(log, [Record(topic, key(i), b"%d" % i) for i in range(6)])
    ends = log.end_offsets(topic)
    [partition] = [p for p, end in ends.items() if end > 0][:1]
    first = log.read(topic, partition, 0, 100)
    admin, reader = log._admin._renewed, log._partition_reader()._renewed
    old_admin, old_reader = admin._client, reader._client
    monkeypatch.setattr(kafka_brokerless, "STUCK_AFTER_S", 0.0)
    with structlog.testing.capture_logs() as logs:
        monkeypatch.setattr(kafka_brokerless, "_logger", structlog.get_logger())
        admin._watch.on_stats(BROKERLESS.decode())
        reader._watch.on_stats(BROKERLESS.decode())
        # Both answer through new clients, which bootstrapped again.
        assert log.end_offsets(topic) == ends
        assert log.read(topic, partition, 0, 100) == first
    assert admin._client is not old_admin and reader._client is not old_reader
    renewed = sorted(e["client"] for e in logs if e["event"] == "kafka.client_renewed")
    assert renewed == ["admin", "partition_reader"]
