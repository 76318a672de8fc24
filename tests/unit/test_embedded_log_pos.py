"""The embedded log keeps a record's source position beside its value (the ``pos`` column), on
both append paths; a log written before it (schema version 2, the position inside the value's
``source.pos``) is migrated, and its records keep their positions."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest

from cdc.envelope.encode import record_pos
from cdc.log.base import Record
from cdc.log.embedded import EmbeddedLog
from cdc.log.embedded.store import SCHEMA_VERSION
from tests.unit.embedded_log_kit import TOPIC, both_paths, opened_logs
from tests.unit.embedded_log_kit import use_appender as _use
from tests.unit.log_suite import append, key, read_all


@pytest.fixture
def log_factory(tmp_path: Path) -> Iterator[Callable[..., EmbeddedLog]]:
    yield from opened_logs(tmp_path)


def _change(n: int) -> bytes:
    return orjson.dumps({"before": None, "after": {"id": n}, "source": {"lsn": n}, "op": "c"})


@both_paths
def test_a_record_keeps_its_position_beside_its_value(
    native: bool, log_factory: Callable[..., EmbeddedLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    _use(native, monkeypatch)
    log = log_factory()
    log.ensure_topics([TOPIC])
    append(
        log,
        [
            Record(TOPIC, key(1), _change(1), b"[10,0]"),
            Record(TOPIC, key(1), None),  # a tombstone: no position
            Record(TOPIC, key(2), _change(2), b"[10,1]"),
        ],
    )
    stored = read_all(log, TOPIC)
    assert [(r.value, r.pos) for r in stored] == [
        (_change(1), b"[10,0]"),
        (None, None),
        (_change(2), b"[10,1]"),
    ]
    assert b"pos" not in b"".join(r.value or b"" for r in stored)  # the value is Debezium's
    assert record_pos(stored[2].pos, orjson.loads(stored[2].value or b"")) == (10, 1)


_V2_RECORDS = """CREATE TABLE records (
    topic_id INTEGER NOT NULL, partition INTEGER NOT NULL, offset INTEGER NOT NULL,
    key BLOB, value BLOB, ts_ms INTEGER NOT NULL, head_id INTEGER,
    PRIMARY KEY (topic_id, partition, offset)) WITHOUT ROWID"""


def test_a_version_2_log_is_migrated_and_its_records_keep_their_positions(
    tmp_path: Path,
) -> None:
    with EmbeddedLog(tmp_path / "log") as log:
        log.ensure_topics([TOPIC])
    # What version 2 wrote: no pos column, the position in the value's source.pos.
    old = orjson.dumps({"after": {"id": 1}, "source": {"lsn": 7, "pos": [7, 3]}, "op": "c"})
    conn = sqlite3.connect(tmp_path / "log" / "log.sqlite3")
    conn.executescript(
        f"DROP INDEX records_by_key; DROP TABLE records; {_V2_RECORDS};"
        " CREATE INDEX records_by_key ON records (topic_id, partition, key, offset);"
        " UPDATE partitions SET next_offset = 1, record_count = 1; PRAGMA user_version = 2;"
    )
    conn.execute("INSERT INTO records VALUES (1, 0, 0, ?, ?, 0, NULL)", (key(1), old))
    conn.commit()
    conn.close()

    with EmbeddedLog(tmp_path / "log") as log:
        assert log._conn().execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        append(log, [Record(TOPIC, key(2), _change(2), b"[8,0]")])
        first, second = read_all(log, TOPIC)
        assert (first.value, first.pos) == (old, None)
        assert record_pos(first.pos, orjson.loads(old)) == (7, 3)  # from the value
        assert (second.offset, second.pos) == (1, b"[8,0]")
        assert record_pos(second.pos, orjson.loads(_change(2))) == (8, 0)
