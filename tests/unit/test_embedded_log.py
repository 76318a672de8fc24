"""The embedded log: the shared conformance suite, plus compaction, processes and errors."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cdc.errors import LogError, LogFatal, LogUnavailable
from cdc.log.base import Record, StoredRecord, TopicPartition
from cdc.log.embedded import EmbeddedLog
from cdc.log.embedded import appender as embedded_native
from cdc.log.embedded import compaction as embedded_compaction
from cdc.log.embedded import consumer as embedded_consumer
from cdc.log.embedded import store as embedded_store
from cdc.log.embedded import txn as embedded_txn
from tests.services.common import in_ci
from tests.unit.log_suite import LogSuite, append, key, read_all

TOPIC = "shop.public.customers"
DAY_MS = 86_400_000


@pytest.fixture
def log_factory(tmp_path: Path) -> Iterator[Callable[..., EmbeddedLog]]:
    opened: list[EmbeddedLog] = []

    def open_log(partitions: int = 1, **options: object) -> EmbeddedLog:
        log = EmbeddedLog(tmp_path / "log", partitions=partitions, **options)  # type: ignore[arg-type]
        opened.append(log)
        return log

    yield open_log
    for log in opened:
        log.close()


class TestEmbeddedLogConformance(LogSuite):
    """The suite every log passes, run against SQLite."""


def values(log: EmbeddedLog, topic: str = TOPIC) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for r in read_all(log, topic)]


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
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
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


WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from cdc.log.base import Record
    from cdc.log.embedded import EmbeddedLog

    path, name, txns, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    log = EmbeddedLog(Path(path), partitions=2)
    for t in range(txns):
        with log.begin() as txn:
            txn.append([
                Record("shop.public.customers", b'{"id": %d}' % (i % 7), f"{name}:{t}:{i}".encode())
                for i in range(size)
            ])
            txn.store_offsets({name: t})
    log.close()
    """
)


def test_writer_processes_get_distinct_dense_offsets(tmp_path: Path) -> None:
    # No process created the log beforehand: they race to create the schema and the topic too.
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), f"w{n}", "15", "40"])
        for n in range(3)
    ]
    assert [w.wait(60) for w in writers] == [0, 0, 0]
    log = EmbeddedLog(tmp_path)
    records = read_all(log, TOPIC)
    assert len(records) == 3 * 15 * 40
    for partition, end in log.end_offsets(TOPIC).items():
        offsets = [r.offset for r in records if r.partition == partition]
        assert offsets == list(range(end))
    for n in range(3):
        mine = [r for r in records if (r.value or b"").startswith(b"w%d:" % n)]
        for partition in (0, 1):
            seq = [
                tuple(map(int, (r.value or b"").split(b":")[1:]))
                for r in mine
                if r.partition == partition
            ]
            assert seq == sorted(seq), "one writer's records must keep their order"
    assert log.source_offsets() == {"w0": 14, "w1": 14, "w2": 14}
    log.close()


def test_poll_sees_another_process_commit(tmp_path: Path) -> None:
    log = EmbeddedLog(tmp_path, partitions=2)
    consumer = log.consumer("g", [TOPIC])
    assert consumer.poll(10, 0) == []
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), "w", "1", "10"])
    records = consumer.poll(10, 30)
    deadline = time.monotonic() + 30
    while len(records) < 10 and time.monotonic() < deadline:
        records += consumer.poll(10, 1)
    assert writer.wait(30) == 0
    assert sorted(r.value or b"" for r in records) == sorted(b"w:0:%d" % i for i in range(10))
    log.close()


