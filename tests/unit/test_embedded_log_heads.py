"""The embedded log stores a ``schemas.enable`` value's head once (cdc/log/embedded/heads.py) and
gives every value back byte for byte, on both append paths, to every reader."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest

from cdc.log.base import Record
from cdc.log.embedded import EmbeddedLog
from cdc.log.embedded.store import SCHEMA_VERSION
from tests.unit.embedded_log_kit import TOPIC, both_paths, opened_logs, values
from tests.unit.embedded_log_kit import use_appender as _use
from tests.unit.log_suite import append, key


@pytest.fixture
def log_factory(tmp_path: Path) -> Iterator[Callable[..., EmbeddedLog]]:
    yield from opened_logs(tmp_path)


def wrapped(schema_name: str, payload: object) -> bytes:
    """A value as the JsonConverter writes it with schemas (a few hundred bytes of schema)."""
    schema = {
        "type": "struct",
        "fields": [{"type": "string", "optional": True, "field": f"f{i}"} for i in range(12)],
        "optional": False,
        "name": schema_name,
    }
    return orjson.dumps({"schema": schema, "payload": payload})


def stored_rows(log: EmbeddedLog) -> list[tuple[bytes | None, int | None]]:
    """The records table's raw ``(value, head_id)`` rows, in offset order."""
    rows = log._conn().execute("SELECT value, head_id FROM records ORDER BY offset").fetchall()
    return [(v, h) for v, h in rows]


LOOKALIKES = [
    b'{"schema":"public","table":"t"}',  # a plain value that starts like one
    b'{"schema":{"type":"struct"}}',  # a schema and no payload
    b'{"schema":{"type":"struct"},"payload":1',  # not closed
    b"",
    None,
]


@both_paths
def test_wrapped_values_keep_one_head_and_read_back_exactly(
    native: bool, log_factory: Callable[..., EmbeddedLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    _use(native, monkeypatch)
    log = log_factory()
    a = [wrapped("A.Envelope", {"id": i, "text": ',"payload":"x"}'}) for i in range(50)]
    b = [wrapped("B.Envelope", None), wrapped("B.Envelope", [1, 2])]
    originals = a[:25] + b + LOOKALIKES + a[25:]
    append(log, [Record(TOPIC, key(i), v) for i, v in enumerate(originals)])

    assert [v for _, _, v in values(log)] == originals  # read()
    consumer = log.consumer("g", [TOPIC])
    assert [r.value for r in consumer.poll(1000, 1.0)] == originals  # a consumer's poll
    consumer.close()
    assert log.latest_value(TOPIC, key(3)) == a[3]  # a key lookup

    heads = log._conn().execute("SELECT head FROM value_heads").fetchall()
    assert len(heads) == 2
    stored = stored_rows(log)
    for (value, head_id), original in zip(stored, originals, strict=True):
        if original in LOOKALIKES:
            assert (value, head_id) == (original, None)  # stored whole
        else:
            assert head_id is not None
            assert original is not None and value is not None
            assert len(value) < len(original) - 300  # the head is not stored again


@both_paths
def test_a_head_first_seen_in_an_aborted_transaction_is_stored_again(
    native: bool, log_factory: Callable[..., EmbeddedLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    _use(native, monkeypatch)
    log = log_factory()
    value = wrapped("A.Envelope", {"id": 1})
    txn = log.begin()
    txn.append([Record(TOPIC, key(1), value)])
    txn.abort()
    assert log._conn().execute("SELECT count(*) FROM value_heads").fetchone()[0] == 0
    append(log, [Record(TOPIC, key(1), value)])
    assert values(log) == [(0, key(1), value)]
    assert stored_rows(log)[0][1] is not None


@both_paths
def test_another_process_reads_heads_it_never_wrote(
    native: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _use(native, monkeypatch)
    originals = [wrapped("A.Envelope", {"id": i}) for i in range(3)]
    with EmbeddedLog(tmp_path / "log") as writer:
        append(writer, [Record(TOPIC, key(i), v) for i, v in enumerate(originals)])
    with EmbeddedLog(tmp_path / "log") as reader:  # a fresh head cache: read from value_heads
        assert [v for _, _, v in values(reader)] == originals
        append(reader, [Record(TOPIC, key(9), originals[0])])  # its known heads, from the file
        assert reader._conn().execute("SELECT count(*) FROM value_heads").fetchone()[0] == 1


_V1_RECORDS = """CREATE TABLE records (
    topic_id INTEGER NOT NULL, partition INTEGER NOT NULL, offset INTEGER NOT NULL,
    key BLOB, value BLOB, ts_ms INTEGER NOT NULL,
    PRIMARY KEY (topic_id, partition, offset)) WITHOUT ROWID"""


def test_a_version_1_log_is_migrated_and_keeps_its_records(tmp_path: Path) -> None:
    with EmbeddedLog(tmp_path / "log") as log:
        append(log, [Record(TOPIC, key(1), b'{"before":null}')])
    # Turn it back into what version 1 wrote: no head_id column, no value_heads table.
    conn = sqlite3.connect(tmp_path / "log" / "log.sqlite3")
    rows = conn.execute("SELECT topic_id, partition, offset, key, value, ts_ms FROM records")
    saved = rows.fetchall()
    conn.executescript(
        f"DROP TABLE value_heads; DROP INDEX records_by_key; DROP TABLE records; {_V1_RECORDS};"
        " CREATE INDEX records_by_key ON records (topic_id, partition, key, offset);"
        " PRAGMA user_version = 1;"
    )
    conn.executemany("INSERT INTO records VALUES (?, ?, ?, ?, ?, ?)", saved)
    conn.commit()
    conn.close()

    value = wrapped("A.Envelope", {"id": 2})
    with EmbeddedLog(tmp_path / "log") as log:
        append(log, [Record(TOPIC, key(2), value)])
        assert values(log) == [(0, key(1), b'{"before":null}'), (1, key(2), value)]
        assert log._conn().execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
