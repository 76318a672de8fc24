"""Value frames go with their last record (cdc/log/embedded/frames.py ``collect``): a log that
keeps updating the same keys keeps a bounded number of frame rows and a bounded file; readers
racing compaction get every value; a compaction killed mid-pass loses nothing; a version 4 log's
frames get their ranges."""

from __future__ import annotations

import re
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cdc.log.base import Record
from cdc.log.embedded import EmbeddedLog
from cdc.log.embedded import consumer as embedded_consumer
from cdc.log.embedded import frames as embedded_frames
from cdc.testing import wait_until
from tests.unit.embedded_log_kit import TOPIC, both_paths, opened_logs, use_appender
from tests.unit.log_suite import append, key, read_all

KEYS = 1200  # one append of them all gets a frame (frames.MIN_RECORDS)
SOURCE = b',"source":{"version":"3.1.0.Final","connector":"postgresql","name":"shop"},"op":"u"}'


ID_AND_ROUND = re.compile(rb'"id":(\d+),"n":(\d+)')


def envelope(i: int, round_: int) -> bytes:
    return b'{"before":null,"after":{"id":%d,"n":%d,"pad":"%b"}%b' % (i, round_, b"x" * 80, SOURCE)


def round_of(round_: int) -> list[Record]:
    return [
        Record(TOPIC, key(i), envelope(i, round_), b"[%d,%d]" % (round_, i)) for i in range(KEYS)
    ]


@pytest.fixture
def log_factory(tmp_path: Path) -> Iterator[Callable[..., EmbeddedLog]]:
    yield from opened_logs(tmp_path)


def count(log: EmbeddedLog, sql: str) -> int:
    return int(log._conn().execute(sql).fetchone()[0])


def frame_rows(log: EmbeddedLog) -> int:
    return count(log, "SELECT count(*) FROM value_frames")


def dangling(log: EmbeddedLog) -> int:
    """Records whose frame is gone."""
    return count(
        log,
        "SELECT count(*) FROM records AS r WHERE r.frame_id IS NOT NULL"
        " AND NOT EXISTS (SELECT 1 FROM value_frames AS f WHERE f.id = r.frame_id)",
    )