def test_an_in_process_commit_wakes_poll_without_waiting_for_the_interval(
    log_factory: Callable[..., EmbeddedLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(embedded_consumer, "POLL_INTERVAL_S", 30.0)
    log = log_factory()
    consumer = log.consumer("g", [TOPIC])
    timer = threading.Timer(0.2, lambda: append(log, [Record(TOPIC, key(1), b"now")]))
    started = time.monotonic()
    timer.start()
    records = consumer.poll(10, 20)
    timer.join()
    assert [r.value for r in records] == [b"now"]
    assert time.monotonic() - started < 5


def test_connections_of_ended_threads_are_closed(log_factory: Callable[..., EmbeddedLog]) -> None:
    log = log_factory()
    log.ensure_topics([TOPIC])
    for _ in range(5):
        thread = threading.Thread(target=lambda: log.end_offsets(TOPIC))
        thread.start()
        thread.join()
    assert len(log._connections) <= 2  # this thread's and the last reader's


@pytest.mark.parametrize("fast", [True, False])
def test_stored_records_equal_the_dataclass_built_normally(
    fast: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not fast:
        monkeypatch.setattr(embedded_store, "_SETTERS", None)
    rows = [(5, b"k", b"v", 7), (6, None, None, 8)]
    built = embedded_store.stored_records("t", 2, rows)
    assert built == [StoredRecord("t", 2, 5, b"k", b"v", 7), StoredRecord("t", 2, 6, None, None, 8)]
    assert embedded_store._SETTERS is None or not fast or len(embedded_store._SETTERS) == 6


def test_sink_threads_read_while_one_thread_appends(
    log_factory: Callable[..., EmbeddedLog],
) -> None:
    log = log_factory(partitions=2)
    log.ensure_topics([TOPIC])
    total = 40 * 25
    seen: dict[str, list[tuple[int, int]]] = {}

    def sink(name: str) -> None:
        consumer = log.consumer(name, [TOPIC])
        got: list[tuple[int, int]] = []
        deadline = time.monotonic() + 30
        while len(got) < total and time.monotonic() < deadline:
            got += [(r.partition, r.offset) for r in consumer.poll(100, 0.5)]
        seen[name] = got
        consumer.close()

    readers = [threading.Thread(target=sink, args=(f"sink{n}",)) for n in range(3)]
    for reader in readers:
        reader.start()
    for txn in range(40):
        append(log, [Record(TOPIC, key(i), b"%d" % txn) for i in range(25)])
    for reader in readers:
        reader.join(60)
    expected = sorted((r.partition, r.offset) for r in read_all(log, TOPIC))
    assert len(expected) == total
    for got in seen.values():
        assert sorted(got) == expected  # each record exactly once
        for partition in (0, 1):
            offsets = [o for p, o in got if p == partition]
            assert offsets == sorted(offsets)
    assert len(seen) == 3


def test_maybe_compact_gives_way_to_a_writer_holding_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(embedded_compaction, "MIN_DIRTY", 5)
    log = EmbeddedLog(tmp_path, busy_timeout_ms=100)
    append(log, [Record(TOPIC, key(1), b"%d" % i) for i in range(10)])
    other = sqlite3.connect(tmp_path / "log.sqlite3", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    assert log.maybe_compact() is None
    with pytest.raises(LogUnavailable):
        log.compact()
    other.execute("ROLLBACK")
    other.close()
    assert log.maybe_compact() == {"superseded": 9, "tombstones": 0}
    log.close()


# -- the native appender (cdc/log/embedded/appender.py) and executemany give the same log ---------

both_paths = pytest.mark.parametrize("native", [True, False], ids=["native", "executemany"])


def _use(native: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if native and not embedded_native.available():
        if in_ci():
            pytest.fail("the native log appender was not built")
        pytest.skip("the native log appender is not built (no Rust toolchain)")
    if not native:
        monkeypatch.setattr(embedded_txn, "appender", lambda conn, path: None)


def _count_native_appends(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    original = embedded_native.NativeAppender.append

    def counted(self: embedded_native.NativeAppender, *args: Any) -> Any:
        result = original(self, *args)
        calls.append(len(args[-1]))
        return result

    monkeypatch.setattr(embedded_native.NativeAppender, "append", counted)
    return calls


@both_paths
def test_both_append_paths_store_the_same_records(
    native: bool, log_factory: Callable[..., EmbeddedLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    _use(native, monkeypatch)
    calls = _count_native_appends(monkeypatch)
    log = log_factory(partitions=3)
    tx = log.begin()
    assert (tx._native is not None) is native
    odd = [b"", None, b"\x00\xff" * 40, b"0000000012", bytes(range(256))]
    records = [Record(TOPIC, k, v) for k in odd for v in odd]
    records += [Record("shop.public.orders", key(i), b"%d" % i) for i in range(100)]
    tx.append(records)
    tx.commit()
    assert sum(calls) == (len(records) if native else 0)  # every record, natively or not at all
    for topic in (TOPIC, "shop.public.orders"):
        for partition, end in log.end_offsets(topic).items():
            stored = log.read(topic, partition, 0, 1000)
            assert [r.offset for r in stored] == list(range(end))
            expected = [
                (r.key, r.value)
                for r in records
                if r.topic == topic and log.partition_for(topic, r.key) == partition
            ]
            assert [(r.key, r.value) for r in stored] == expected


@both_paths
def test_bytes_like_keys_and_values_are_stored_as_bytes(
    native: bool, log_factory: Callable[..., EmbeddedLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The native appender takes bytes only; executemany takes over for the rest.
    _use(native, monkeypatch)
    log = log_factory()
    records = [Record(TOPIC, bytearray(b"k"), memoryview(b"v")), Record(TOPIC, b"k2", b"v2")]
    append(log, records)  # type: ignore[arg-type]
    assert values(log) == [(0, b"k", b"v"), (1, b"k2", b"v2")]


@both_paths
def test_a_value_over_sqlites_length_limit_is_fatal_never_a_tombstone(
    native: bool, log_factory: Callable[..., EmbeddedLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    _use(native, monkeypatch)
    log = log_factory()
    log.ensure_topics([TOPIC])
    txn = log.begin()
    log._conn().setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 100)
    with pytest.raises(LogFatal, match="too big"):
        txn.append([Record(TOPIC, key(1), b"x" * 200)])
    txn.abort()
    assert values(log) == []


@both_paths
def test_an_append_after_the_log_closed_is_an_error(
    native: bool, log_factory: Callable[..., EmbeddedLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    _use(native, monkeypatch)
    log = log_factory()
    log.ensure_topics([TOPIC])
    txn = log.begin()
    txn.append([Record(TOPIC, key(1), b"v")])
    log.close()  # the runtime may close the log under a source thread that did not stop
    with pytest.raises(LogError):
        txn.append([Record(TOPIC, key(2), b"v")])


@both_paths
def test_an_append_that_sqlite_refuses_is_fatal_and_leaves_only_abort(
    native: bool, log_factory: Callable[..., EmbeddedLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    _use(native, monkeypatch)
    log = log_factory()
    log.ensure_topics([TOPIC])
    # A row at the next offset that the partition's high-water mark does not know of.
    with sqlite3.connect(log.path / embedded_store.DB_FILE) as other:
        other.execute("INSERT INTO records VALUES (1, 0, 0, x'01', x'02', 0)")
    other.close()
    txn = log.begin()
    with pytest.raises(LogFatal, match="UNIQUE constraint failed"):
        txn.append([Record(TOPIC, key(1), b"v")])
    with pytest.raises(LogError, match="failed"):
        txn.commit()
    txn.abort()


def test_the_native_appender_only_takes_its_own_file(tmp_path: Path) -> None:
    if not embedded_native.available():
        if in_ci():
            pytest.fail("the native log appender was not built")
        pytest.skip("the native log appender is not built (no Rust toolchain)")
    conn = sqlite3.connect(tmp_path / "a.db")
    assert embedded_native.appender(conn, tmp_path / "a.db") is not None
    assert embedded_native.appender(conn, tmp_path / "b.db") is None
    conn.close()
    assert embedded_native.appender(conn, tmp_path / "a.db") is None  # closed: no handle
