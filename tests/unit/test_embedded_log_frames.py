"""Value frames (cdc/log/embedded/frames.py): a large batch's shared prefix and suffix stored once,
every value read back byte for byte; a version 3 log is migrated."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cdc.log.base import Record
from cdc.log.embedded import EmbeddedLog
from cdc.log.embedded import frames as embedded_frames
from cdc.log.embedded.store import SCHEMA_VERSION
from tests.unit.embedded_log_kit import TOPIC, both_paths, opened_logs, use_appender
from tests.unit.log_suite import append, key, read_all

SOURCE = b',"source":{"version":"3.1.0.Final","connector":"postgresql","name":"shop"},"op":"r"}'
HEAD = b'{"schema":{"type":"struct","name":"shop.public.customers.Envelope"},"payload":'


def envelope(i: int, name: bytes = b"customer") -> bytes:
    return b'{"before":null,"after":{"id":%d,"name":"%b %d"}%b' % (i, name, i, SOURCE)


@pytest.fixture
def log_factory(tmp_path: Path) -> Iterator[Callable[..., EmbeddedLog]]:
    yield from opened_logs(tmp_path)


def _raw(log: EmbeddedLog) -> list[tuple[bytes | None, int | None]]:
    rows = log._conn().execute("SELECT value, frame_id FROM records ORDER BY offset")
    return rows.fetchall()


def _batch(values: list[bytes | None]) -> list[Record]:
    return [Record(TOPIC, key(i), v, b"[9,%d]" % i) for i, v in enumerate(values)]


@both_paths
def test_a_large_batch_is_stored_framed_and_read_back_exactly(
    native: bool, log_factory: Callable[..., EmbeddedLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    use_appender(native, monkeypatch)
    log = log_factory()
    values: list[bytes | None] = [envelope(i) for i in range(1500)]
    values[7] = None  # a tombstone among them
    values[8] = b'{"before":null,"after":{"id":"}' + SOURCE  # the frame and nothing else
    values[9] = b'{"before":null,"after":{}' + SOURCE  # shorter than the frame: stored whole
    values[0] = b'{"before":null,"after":{"id":0}}'  # held back from an earlier batch
    records = _batch(values)
    append(log, records)
    assert [(r.key, r.value, r.pos) for r in read_all(log, TOPIC)] == [
        (r.key, r.value, r.pos) for r in records
    ]
    assert log.latest_value(TOPIC, key(3)) == values[3]
    consumer = log.consumer("g", [TOPIC])
    assert [r.value for r in consumer.poll(2000, 1.0)] == values
    consumer.close()
    raw = _raw(log)
    if not native:  # executemany stores every value whole
        assert raw == [(v, None) for v in values]
        return
    frame_ids = {f for _, f in raw if f is not None}
    assert len(frame_ids) == 1 and raw[7] == (None, None)
    assert raw[8][0] == b""  # all of it is the frame: an empty value, not a tombstone
    assert raw[9] == (values[9], None) and raw[0] == (values[0], None)
    assert raw[1][0] == b'1,"name":"customer 1'
    stored = sum(len(v or b"") for v, _ in raw)
    assert stored < sum(len(v or b"") for v in values) / 4


def test_frames_sit_inside_value_heads(log_factory: Callable[..., EmbeddedLog]) -> None:
    use_appender(True, pytest.MonkeyPatch())
    log = log_factory()
    values = [b"%b%b}" % (HEAD, envelope(i)) for i in range(1200)]
    append(log, _batch(values))
    assert [r.value for r in read_all(log, TOPIC)] == values
    assert log.latest_value(TOPIC, key(1199)) == values[-1]
    heads = log._conn().execute("SELECT head_id, frame_id FROM records").fetchall()
    assert all(h is not None and f is not None for h, f in heads)


def test_small_or_unalike_batches_get_no_frame(log_factory: Callable[..., EmbeddedLog]) -> None:
    use_appender(True, pytest.MonkeyPatch())
    log = log_factory()
    append(log, _batch([envelope(i) for i in range(embedded_frames.MIN_RECORDS - 1)]))
    unalike = [b"%d" % i * 40 for i in range(1200)]
    append(log, [Record(TOPIC, key(i), v) for i, v in enumerate(unalike)])
    assert {f for _, f in _raw(log)} == {None}
    assert log._conn().execute("SELECT count(*) FROM value_frames").fetchone()[0] == 0


def test_an_aborted_frame_is_never_read(log_factory: Callable[..., EmbeddedLog]) -> None:
    """An aborted transaction's frame id is given again to the next frame: no reader keeps
    the aborted one."""
    use_appender(True, pytest.MonkeyPatch())
    log = log_factory()
    tx = log.begin()
    tx.append(_batch([envelope(i, b"aborted") for i in range(1200)]))
    assert log.latest_value(TOPIC, key(5)) == envelope(5, b"aborted")  # read inside the tx
    tx.abort()
    values = [envelope(i, b"kept") for i in range(1200)]
    append(log, _batch(values))
    assert log.latest_value(TOPIC, key(5)) == values[5]
    assert [r.value for r in read_all(log, TOPIC)] == values


def test_a_version_3_log_is_migrated_and_keeps_its_records(tmp_path: Path) -> None:
    with EmbeddedLog(tmp_path / "log") as log:
        append(log, [Record(TOPIC, key(1), b"old", b"[1,0]")])
    # What version 3 wrote: no frame_id column, no value_frames table.
    conn = sqlite3.connect(tmp_path / "log" / "log.sqlite3")
    conn.executescript(
        "DROP TABLE value_frames; ALTER TABLE records DROP COLUMN frame_id;"
        " PRAGMA user_version = 3;"
    )
    conn.close()
    use_appender(True, pytest.MonkeyPatch())
    with EmbeddedLog(tmp_path / "log") as log:
        assert log._conn().execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        values = [envelope(i) for i in range(1200)]
        append(log, [Record(TOPIC, key(i + 2), v) for i, v in enumerate(values)])
        read = read_all(log, TOPIC)
        assert (read[0].value, read[0].pos) == (b"old", b"[1,0]")
        assert [r.value for r in read[1:]] == values
        assert _raw(log)[0] == (b"old", None) and _raw(log)[1][1] is not None


def test_a_reader_keeps_a_bounded_number_of_frames(tmp_path: Path) -> None:
    # A long-running consumer meets a new frame every few thousand records: its cache of
    # frames must not grow with the log's history.
    conn = sqlite3.connect(tmp_path / "frames.db", isolation_level=None)
    conn.execute(embedded_frames.VALUE_FRAMES)
    ids = [
        embedded_frames.store(conn, b"<%d|" % i, b"|%d>" % i, embedded_frames.Range(1, 0, i, i + 1))
        for i in range(embedded_frames.CACHED * 3)
    ]
    cache = embedded_frames.ValueFrames()
    for frame_id in ids:
        assert cache.framed(conn, frame_id, b"x", committed=True) == b"<%d|x|%d>" % (
            frame_id - 1,
            frame_id - 1,
        )
        assert len(cache._by_id) <= embedded_frames.CACHED
    assert cache.framed(conn, ids[-1], b"y", committed=True) == b"<%d|y|%d>" % (
        ids[-1] - 1,
        ids[-1] - 1,
    )