@both_paths
def test_updating_the_same_keys_keeps_frames_and_the_file_bounded(
    native: bool, log_factory: Callable[..., EmbeddedLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    use_appender(native, monkeypatch)
    log = log_factory()
    pages = []
    for round_ in range(30):
        append(log, round_of(round_))
        assert log.compact()["superseded"] == (KEYS if round_ else 0)
        pages.append(count(log, "PRAGMA page_count"))
        # The round's own frame is all that is left (the executemany path stores none).
        assert frame_rows(log) == (1 if native else 0)
        assert dangling(log) == 0
    assert [r.value for r in read_all(log, TOPIC)] == [envelope(i, 29) for i in range(KEYS)]
    # Freed pages are used again: the file stops growing once a round's garbage fits in them.
    assert pages[-1] <= pages[4]


@both_paths
def test_a_reader_between_its_fetch_and_its_frames_still_gets_every_value(
    native: bool, log_factory: Callable[..., EmbeddedLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Compaction commits (deleting the records the reader just fetched, and their frame)
    between the reader's fetch and its frame lookups: the reader's snapshot still has both."""
    use_appender(native, monkeypatch)
    writer = log_factory()
    append(writer, round_of(0))
    append(writer, round_of(1))
    reader = EmbeddedLog(writer.path)  # another process's cache: no frame read yet
    consumer = reader.consumer("g", [TOPIC])
    fetched = embedded_consumer.stored_records
    compacted: list[dict[str, int]] = []

    def compact_then_build(*args: object) -> object:
        if not compacted:  # another thread: its own connection, committed at once
            thread = threading.Thread(target=lambda: compacted.append(writer.compact()))
            thread.start()
            thread.join()
        return fetched(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(embedded_consumer, "stored_records", compact_then_build)
    try:
        got = consumer.poll(2 * KEYS, 1.0)
    finally:
        consumer.close()
        reader.close()
    assert compacted == [{"superseded": KEYS, "tombstones": 0}]
    assert [r.value for r in got] == [envelope(i, 0) for i in range(KEYS)] + [
        envelope(i, 1) for i in range(KEYS)
    ]
    assert frame_rows(writer) == (1 if native else 0)


def test_readers_polling_while_rounds_are_appended_and_compacted_see_every_value(
    log_factory: Callable[..., EmbeddedLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    use_appender(True, monkeypatch)
    log = log_factory()
    append(log, round_of(0))
    done = threading.Event()
    errors: list[BaseException] = []
    rounds: list[int] = []

    def read() -> None:
        consumer = log.consumer("g", [TOPIC])
        last: tuple[int, bytes | None] = (0, None)
        try:
            while not (done.is_set() and last == (19, key(KEYS - 1))):
                for record in consumer.poll(500, 0.05):
                    assert record.value is not None and record.key is not None
                    i, round_ = map(int, ID_AND_ROUND.search(record.value).groups())  # type: ignore[union-attr]
                    assert (record.key, record.value) == (key(i), envelope(i, round_))
                    last = (round_, record.key)
                    rounds.append(round_)
        except BaseException as exc:  # the reader's failure is the test's
            errors.append(exc)
        finally:
            consumer.close()

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    for round_ in range(1, 20):
        append(log, round_of(round_))
        log.compact()
    done.set()
    thread.join(60)
    assert not thread.is_alive() and errors == []
    assert rounds[-KEYS:] == [19] * KEYS and frame_rows(log) == 1


# Compacts the log at argv[1] pass after pass until killed.
COMPACTOR = """
import sys
from pathlib import Path
from cdc.log.embedded import EmbeddedLog
log = EmbeddedLog(Path(sys.argv[1]))
print("ready", flush=True)
while True:
    log.compact()
"""


def test_a_compaction_killed_mid_pass_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_appender(True, monkeypatch)
    with EmbeddedLog(tmp_path / "log") as log:
        for round_ in range(8):
            append(log, round_of(round_))
        before = frame_rows(log)
    compactor = subprocess.Popen(
        [sys.executable, "-c", COMPACTOR, str(tmp_path / "log")], stdout=subprocess.PIPE
    )
    try:
        assert compactor.stdout is not None and compactor.stdout.readline() == b"ready\n"
        with EmbeddedLog(tmp_path / "log") as log:  # killed once its first chunk committed

            def compacted() -> bool:
                if count(log, "SELECT count(*) FROM records") != 8 * KEYS:
                    return True
                assert compactor.poll() is None, "the compactor exited before compacting"
                return False

            wait_until(compacted, 60, 0.001, describe="a compaction chunk committed")
    finally:
        compactor.send_signal(signal.SIGKILL)
        compactor.wait()
    with EmbeddedLog(tmp_path / "log") as log:
        assert dangling(log) == 0
        latest = {r.key: r.value for r in read_all(log, TOPIC)}
        assert latest == {key(i): envelope(i, 7) for i in range(KEYS)}
        assert frame_rows(log) < before
        log.compact()
        assert frame_rows(log) == 1 and dangling(log) == 0


def test_a_version_4_log_gets_its_frames_ranges_and_drops_unused_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_appender(True, monkeypatch)
    with EmbeddedLog(tmp_path / "log") as log:
        for round_ in range(3):
            append(log, round_of(round_))
    # What version 4 wrote: frames without ranges, numbered without AUTOINCREMENT; frame 1's
    # records compacted away by a version that left it behind.
    conn = sqlite3.connect(tmp_path / "log" / "log.sqlite3")
    conn.executescript(
        "CREATE TABLE old_frames (id INTEGER PRIMARY KEY, prefix BLOB NOT NULL,"
        " suffix BLOB NOT NULL); INSERT INTO old_frames SELECT id, prefix, suffix"
        " FROM value_frames; DROP TABLE value_frames;"
        " ALTER TABLE old_frames RENAME TO value_frames;"
        " DELETE FROM records WHERE frame_id = 1; PRAGMA user_version = 4;"
    )
    conn.close()
    with EmbeddedLog(tmp_path / "log") as log:
        rows = log._conn().execute(
            "SELECT id, topic_id, partition, first_offset, end_offset FROM value_frames"
        )
        assert rows.fetchall() == [(2, 1, 0, KEYS, 2 * KEYS), (3, 1, 0, 2 * KEYS, 3 * KEYS)]
        append(log, round_of(3))
        assert count(log, "SELECT max(id) FROM value_frames") == 4
        log.compact()
        assert frame_rows(log) == 1 and dangling(log) == 0
        assert [r.value for r in read_all(log, TOPIC)] == [envelope(i, 3) for i in range(KEYS)]


def test_the_newest_frame_id_is_never_given_again(
    log_factory: Callable[..., EmbeddedLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader may keep a collected frame's bytes: its id must never name another frame."""
    use_appender(True, monkeypatch)
    log = log_factory()
    append(log, round_of(0))
    log._conn().execute("DELETE FROM records")
    assert embedded_frames.collect(log._conn(), [1]) == 1 and frame_rows(log) == 0
    append(log, round_of(1))
    assert count(log, "SELECT id FROM value_frames") == 2


def test_a_batch_the_native_appender_refuses_leaves_no_frame(
    log_factory: Callable[..., EmbeddedLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A key the native appender does not take (a bytearray) after the frame was computed from
    # the values: the batch goes through executemany, which stores it without the frame.
    use_appender(True, monkeypatch)
    log = log_factory()
    records = round_of(0)
    last = records[-1]
    records[-1] = Record(last.topic, bytearray(last.key or b""), last.value, last.pos)  # type: ignore[arg-type]
    append(log, records)
    assert frame_rows(log) == 0
    assert len(read_all(log, TOPIC)) == KEYS
