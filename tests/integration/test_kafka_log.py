"""The Kafka log against a real broker: the shared conformance suite, plus Kafka's own concerns
(compacted topic configs, compaction, Java's partitioner, fencing, size limits, an unreachable
broker)."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from cdc.config.models import KafkaLogConfig
from cdc.contracts.errors import LogFatal, LogUnavailable, RecordTooLarge
from cdc.contracts.events import topic_name
from cdc.contracts.schema import dead_letter_topic
from cdc.contracts.source import SourceBatch
from cdc.log.base import Record
from cdc.log.kafka import KafkaLog
from cdc.log.partitioner import partition_for
from cdc.runtime.source_task import BadRecordStop, SourceTask
from cdc.support.logging import get_logger
from cdc.testing import ScriptedSource, make_event, wait_until
from tests.services.ports import free_port
from tests.unit.log_suite import LogSuite, append, key, new_topic, read_all

KafkaFactory = Callable[..., KafkaLog]
SUITE_GROUPS = ("sink", "sink-a", "sink-b", "watcher")


def kafka_config(bootstrap: str, **fields: Any) -> KafkaLogConfig:
    fields.setdefault("session_timeout_ms", 6000)
    return KafkaLogConfig(type="kafka", bootstrap_servers=bootstrap, **fields)


@pytest.fixture
def log_factory(kafka_server: Any) -> Iterator[KafkaFactory]:
    """Opens the same pipeline's log each time it is called within one test."""
    pipeline = f"suite_{uuid.uuid4().hex[:10]}"
    opened: list[KafkaLog] = []
    # The suite names its groups plainly; on a shared broker, a previous run's commits remain.
    admin = AdminClient({"bootstrap.servers": kafka_server.bootstrap_servers})
    for future in admin.delete_consumer_groups(list(SUITE_GROUPS)).values():
        with contextlib.suppress(Exception):
            future.result()

    def open_log(partitions: int = 1, **fields: Any) -> KafkaLog:
        config = kafka_config(kafka_server.bootstrap_servers, partitions=partitions, **fields)
        log = KafkaLog(pipeline, config)
        opened.append(log)
        return log

    yield open_log
    for log in opened:
        log.close()


def topic_configs(bootstrap: str, topic: str) -> dict[str, str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)])
    return {k: v.value for k, v in next(iter(futures.values())).result().items()}


class TestKafkaLogConformance(LogSuite):
    """The suite every log passes, plus what Kafka does differently: a transaction's commit
    marker takes one offset in every partition the transaction wrote, and a key cannot be
    looked up without a state directory and ``keep_latest`` (the suite would skip that test;
    here it must raise; tests/integration/test_kafka_images.py covers look-ups)."""

    def test_each_transaction_leaves_one_marker_offset(self, log_factory: KafkaFactory) -> None:
        topic = new_topic()
        log = log_factory()
        log.ensure_topics([topic])
        append(log, [Record(topic, key(i), b"a") for i in range(5)])
        log.close()
        log = log_factory()
        append(log, [Record(topic, key(i), b"b") for i in range(5)])
        records = log.read(topic, 0, 0, 100)
        # Records 0-4, the first commit marker at 5, records 6-10, the second marker at 11.
        assert [r.offset for r in records] == [0, 1, 2, 3, 4, 6, 7, 8, 9, 10]
        assert [r.value for r in records] == [b"a"] * 5 + [b"b"] * 5
        assert log.end_offsets(topic) == {0: 12}
        assert [r.offset for r in log.read(topic, 0, 7, 2)] == [7, 8]
        assert [r.offset for r in log.read(topic, 0, 5, 1)] == [6]  # a marker is skipped
        assert log.read(topic, 0, 11, 100) == []

    def test_latest_value(self, log_factory: KafkaFactory) -> None:
        log = log_factory()
        with pytest.raises(NotImplementedError):
            log.latest_value(new_topic(), key(1))

    def test_latest_value_sees_the_callers_open_transaction(
        self, log_factory: KafkaFactory
    ) -> None:
        # Not without a state directory and keep_latest (see test_kafka_images.py).
        log = log_factory()
        tx = log.begin()
        try:
            with pytest.raises(NotImplementedError):
                log.latest_value(new_topic(), key(1))
        finally:
            tx.abort()


def test_a_keyless_record_is_keyed_empty_on_a_compacted_topic(log_factory: KafkaFactory) -> None:
    # A truncate's key is null, as Debezium's; a broker refuses a keyless record on a compacted
    # topic (the transaction would fail), so the Kafka log writes it keyed {}.
    topic = new_topic()
    log = log_factory(partitions=3)
    log.ensure_topics([topic])
    truncate = b'{"before":null,"after":null,"op":"t"}'
    append(log, [Record(topic, key(1), b"a"), Record(topic, None, truncate)])
    records = read_all(log, topic)
    assert sorted((r.key, r.value) for r in records) == [(key(1), b"a"), (b"{}", truncate)]
    braces = [r for r in records if r.key == b"{}"]
    assert [r.partition for r in braces] == [log.partition_for(topic, b"{}")]


