"""The log conformance suite: the semantics every :class:`cdc.log.base.Log` must have.

A test module subclasses :class:`LogSuite` as ``Test...`` and provides a ``log_factory``
fixture: a callable ``open_log(partitions=1) -> Log`` that opens (or reopens) one and the same
log each time it is called within a test, and closes whatever it opened at teardown. The
embedded log runs it in ``tests/unit/test_embedded_log.py``; the Kafka log runs the same class
(``from tests.unit.log_suite import LogSuite``).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from cdc.contracts.errors import LogError
from cdc.contracts.positions import PositionedOffsets, PositionMovedBackwards
from cdc.log.base import Log, Record, StoredRecord, TopicPartition
from cdc.log.partitioner import partition_for

LogFactory = Callable[..., Log]


def new_topic() -> str:
    """A topic name no other test uses (the Kafka suite shares one broker)."""
    return f"suite.public.t_{uuid.uuid4().hex[:12]}"


def key(i: int) -> bytes:
    return b'{"id": %d}' % i


def append(log: Log, records: list[Record], offsets: dict[str, Any] | None = None) -> None:
    txn = log.begin()
    txn.append(records)
    if offsets:
        txn.store_offsets(offsets)
    txn.commit()


def read_all(log: Log, topic: str) -> list[StoredRecord]:
    out: list[StoredRecord] = []
    for partition in sorted(log.end_offsets(topic)):
        out += log.read(topic, partition, 0, 1_000_000)
    return out


def in_thread(fn: Callable[[], Any]) -> Any:
    """Run ``fn`` on another thread (so it cannot see this thread's open transaction)."""
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(fn()))
    thread.start()
    thread.join(30)
    assert result, "the reader thread did not finish"
    return result[0]


class Step(int):
    """A source-neutral test position: ``{"step": {"n": <int>}}``."""

    @classmethod
    def from_offsets(cls, offsets: Mapping[str, Any]) -> Step | None:
        entry = offsets.get("step")
        return cls(entry["n"]) if isinstance(entry, Mapping) else None

    def to_offsets(self) -> PositionedOffsets:
        return PositionedOffsets({"step": {"n": int(self)}}, self)


