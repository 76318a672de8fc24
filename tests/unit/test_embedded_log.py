"""The embedded log: the shared conformance suite, plus storage, compaction and errors. Processes
and threads sharing one log are in ``test_embedded_log_concurrency.py``, the two append paths in
``test_embedded_log_appender.py``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cdc.contracts.errors import LogError, LogFatal, LogUnavailable
from cdc.log.base import Record, StoredRecord, TopicPartition
from cdc.log.embedded import EmbeddedLog
from cdc.log.embedded import compaction as embedded_compaction
from cdc.log.embedded import store as embedded_store
from tests.unit.embedded_log_kit import TOPIC, opened_logs, values
from tests.unit.log_suite import LogSuite, append, key, read_all

DAY_MS = 86_400_000


@pytest.fixture
def log_factory(tmp_path: Path) -> Iterator[Callable[..., EmbeddedLog]]:
    yield from opened_logs(tmp_path)


class TestEmbeddedLogConformance(LogSuite):
    """The suite every log passes, run against SQLite."""


def test_offsets_are_dense_and_counts_exact(log_factory: Callable[..., EmbeddedLog]) -> None:
    log = log_factory(partitions=2)
    for round_ in range(3):
        append(log, [Record(TOPIC, key(i), b"%d" % round_) for i in range(10)])
    for partition, end in log.end_offsets(TOPIC).items():
        assert [r.offset for r in log.read(TOPIC, partition, 0, 100)] == list(range(end))
    info = log.topics()[0]
    assert info.record_count == 30 and sum(info.end_offsets.values()) == 30


def test_every_byte_null_and_empty_value_is_stored(log_factory: Callable[..., EmbeddedLog]) -> None:
    log = log_factory()
    odd = [b"", None, b"\x00\xff" * 40, b"0000000012", bytes(range(256))]
    records = [Record(TOPIC, k, v) for k in odd for v in odd]
    records += [Record(TOPIC, key(i), b"v%d" % i * (i % 7)) for i in range(300)]
    append(log, records[:7])
    append(log, records[7:])
    assert values(log) == [(i, r.key, r.value) for i, r in enumerate(records)]


def test_a_batch_of_several_partitions_and_topics(
    log_factory: Callable[..., EmbeddedLog],
) -> None:
    log = log_factory(partitions=3)
    other = "shop.public.orders"
    records = [Record(TOPIC if i % 4 else other, key(i % 50), b"%d" % i) for i in range(400)]
    append(log, records)
    for topic in (TOPIC, other):
        expected = [(r.key, r.value) for r in records if r.topic == topic]
        got = sorted(read_all(log, topic), key=lambda r: int(r.value or b"0"))
        assert [(r.key, r.value) for r in got] == expected
        for partition, end in log.end_offsets(topic).items():
            stored = log.read(topic, partition, 0, 1000)
            assert [r.offset for r in stored] == list(range(end))
            assert all(log.partition_for(topic, r.key) == partition for r in stored)


def test_the_database_is_a_wal_mode_sqlite_file(tmp_path: Path) -> None:
    EmbeddedLog(tmp_path / "a" / "b").close()
    conn = sqlite3.connect(tmp_path / "a" / "b" / "log.sqlite3")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    # version 2 added value heads, 3 the records' positions (beside the values)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == embedded_store.SCHEMA_VERSION
    assert conn.execute("PRAGMA page_size").fetchone()[0] == 16384
    conn.close()


def test_an_existing_log_keeps_its_page_size(tmp_path: Path) -> None:
    (tmp_path / "log").mkdir()
    old = sqlite3.connect(tmp_path / "log" / "log.sqlite3")
    old.execute("PRAGMA page_size = 4096")
    old.execute("CREATE TABLE before_us (x)")  # a log created by an earlier version
    old.close()
    with EmbeddedLog(tmp_path / "log") as log:
        append(log, [Record(TOPIC, key(1), b"v")])
        assert [r.value for r in log.read(TOPIC, 0, 0, 10)] == [b"v"]
    conn = sqlite3.connect(tmp_path / "log" / "log.sqlite3")
    assert conn.execute("PRAGMA page_size").fetchone()[0] == 4096
    conn.close()


def test_append_creates_an_unknown_topic_and_abort_removes_it(
    log_factory: Callable[..., EmbeddedLog],
) -> None:
    log = log_factory(partitions=2)
    txn = log.begin()
    txn.append([Record("new.topic.a", key(1), b"v")])
    txn.abort()
    assert [t.name for t in log.topics()] == []
    append(log, [Record("new.topic.b", key(1), b"v")])
    assert [(t.name, t.partitions) for t in log.topics()] == [("new.topic.b", 2)]


def test_one_append_may_mix_topics(log_factory: Callable[..., EmbeddedLog]) -> None:
    log = log_factory(partitions=3)
    log.ensure_topics(["a", "b"])
    append(log, [Record("a" if i % 2 else "b", key(i), b"%d" % i) for i in range(40)])
    append(log, [Record("a", key(1), b"again")])
    assert sum(log.end_offsets("a").values()) == 21
    assert sum(log.end_offsets("b").values()) == 20
    assert log.latest_value("a", key(1)) == b"again"


def test_compaction_keeps_the_latest_record_of_each_key(
    log_factory: Callable[..., EmbeddedLog],
) -> None:
    log = log_factory()
    append(log, [Record(TOPIC, key(i % 3), b"v%d" % i) for i in range(9)])
    append(log, [Record(TOPIC, None, b"no key"), Record(TOPIC, None, b"no key")])
    removed = log.compact()
    assert removed == {"superseded": 6, "tombstones": 0}
    assert values(log) == [
        (6, key(0), b"v6"),
        (7, key(1), b"v7"),
        (8, key(2), b"v8"),
        (9, None, b"no key"),
        (10, None, b"no key"),
    ]
    assert log.end_offsets(TOPIC) == {0: 11}
    info = log.topics()[0]
    assert info.record_count == 5 and info.start_offsets == {0: 6}
    assert log.compact() == {"superseded": 0, "tombstones": 0}


def test_tombstones_stay_until_the_retention_passed(
    log_factory: Callable[..., EmbeddedLog],
) -> None:
    log = log_factory(tombstone_retention_ms=DAY_MS)
    append(log, [Record(TOPIC, key(1), b"a"), Record(TOPIC, key(2), b"b")])
    append(log, [Record(TOPIC, key(1), None)])
    tombstone_ts = log.read(TOPIC, 0, 2, 1)[0].timestamp_ms
    assert log.compact(now_ms=tombstone_ts + DAY_MS - 1) == {"superseded": 1, "tombstones": 0}
    assert values(log) == [(1, key(2), b"b"), (2, key(1), None)]
    assert log.compact(now_ms=tombstone_ts + DAY_MS + 1) == {"superseded": 0, "tombstones": 1}
    assert values(log) == [(1, key(2), b"b")]
    assert log.latest_value(TOPIC, key(1)) is None


def test_offsets_are_never_reused_after_compaction_empties_a_partition(tmp_path: Path) -> None:
    log = EmbeddedLog(tmp_path, tombstone_retention_ms=0)
    append(log, [Record(TOPIC, key(1), b"a"), Record(TOPIC, key(1), None)])
    log.compact(now_ms=10**15)
    assert values(log) == []
    assert log.topics()[0].start_offsets == {0: 2} and log.end_offsets(TOPIC) == {0: 2}
    log.close()
    log = EmbeddedLog(tmp_path)
    append(log, [Record(TOPIC, key(1), b"back")])
    assert values(log) == [(2, key(1), b"back")]
    log.close()


def test_compaction_works_in_chunks_across_partitions(
    log_factory: Callable[..., EmbeddedLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(embedded_compaction, "CHUNK_RECORDS", 7)
    log = log_factory(partitions=4)
    for round_ in range(5):
        append(log, [Record(TOPIC, key(i), b"%d-%d" % (round_, i)) for i in range(40)])
    ends = log.end_offsets(TOPIC)
    assert log.compact() == {"superseded": 160, "tombstones": 0}
    survivors = read_all(log, TOPIC)
    assert sorted(r.value or b"" for r in survivors) == sorted(b"4-%d" % i for i in range(40))
    assert log.end_offsets(TOPIC) == ends
    assert log.topics()[0].record_count == 40


def test_maybe_compact_runs_only_when_enough_changed(
    log_factory: Callable[..., EmbeddedLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(embedded_compaction, "MIN_DIRTY", 50)
    log = log_factory()
    append(log, [Record(TOPIC, key(i), b"a") for i in range(40)])
    assert log.maybe_compact() is None  # 40 appended: below the minimum
    append(log, [Record(TOPIC, key(i), b"b") for i in range(40)])
    assert log.maybe_compact() == {"superseded": 40, "tombstones": 0}
    append(log, [Record(TOPIC, key(i), b"c") for i in range(10)])
    assert log.maybe_compact() is None  # the pass reset the count


def test_a_failed_append_leaves_only_abort(log_factory: Callable[..., EmbeddedLog]) -> None:
    log = log_factory()
    log.ensure_topics([TOPIC])
    txn = log.begin()
    with pytest.raises(LogError):
        txn.append([Record(TOPIC, key(1), b"ok"), Record(TOPIC, key(2), [1])])  # type: ignore[arg-type]
    with pytest.raises(LogError):
        txn.commit()
    txn.abort()
    append(log, [Record(TOPIC, key(1), b"ok")])
    assert values(log) == [(0, key(1), b"ok")]


def test_transaction_misuse_is_a_clear_error(log_factory: Callable[..., EmbeddedLog]) -> None:
    log = log_factory()
    txn = log.begin()
    with pytest.raises(LogError, match="already has an open transaction"):
        log.begin()
    txn.commit()
    with pytest.raises(LogError, match="committed"):
        txn.append([Record(TOPIC, key(1), b"late")])
    with pytest.raises(LogError, match="unknown topic"):
        log.read("missing", 0, 0, 1)


def test_a_held_write_lock_is_retriable(tmp_path: Path) -> None:
    log = EmbeddedLog(tmp_path, busy_timeout_ms=100)
    other = sqlite3.connect(tmp_path / "log.sqlite3", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    with pytest.raises(LogUnavailable, match=r"locked|busy"):
        log.begin()
    other.execute("ROLLBACK")
    append(log, [Record(TOPIC, key(1), b"v")])
    other.close()
    log.close()


def test_a_file_that_is_not_a_database_is_fatal(tmp_path: Path) -> None:
    (tmp_path / "log.sqlite3").write_bytes(b"this is not a sqlite database" * 100)
    with pytest.raises(LogFatal, match=r"NOTADB|not a database"):
        EmbeddedLog(tmp_path)


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    EmbeddedLog(tmp_path).close()
    conn = sqlite3.connect(tmp_path / "log.sqlite3")
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(LogFatal, match="newer"):
        EmbeddedLog(tmp_path)


def test_a_closed_log_refuses_work(tmp_path: Path) -> None:
    log = EmbeddedLog(tmp_path)
    consumer = log.consumer("g", [TOPIC])
    log.close()
    with pytest.raises(LogError, match="closed"):
        consumer.poll(1, 0)


def test_consumer_close_revokes_its_partitions(log_factory: Callable[..., EmbeddedLog]) -> None:
    log = log_factory(partitions=2)
    revoked: list[list[TopicPartition]] = []
    consumer = log.consumer("g", [TOPIC], on_revoke=revoked.append)
    consumer.close()
    assert revoked == [[TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)]]


@pytest.mark.parametrize("fast", [True, False])
def test_stored_records_equal_the_dataclass_built_normally(
    fast: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not fast:
        monkeypatch.setattr(embedded_store, "_SETTERS", None)
    rows = [
        (5, b"k", b"v", 7, None, b"[1,0]", None),
        (6, None, None, 8, None, None, None),
        (7, b"k", b'{"a":1', 9, 3, b"[2,5]", None),
        (8, b"k", b"b", 10, None, b"[2,6]", 4),
        (9, b"k", b"c", 11, 3, b"[2,7]", 4),
    ]

    def whole(head: int | None, frame: int | None, stored: bytes) -> bytes:
        return b"<%r>%b<%r>" % (head, stored, frame)

    built = embedded_store.stored_records("t", 2, rows, whole)
    assert built == [
        StoredRecord("t", 2, 5, b"k", b"v", 7, b"[1,0]"),
        StoredRecord("t", 2, 6, None, None, 8),
        StoredRecord("t", 2, 7, b"k", b'<3>{"a":1<None>', 9, b"[2,5]"),
        StoredRecord("t", 2, 8, b"k", b"<None>b<4>", 10, b"[2,6]"),
        StoredRecord("t", 2, 9, b"k", b"<3>c<4>", 11, b"[2,7]"),
    ]
    assert embedded_store._SETTERS is None or not fast or len(embedded_store._SETTERS) == 7