def test_topics_are_created_compacted_and_existing_ones_are_left_alone(
    kafka_server: Any, log_factory: KafkaFactory
) -> None:
    bootstrap = kafka_server.bootstrap_servers
    existing = new_topic()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(existing, 2, 1, config={"cleanup.policy": "delete"})])[
        existing
    ].result()
    log = log_factory(partitions=3, min_compaction_lag_ms=5000, delete_retention_ms=7000)
    topic = new_topic()
    log.ensure_topics([topic, existing])
    configs = topic_configs(bootstrap, topic)
    assert configs["cleanup.policy"] == "compact"
    assert configs["min.compaction.lag.ms"] == "5000"
    assert configs["delete.retention.ms"] == "7000"
    assert log.end_offsets(topic).keys() == {0, 1, 2}
    assert topic_configs(bootstrap, existing)["cleanup.policy"] == "delete"
    assert log.end_offsets(existing).keys() == {0, 1}
    log.source_offsets()
    offsets_topic = topic_configs(bootstrap, log.offsets_topic)
    assert offsets_topic["cleanup.policy"] == "compact"
    assert offsets_topic["segment.bytes"] == str(16 << 20)  # so compaction keeps restarts fast


def test_a_plain_murmur2_producer_agrees_on_partitions(
    kafka_server: Any, log_factory: KafkaFactory
) -> None:
    """librdkafka's murmur2 partitioner (Java's default) puts each key where the log does."""
    log = log_factory(partitions=5)
    topic = new_topic()
    log.ensure_topics([topic])
    producer = Producer(
        {"bootstrap.servers": kafka_server.bootstrap_servers, "partitioner": "murmur2_random"}
    )
    placed: dict[bytes, int] = {}
    for i in range(50):
        producer.produce(
            topic, b"v", key(i), on_delivery=lambda _e, m: placed.update({m.key(): m.partition()})
        )
    producer.flush(10)
    assert len(placed) == 50
    assert all(p == log.partition_for(topic, k) == partition_for(k, 5) for k, p in placed.items())


def test_appended_records_land_on_the_partition_partition_for_names(
    log_factory: KafkaFactory,
) -> None:
    """The log leaves placement to the producer's murmur2 partitioner: it must agree, whatever
    partitioner the user's properties name."""
    log = log_factory(partitions=5, properties={"partitioner": "consistent_random"})
    topic = new_topic()
    log.ensure_topics([topic])
    log.claim_source()
    append(log, [Record(topic, key(i), b"v") for i in range(60)], {"pos": 1})
    stored = read_all(log, topic)
    assert len(stored) == 60 and len({r.partition for r in stored}) == 5
    assert all(r.partition == partition_for(r.key, 5) for r in stored)


def test_compaction_keeps_the_latest_per_key_and_drops_deleted_keys(
    log_factory: KafkaFactory,
) -> None:
    log = log_factory(
        segment_ms=200,
        min_compaction_lag_ms=0,
        delete_retention_ms=1000,
        topic_properties={"min.cleanable.dirty.ratio": "0.01"},
    )
    topic = new_topic()
    log.ensure_topics([topic])
    for version in range(3):
        append(log, [Record(topic, key(i), b"v%d" % version) for i in range(10)])
    append(log, [Record(topic, key(9), b"deleted"), Record(topic, key(9), None)])
    state: list[tuple[bytes | None, bytes | None]] = []

    def compacted() -> bool:
        # New records roll the segment (segment.ms) so the cleaner can take the older ones.
        append(log, [Record(topic, b'"filler"', b"%f" % time.time())])
        state[:] = [(r.key, r.value) for r in read_all(log, topic) if r.key != b'"filler"']
        return state == [(key(i), b"v2") for i in range(9)]

    wait_until(compacted, 50, 0.3, describe=lambda: f"compaction (the topic holds {state})")


def test_a_second_instance_fences_the_first(log_factory: KafkaFactory) -> None:
    first = log_factory()
    topic = new_topic()
    first.ensure_topics([topic])
    first.claim_source()  # the runtime's source task does this first, on its thread
    append(first, [Record(topic, key(1), b"from the first")], {"pos": 1})
    second = log_factory()
    second.claim_source()
    append(second, [Record(topic, key(2), b"from the second")], {"pos": 2})
    with pytest.raises(LogFatal, match="fenced"):
        append(first, [Record(topic, key(3), b"zombie")], {"pos": 3})
    assert [r.value for r in read_all(second, topic)] == [b"from the first", b"from the second"]
    assert second.source_offsets()["pos"] == 2


def test_claiming_the_source_fences_a_zombie_before_offsets_are_read(
    log_factory: KafkaFactory,
) -> None:
    """A new instance claims first, then reads offsets: an older instance's open transaction
    is aborted and it can commit nothing after the read, so the offsets it sees are final."""
    zombie = log_factory()
    topic = new_topic()
    zombie.ensure_topics([topic])
    zombie.claim_source()
    append(zombie, [Record(topic, key(1), b"committed")], {"pos": 1})
    open_tx = zombie.begin()
    open_tx.append([Record(topic, key(2), b"never committed")])
    successor = log_factory()
    successor.claim_source()
    assert successor.source_offsets() == {"pos": 1}
    open_tx.store_offsets({"pos": 2})
    with pytest.raises(LogFatal, match="fenced"):
        open_tx.commit()
    assert successor.source_offsets() == {"pos": 1}
    assert [r.value for r in read_all(successor, topic)] == [b"committed"]


