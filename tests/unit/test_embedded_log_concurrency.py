"""The embedded log shared by several processes and threads: dense offsets for racing writers,
polls woken by another process's or thread's commit, and compaction giving way to a writer.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cdc.contracts.errors import LogUnavailable
from cdc.log.base import Record
from cdc.log.embedded import EmbeddedLog
from cdc.log.embedded import compaction as embedded_compaction
from cdc.log.embedded import consumer as embedded_consumer
from tests.unit.embedded_log_kit import TOPIC, opened_logs
from tests.unit.log_suite import append, key, read_all


@pytest.fixture
def log_factory(tmp_path: Path) -> Iterator[Callable[..., EmbeddedLog]]:
    yield from opened_logs(tmp_path)


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
