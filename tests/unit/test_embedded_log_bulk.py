"""A bulk load (cdc/log/embedded/bulk.py): the key index dropped while a snapshot writes each key
once, built in one pass at its end; lookups, compaction and a crash in between stay correct."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cdc.log.base import Record
from cdc.log.embedded import EmbeddedLog
from cdc.log.embedded import bulk as embedded_bulk
from cdc.log.embedded import compaction as embedded_compaction
from cdc.log.embedded import log as embedded_log
from tests.unit.embedded_log_kit import TOPIC, opened_logs, values
from tests.unit.log_suite import append, key, read_all


@pytest.fixture
def log_factory(tmp_path: Path) -> Iterator[Callable[..., EmbeddedLog]]:
    yield from opened_logs(tmp_path)


def _indexed(path: Path) -> bool:
    """Whether the key index exists, as another connection sees the file."""
    conn = sqlite3.connect(path / "log" / "log.sqlite3")
    try:
        return embedded_bulk.indexed(conn)
    finally:
        conn.close()


def _uses_key_index(log: EmbeddedLog) -> bool:
    """Whether a key lookup seeks the key index (not a scan of the partition)."""
    plan = log._conn().execute(f"EXPLAIN QUERY PLAN {embedded_log._LATEST}", (1, 0, key(1)))
    return any("records_by_key" in row[-1] for row in plan.fetchall())


def test_a_bulk_load_drops_the_index_and_builds_it_back(
    log_factory: Callable[..., EmbeddedLog], tmp_path: Path
) -> None:
    log = log_factory(partitions=2)
    assert log.defer_key_index()
    assert not _indexed(tmp_path)
    append(log, [Record(TOPIC, key(i), b"r%d" % i) for i in range(100)], {"chunk": 1})
    assert log.maybe_compact() is None  # waits for the load to end
    log.build_key_index()
    assert _indexed(tmp_path) and _uses_key_index(log)
    assert log.source_offsets() == {"chunk": 1}
    append(log, [Record(TOPIC, key(i), b"s%d" % i) for i in range(0, 100, 2)])
    assert log.latest_value(TOPIC, key(2)) == b"s2"
    assert log.latest_value(TOPIC, key(3)) == b"r3"
    assert log.compact() == {"superseded": 50, "tombstones": 0}
    kept = sorted(r.value or b"" for r in read_all(log, TOPIC))
    assert kept == sorted(
        [b"s%d" % i for i in range(0, 100, 2)] + [b"r%d" % i for i in range(1, 100, 2)]
    )


def test_a_key_lookup_during_a_load_builds_the_index_first(
    log_factory: Callable[..., EmbeddedLog], tmp_path: Path
) -> None:
    log = log_factory()
    assert log.defer_key_index()
    tx = log.begin()
    tx.append([Record(TOPIC, key(1), b"snapshot")])
    # Inside the open transaction: the index is built in it and sees its records.
    assert log.latest_value(TOPIC, key(1)) == b"snapshot"
    tx.commit()
    assert _indexed(tmp_path)
    assert log.maybe_compact() is None  # nothing to compact; the load is over either way


def test_a_log_holding_records_keeps_its_index(
    log_factory: Callable[..., EmbeddedLog], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(embedded_bulk, "DEFER_UP_TO_RECORDS", 10)
    log = log_factory()
    append(log, [Record(TOPIC, key(i), b"a") for i in range(11)])
    assert not log.defer_key_index()
    assert _indexed(tmp_path)
    monkeypatch.setattr(embedded_compaction, "MIN_DIRTY", 5)
    append(log, [Record(TOPIC, key(i), b"b") for i in range(11)])
    assert log.maybe_compact() == {"superseded": 11, "tombstones": 0}


def test_a_load_cut_short_is_indexed_by_the_next_compaction(
    log_factory: Callable[..., EmbeddedLog], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A crash mid-snapshot leaves the index missing: another log object (the next process)
    builds it before its first compaction pass, which then removes what is superseded."""
    monkeypatch.setattr(embedded_compaction, "MIN_DIRTY", 5)
    loading = log_factory()
    assert loading.defer_key_index()
    append(loading, [Record(TOPIC, key(i), b"r%d" % i) for i in range(10)])
    loading.close()  # never built: as after a SIGKILL
    assert not _indexed(tmp_path)
    log = log_factory()
    append(log, [Record(TOPIC, key(i), b"s%d" % i) for i in range(5)])
    assert log.maybe_compact() == {"superseded": 5, "tombstones": 0}
    assert _indexed(tmp_path)
    assert [v for _, _, v in values(log)] == [b"r5", b"r6", b"r7", b"r8", b"r9"] + [
        b"s%d" % i for i in range(5)
    ]


def test_a_compaction_pass_stops_where_the_index_is_missing(
    log_factory: Callable[..., EmbeddedLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass that began before a load (in another process) dropped the index stops at its
    next chunk instead of scanning the partition for each record; the load's own process
    leaves compaction alone until the load ends."""
    monkeypatch.setattr(embedded_compaction, "CHUNK_RECORDS", 4)
    log = log_factory()
    for round_ in range(3):
        append(log, [Record(TOPIC, key(i), b"%d" % round_) for i in range(8)])
    other = log_factory()
    assert other.defer_key_index()
    assert embedded_compaction.compact(log._conn(), 0) == {"superseded": 0, "tombstones": 0}
    assert other.compact() == {"superseded": 0, "tombstones": 0}
    assert len(values(log)) == 24
    other.build_key_index()
    assert log.compact() == {"superseded": 16, "tombstones": 0}