def test_other_threads_do_not_fence_the_source(log_factory: KafkaFactory) -> None:
    """A sink worker's dead letters (another thread, another process) use their own id."""
    source = log_factory()
    topic = new_topic()
    source.ensure_topics([topic])
    source.claim_source()
    worker = log_factory()
    done = threading.Event()

    def dead_letter() -> None:
        append(worker, [Record(topic, key(2), b"dead letter")])
        done.set()

    threading.Thread(target=dead_letter).start()
    assert done.wait(30)
    append(source, [Record(topic, key(1), b"still the source")], {"pos": 1})
    assert {r.value for r in read_all(source, topic)} == {b"dead letter", b"still the source"}


def test_a_record_too_large_is_skippable_and_names_topic_and_key(
    log_factory: KafkaFactory,
) -> None:
    log = log_factory(topic_properties={"max.message.bytes": "20000"})
    topic = new_topic()
    log.ensure_topics([topic])
    txn = log.begin()
    txn.append([Record(topic, key(1), b"small")])
    with pytest.raises(RecordTooLarge, match=rf"{topic}.*id\": 2"):
        txn.append([Record(topic, key(2), b"x" * 30_000)])
    txn.append([Record(topic, key(3), b"also small")])  # nothing of the refused batch went out
    txn.commit()
    assert [r.value for r in read_all(log, topic)] == [b"small", b"also small"]
    with pytest.raises(RecordTooLarge):
        append(log, [Record(topic, key(4), b"y" * 2_000_000)])  # over the client's own limit


def test_an_unreachable_broker_is_a_clear_error_within_30_s() -> None:
    address = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(LogUnavailable, match=address):
        KafkaLog("nowhere", kafka_config(address, connect_timeout_s=5))
    assert time.monotonic() - started < 30


def run_source_task(log: KafkaLog, source: ScriptedSource, bad_records: str) -> Exception | None:
    stop = threading.Event()
    task = SourceTask(
        log.pipeline, log, lambda: source, stop, get_logger(), 5000, 0.05, bad_records
    )
    errors: list[Exception] = []

    def body() -> None:
        try:
            task.run()
        except Exception as exc:
            errors.append(exc)
        finally:
            source.drained.set()

    thread = threading.Thread(target=body)
    thread.start()
    source.drained.wait(30)
    stop.set()
    thread.join(30)
    return errors[0] if errors else None


@pytest.mark.parametrize("policy", ["dead_letter", "fail"])
def test_the_source_task_applies_the_policy_to_a_record_too_large(
    log_factory: KafkaFactory, policy: str
) -> None:
    log = log_factory(topic_properties={"max.message.bytes": "20000"})
    huge = make_event(2, position=1, sequence=1, note="x" * 30_000)
    batch = SourceBatch(events=[make_event(1), huge, make_event(3)], commit_offsets={"n": 3})
    # replay: a transaction the log aborts (see test_a_record_delivered_at_no_offset_...) is
    # read again, as a real source would from its stored offsets.
    error = run_source_task(log, ScriptedSource([batch], replay=True), policy)
    table = read_all(log, topic_name(log.pipeline, "public", "items"))
    if policy == "fail":
        assert isinstance(error, BadRecordStop)
        assert "public.items" in str(error) and '{"id":2}' in str(error)
        assert table == [] and log.source_offsets() == {}
        return
    assert error is None
    assert [orjson.loads(r.key or b"") for r in table] == [{"id": 1}, {"id": 3}]
    assert log.source_offsets() == {"n": 3}
    (letter,) = read_all(log, dead_letter_topic(log.pipeline))
    value = orjson.loads(letter.value or b"")
    assert value["key"] == {"id": 2} and "over the limit" in value["reason"]


def test_a_commit_whose_log_closes_meanwhile_is_not_reported_failed(kafka_server: Any) -> None:
    """The broker writes a commit's markers after it answered; waiting for them on a log that a
    stop closed meanwhile is no failure: the commit is durable (its caller must not think it
    failed and hand the batch on as lost). It raised LogError (review nit, 2026-12-07)."""
    name = f"vf{uuid.uuid4().hex[:8]}"
    servers = kafka_server.bootstrap_servers
    config = KafkaLogConfig(type="kafka", bootstrap_servers=servers, partitions=1)
    log = KafkaLog(name, config)
    topic = f"{name}.t"
    try:
        log.ensure_topics([topic])
        with log.begin() as tx:
            tx.append([Record(topic, b"k", b"v")])
    finally:
        log.close()
    log.wait_visible({(topic, 0): 0})  # the admin is closed: returns, the commit stands
    with KafkaLog(name, config) as reader:
        assert [r.value for r in reader.read(topic, 0, 0, 10)] == [b"v"]