class LogSuite:
    """Semantics shared by every log implementation."""

    def test_records_of_one_key_go_to_one_partition_in_order(self, log_factory: LogFactory) -> None:
        log = log_factory(partitions=4)
        topic = new_topic()
        log.ensure_topics([topic])
        for txn in range(3):
            batch = [Record(topic, key(i % 20), b"%d" % (txn * 100 + i)) for i in range(100)]
            append(log, batch)
        by_key: dict[bytes | None, list[StoredRecord]] = {}
        for record in read_all(log, topic):
            by_key.setdefault(record.key, []).append(record)
        assert len(by_key) == 20
        used = set()
        for k, records in by_key.items():
            assert k is not None
            assert {r.partition for r in records} == {partition_for(k, 4)}
            assert log.partition_for(topic, k) == partition_for(k, 4)
            values = [int(r.value or b"") for r in records]
            assert values == sorted(values) and len(values) == 15
            assert [r.offset for r in records] == sorted(r.offset for r in records)
            used.add(records[0].partition)
        assert len(used) > 1, "20 keys over 4 partitions should not all hash alike"

    def test_a_records_position_travels_beside_its_value(self, log_factory: LogFactory) -> None:
        # Record.pos: the embedded log's pos column, Kafka's cdc.pos header; the value and key
        # stay the bytes given (a Debezium consumer reads Debezium's), a tombstone has none.
        log = log_factory()
        topic = new_topic()
        log.ensure_topics([topic])
        batch = [Record(topic, key(1), b"v1", b"[5,0]"), Record(topic, key(1), None)]
        append(log, [*batch, Record(topic, key(2), b"v2", b"[5,1]")])
        got = [(r.key, r.value, r.pos) for r in read_all(log, topic)]
        assert got == [(key(1), b"v1", b"[5,0]"), (key(1), None, None), (key(2), b"v2", b"[5,1]")]

    def test_offsets_grow_across_reopen(self, log_factory: LogFactory) -> None:
        # Only growth is required: Kafka's transaction markers take offsets too, so offsets
        # are dense in the embedded log alone (its own tests check that).
        topic = new_topic()
        log = log_factory()
        log.ensure_topics([topic])
        append(log, [Record(topic, key(i), b"a") for i in range(5)])
        log.close()
        log = log_factory()
        append(log, [Record(topic, key(i), b"b") for i in range(5)])
        records = log.read(topic, 0, 0, 100)
        offsets = [r.offset for r in records]
        assert offsets == sorted(set(offsets)) and len(offsets) == 10
        assert [r.value for r in records] == [b"a"] * 5 + [b"b"] * 5
        end = log.end_offsets(topic)[0]
        assert end > offsets[-1]
        assert [r.offset for r in log.read(topic, 0, offsets[7], 2)] == offsets[7:9]
        assert log.read(topic, 0, end, 100) == []

    def test_a_transaction_spans_many_appends(self, log_factory: LogFactory) -> None:
        log = log_factory()
        topic = new_topic()
        log.ensure_topics([topic])
        txn = log.begin()
        for batch in range(20):
            txn.append([Record(topic, key(batch * 50 + i), b"v") for i in range(50)])
        txn.store_offsets({"lsn": 1000})
        txn.commit()
        records = read_all(log, topic)
        assert [r.key for r in records] == [key(i) for i in range(1000)]
        assert log.source_offsets()["lsn"] == 1000

    def test_nothing_of_an_open_transaction_is_visible(self, log_factory: LogFactory) -> None:
        log = log_factory()
        topic = new_topic()
        log.ensure_topics([topic])
        consumer = log.consumer("watcher", [topic])
        txn = log.begin()
        txn.append([Record(topic, key(1), b"pending")])
        txn.store_offsets({"open": 1})
        assert in_thread(lambda: consumer.poll(10, 0.2)) == []
        assert in_thread(lambda: log.read(topic, 0, 0, 10)) == []
        assert "open" not in in_thread(log.source_offsets)
        txn.commit()
        assert [r.value for r in in_thread(lambda: consumer.poll(10, 5))] == [b"pending"]
        assert in_thread(log.source_offsets)["open"] == 1
        consumer.close()

    def test_abort_discards_records_and_source_offsets(self, log_factory: LogFactory) -> None:
        log = log_factory()
        topic = new_topic()
        log.ensure_topics([topic])
        append(log, [Record(topic, key(0), b"kept")], {"pos": 1})
        txn = log.begin()
        txn.append([Record(topic, key(1), b"dropped")])
        txn.store_offsets({"pos": 2})
        txn.abort()
        append(log, [Record(topic, key(2), b"after")], None)
        assert [r.value for r in read_all(log, topic)] == [b"kept", b"after"]
        assert log.source_offsets()["pos"] == 1

    def test_transaction_as_context_manager(self, log_factory: LogFactory) -> None:
        log = log_factory()
        topic = new_topic()
        log.ensure_topics([topic])
        probe = log.begin()
        probe.abort()
        if not hasattr(probe, "__enter__"):
            pytest.skip("this log's transactions are not context managers")
        with log.begin() as txn:
            txn.append([Record(topic, key(0), b"committed")])
        with pytest.raises(RuntimeError), log.begin() as txn:
            txn.append([Record(topic, key(1), b"aborted")])
            raise RuntimeError("boom")
        assert [r.value for r in read_all(log, topic)] == [b"committed"]

    def test_source_offsets_keep_the_last_value_and_none_deletes(
        self, log_factory: LogFactory
    ) -> None:
        log = log_factory()
        topic = new_topic()
        log.ensure_topics([topic])
        append(log, [Record(topic, key(0), b"v")], {"slot": {"lsn": "0/10"}, "tmp": 1})
        append(log, [], {"slot": {"lsn": "0/20"}, "tmp": None})
        log.close()
        offsets = log_factory().source_offsets()
        assert offsets.get("slot") == {"lsn": "0/20"}
        assert "tmp" not in offsets

    def test_tombstones_read_back_as_none(self, log_factory: LogFactory) -> None:
        log = log_factory()
        topic = new_topic()
        log.ensure_topics([topic])
        append(log, [Record(topic, key(1), b"v1"), Record(topic, key(1), None)])
        records = log.read(topic, 0, 0, 10)
        assert [(r.key, r.value) for r in records] == [(key(1), b"v1"), (key(1), None)]
        assert all(r.timestamp_ms > 1_600_000_000_000 for r in records)

    def test_latest_value(self, log_factory: LogFactory) -> None:
        log = log_factory(partitions=3)
        topic = new_topic()
        log.ensure_topics([topic])
        append(log, [Record(topic, key(i), b"old%d" % i) for i in range(10)])
        append(log, [Record(topic, key(3), b"new3"), Record(topic, key(4), None)])
        try:
            assert log.latest_value(topic, key(3)) == b"new3"
        except NotImplementedError:
            pytest.skip("this log cannot look keys up")
        assert log.latest_value(topic, key(5)) == b"old5"
        assert log.latest_value(topic, key(4)) is None
        assert log.latest_value(topic, key(99)) is None

    def test_latest_value_sees_the_callers_open_transaction(self, log_factory: LogFactory) -> None:
        # The PostgreSQL source fills unchanged TOAST values from an earlier, uncommitted batch
        # of a large transaction this way (connectors/postgres/assembly/toast.py).
        log = log_factory(partitions=3)
        topic = new_topic()
        log.ensure_topics([topic])
        append(log, [Record(topic, key(1), b"committed"), Record(topic, key(2), b"kept")])
        tx = log.begin()
        tx.append([Record(topic, key(1), b"appended"), Record(topic, key(2), None)])
        assert log.latest_value(topic, key(1)) == b"appended"  # Kafka overrides this test
        assert log.latest_value(topic, key(2)) is None
        assert in_thread(lambda: log.latest_value(topic, key(1))) == b"committed"
        tx.abort()
        assert log.latest_value(topic, key(1)) == b"committed"
        assert log.latest_value(topic, key(2)) == b"kept"

    def test_committed_offsets_survive_reopen(self, log_factory: LogFactory) -> None:
        log = log_factory()
        topic = new_topic()
        log.ensure_topics([topic])
        append(log, [Record(topic, key(i), b"%d" % i) for i in range(10)])
        consumer = log.consumer("sink-a", [topic])
        assert [r.offset for r in consumer.poll(4, 5)] == [0, 1, 2, 3]
        consumer.commit({TopicPartition(topic, 0): 4})
        consumer.close()
        log.close()
        log = log_factory()
        assert log.committed_offsets("sink-a") == {TopicPartition(topic, 0): 4}
        assert "sink-a" in log.groups()
        consumer = log.consumer("sink-a", [topic])
        assert [r.offset for r in consumer.poll(100, 5)] == list(range(4, 10))
        other = log.consumer("sink-b", [topic])
        assert [r.offset for r in other.poll(100, 5)] == list(range(10))
        consumer.close()
        other.close()

    def test_start_offsets_override_the_committed_ones(self, log_factory: LogFactory) -> None:
        log = log_factory()
        topic = new_topic()
        log.ensure_topics([topic])
        append(log, [Record(topic, key(i), b"%d" % i) for i in range(10)])
        seen: list[list[TopicPartition]] = []

        def start_at_seven(tps: list[TopicPartition]) -> dict[TopicPartition, int]:
            seen.append(tps)
            return {tp: 7 for tp in tps}

        consumer = log.consumer("sink", [topic], start_offsets=start_at_seven)
        records = consumer.poll(100, 5)
        assert seen and TopicPartition(topic, 0) in seen[0]
        assert [r.offset for r in records] == [7, 8, 9]
        consumer.close()

    def test_poll_respects_max_records_and_timeout(self, log_factory: LogFactory) -> None:
        log = log_factory(partitions=2)
        topic = new_topic()
        log.ensure_topics([topic])
        consumer = log.consumer("sink", [topic])
        started = time.monotonic()
        assert consumer.poll(10, 0.3) == []
        assert 0.25 <= time.monotonic() - started < 5
        append(log, [Record(topic, key(i), b"v") for i in range(30)])
        got: list[StoredRecord] = []
        while len(got) < 30:
            batch = consumer.poll(7, 5)
            assert 0 < len(batch) <= 7
            got += batch
        assert sorted((r.partition, r.offset) for r in got) == sorted(
            (r.partition, r.offset) for r in read_all(log, topic)
        )
        consumer.close()

    def test_poll_wakes_when_a_record_is_appended(self, log_factory: LogFactory) -> None:
        log = log_factory()
        topic = new_topic()
        log.ensure_topics([topic])
        consumer = log.consumer("sink", [topic])
        consumer.poll(1, 0)
        timer = threading.Timer(0.3, lambda: append(log, [Record(topic, key(1), b"hi")]))
        started = time.monotonic()
        timer.start()
        records = consumer.poll(10, 10)
        elapsed = time.monotonic() - started
        timer.join()
        assert [r.value for r in records] == [b"hi"]
        assert elapsed < 3, f"poll waited {elapsed:.2f}s for a record appended after 0.3s"
        consumer.close()

    def test_poll_stops_at_max_bytes_once_values_grow(self, log_factory: LogFactory) -> None:
        log = log_factory(partitions=2)
        topic = new_topic()
        log.ensure_topics([topic])
        consumer = log.consumer("sink", [topic])
        append(log, [Record(topic, key(i), b"s" * 10) for i in range(200)])
        append(log, [Record(topic, key(i), b"L" * 100_000) for i in range(200, 260)])
        append(log, [Record(topic, key(260), None)])  # a tombstone counts no bytes
        got: list[StoredRecord] = []
        deadline = time.monotonic() + 30
        while len(got) < 261:
            assert time.monotonic() < deadline, len(got)
            batch = consumer.poll(1000, 5, max_bytes=300_000)
            sizes = [len(r.value or b"") for r in batch]
            # The bound stops a read: only the record reaching it may go past it.
            assert batch and sum(sizes[:-1]) < 300_000, sizes
            got += batch
        assert sorted((r.partition, r.offset) for r in got) == sorted(
            (r.partition, r.offset) for r in read_all(log, topic)
        )
        assert consumer.poll(1000, 0.2, max_bytes=300_000) == []
        consumer.close()

    def test_topics_show_partitions_offsets_and_counts(self, log_factory: LogFactory) -> None:
        log = log_factory(partitions=2)
        topic = new_topic()
        log.ensure_topics([topic, topic])
        append(log, [Record(topic, key(i), b"v") for i in range(12)])
        info = next(t for t in log.topics() if t.name == topic)
        assert info.partitions == 2
        assert info.config.get("cleanup.policy") == "compact"
        assert len(read_all(log, topic)) == 12
        assert info.record_count >= 12  # Kafka's count is an estimate that includes markers
        assert sum(info.end_offsets.values()) >= 12
        assert set(info.start_offsets.values()) == {0}
        assert info.end_offsets == log.end_offsets(topic)

    def test_a_position_moving_back_is_refused_and_nothing_of_its_transaction_is_committed(
        self, log_factory: LogFactory
    ) -> None:
        log = log_factory()
        topic = new_topic()
        log.ensure_topics([topic])
        append(log, [Record(topic, key(0), b"kept")], Step(5).to_offsets())
        txn = log.begin()
        txn.append([Record(topic, key(1), b"dropped")])
        behind = Step(4).to_offsets().with_items({"other": 1})
        with pytest.raises(PositionMovedBackwards, match="4 is before the stored position 5"):
            txn.store_offsets(behind)
        with pytest.raises(LogError):
            txn.commit()
        txn.abort()
        assert log.source_offsets() == {"step": {"n": 5}}
        assert [r.value for r in read_all(log, topic)] == [b"kept"]

    def test_an_equal_or_later_position_and_plain_offsets_are_stored(
        self, log_factory: LogFactory
    ) -> None:
        log = log_factory()
        topic = new_topic()
        log.ensure_topics([topic])
        append(log, [Record(topic, key(0), b"a")], Step(5).to_offsets())
        append(log, [Record(topic, key(1), b"b")], Step(5).to_offsets())
        append(log, [Record(topic, key(2), b"c")], {"step": {"n": 1}})  # carries no position
        assert log.source_offsets()["step"] == {"n": 1}
        append(log, [Record(topic, key(3), b"d")], Step(6).to_offsets())
        assert log.source_offsets()["step"] == {"n": 6}
        assert [r.value for r in read_all(log, topic)] == [b"a", b"b", b"c", b"d"]
