"""A sink's consumer commits while the broker is down: the commit gives up within its bound and
the consumer logs the outage meanwhile (a synchronous commit blocked 45 s and more, serving no
callback: no ``kafka.connection_lost``, and a stop waited on it). Records the consumer fetches
while a commit waits are returned by the next polls: no gap, no duplicate."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator, MutableMapping
from typing import Any

import pytest
import structlog

from cdc.contracts.errors import LogUnavailable
from cdc.log.base import Record, StoredRecord, TopicPartition
from cdc.log.kafka import KafkaLog
from cdc.log.kafka import commits as kafka_commits
from cdc.log.kafka import common as kafka_common
from cdc.log.kafka.consumer import KafkaConsumer
from cdc.runtime.pipeline import STOP_GRACE_S
from cdc.support.retry import Stopped
from tests.integration.test_kafka_log import kafka_config
from tests.services.kafka import outage
from tests.unit.log_suite import append, key, new_topic

#: The commit's bound in these tests (30 s in the product): long enough for librdkafka to report
#: the refused connections, short enough that a commit stuck in librdkafka exceeds it.
COMMIT_BOUND_S = 8.0


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[MutableMapping[str, Any]]]:
    with structlog.testing.capture_logs() as logs:
        # The modules' loggers were bound at import, before the capture was configured.
        monkeypatch.setattr(kafka_common, "_logger", structlog.get_logger())
        monkeypatch.setattr(kafka_commits, "_logger", structlog.get_logger())
        yield logs


@pytest.fixture
def log(kafka_server: Any) -> Iterator[KafkaLog]:
    opened = KafkaLog(
        f"commit_{uuid.uuid4().hex[:10]}", kafka_config(kafka_server.bootstrap_servers)
    )
    yield opened
    opened.close()


def next_offsets(records: list[StoredRecord]) -> dict[TopicPartition, int]:
    """The offsets to commit once ``records`` are done."""
    return {TopicPartition(r.topic, r.partition): r.offset + 1 for r in records}


def poll_until(consumer: KafkaConsumer, count: int, batch: int) -> list[StoredRecord]:
    out: list[StoredRecord] = []
    deadline = time.monotonic() + 60
    while len(out) < count and time.monotonic() < deadline:
        out += consumer.poll(batch, 0.5)
    return out


def test_a_commit_during_an_outage_is_bounded_and_the_outage_is_logged(
    kafka_server: Any,
    log: KafkaLog,
    captured: list[MutableMapping[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kafka_commits, "COMMIT_RETRY_S", COMMIT_BOUND_S)
    topic = new_topic()
    log.ensure_topics([topic])
    append(log, [Record(topic, key(i), b"%d" % i) for i in range(5)])
    group = f"sink-{uuid.uuid4().hex[:8]}"
    consumer = log.consumer(group, [topic])
    try:
        records = poll_until(consumer, 5, 100)
        assert len(records) == 5
        done = next_offsets(records)
        with outage(kafka_server):
            started = time.monotonic()
            with pytest.raises(LogUnavailable, match="committing consumer offsets"):
                consumer.commit(done)
            waited = time.monotonic() - started
            assert connection_events(captured) == ["kafka.connection_lost"]  # while it waited
            assert waited < COMMIT_BOUND_S + 2
        # Back. The outage outlasted the session (6 s), so librdkafka gave the partitions up:
        # the commit is dropped, and the records are read again (at-least-once).
        consumer.commit(done)
        dropped = [e for e in captured if e["event"] == "kafka.commit_dropped"]
        assert len(dropped) == 1 and "UNKNOWN_MEMBER_ID" in dropped[0]["reason"]
        replayed = poll_until(consumer, 5, 100)
        assert sorted(r.value or b"" for r in replayed) == [b"%d" % i for i in range(5)]
        assert connection_events(captured) == ["kafka.connection_lost", "kafka.connection_restored"]
        consumer.commit(next_offsets(replayed))
    finally:
        consumer.close()
    assert only_new_records(log, group, topic) == [b"5"]  # resumed after the commit


def connection_events(captured: list[MutableMapping[str, Any]]) -> list[str]:
    """The consumer's connection events (the log's producer has its own)."""
    return [
        e["event"]
        for e in captured
        if e["event"].startswith("kafka.connection_") and e.get("client") == "consumer"
    ]


def only_new_records(log: KafkaLog, group: str, topic: str) -> list[bytes | None]:
    """What ``group`` reads once one more record is appended: that record alone, when
    everything before it was committed."""
    consumer = log.consumer(group, [topic])
    try:
        append(log, [Record(topic, key(10_000), b"5")])
        return [r.value for r in poll_until(consumer, 1, 1000)]
    finally:
        consumer.close()


def test_records_fetched_while_a_commit_waits_are_returned_once_in_order(log: KafkaLog) -> None:
    topic = new_topic()
    log.ensure_topics([topic])
    count = 300
    append(log, [Record(topic, key(i), b"%d" % i) for i in range(count)])
    group = f"sink-{uuid.uuid4().hex[:8]}"
    consumer = log.consumer(group, [topic])
    seen: list[StoredRecord] = []
    pending_after_commit = 0
    try:
        deadline = time.monotonic() + 60
        while len(seen) < count and time.monotonic() < deadline:
            batch = consumer.poll(7, 0.5)  # far less than librdkafka prefetched
            if not batch:
                continue
            seen += batch
            consumer.commit(next_offsets(batch))
            # White-box: what the commit's wait fetched, waiting for the next poll.
            pending_after_commit += bool(consumer._pending)
        assert consumer.poll(100, 1.0) == []
    finally:
        consumer.close()
    assert sorted(int(r.value or b"") for r in seen) == list(range(count))  # no gap, no twice
    for partition in {r.partition for r in seen}:
        offsets = [r.offset for r in seen if r.partition == partition]
        assert offsets == sorted(offsets)  # each partition in offset order
    assert pending_after_commit > 0  # the waits did fetch records (else this tests nothing)
    assert only_new_records(log, group, topic) == [b"5"]  # all committed: none read twice


def test_a_stop_ends_a_commit_waiting_on_an_outage(kafka_server: Any, log: KafkaLog) -> None:
    """``cdc run`` stopped (SIGTERM) during an outage: the sink's commit gives up at once and
    the consumer closes within the pipeline's stop grace (a commit that waited out its 30 s
    made the stop unclean)."""
    topic = new_topic()
    log.ensure_topics([topic])
    append(log, [Record(topic, key(i), b"%d" % i) for i in range(5)])
    consumer = log.consumer(f"sink-{uuid.uuid4().hex[:8]}", [topic])
    try:
        records = poll_until(consumer, 5, 100)
        stop = threading.Event()
        stopped_at: list[float] = []

        def request_stop() -> None:
            stopped_at.append(time.monotonic())
            stop.set()

        with outage(kafka_server):
            timer = threading.Timer(1.0, request_stop)
            timer.start()
            with pytest.raises(Stopped):
                consumer.commit(next_offsets(records), stop)
            # Ended by the stop, not by the commit's own 30 s bound: measured from the stop
            # request, with half the stop grace left for the close (a loaded CI machine can
            # delay the timer's thread by a second, which a bound from the start counted).
            assert stopped_at and time.monotonic() - stopped_at[0] < STOP_GRACE_S / 2
            consumer.close()
            assert time.monotonic() - stopped_at[0] < STOP_GRACE_S  # the pipeline's grace
    finally:
        consumer.close()
