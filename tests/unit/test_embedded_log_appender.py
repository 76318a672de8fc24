"""The native appender (cdc/log/embedded/appender.py) and executemany give the same log."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cdc.contracts.errors import LogError, LogFatal
from cdc.log.base import Record
from cdc.log.embedded import EmbeddedLog
from cdc.log.embedded import appender as embedded_native
from cdc.log.embedded import store as embedded_store
from tests.services.common import in_ci
from tests.unit.embedded_log_kit import TOPIC, both_paths, opened_logs, values
from tests.unit.embedded_log_kit import use_appender as _use
from tests.unit.log_suite import append, key


@pytest.fixture
def log_factory(tmp_path: Path) -> Iterator[Callable[..., EmbeddedLog]]:
    yield from opened_logs(tmp_path)


def _count_native_appends(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    original = embedded_native.NativeAppender.append

    def counted(self: embedded_native.NativeAppender, *args: Any) -> Any:
        result = original(self, *args)
        calls.append(len(args[5]))  # sql, topic id, partition, first, ts, records, heads
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
    assert isinstance(tx._appender, embedded_native.RustAppender) is native
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
        other.execute("INSERT INTO records VALUES (1, 0, 0, x'01', x'02', 0, NULL, NULL, NULL)")
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
    rust, python = embedded_native.RustAppender, embedded_native.PythonAppender
    assert isinstance(embedded_native.choose(conn, tmp_path / "a.db"), rust)
    assert isinstance(embedded_native.choose(conn, tmp_path / "b.db"), python)
    conn.close()
    assert isinstance(embedded_native.choose(conn, tmp_path / "a.db"), python)  # no handle
