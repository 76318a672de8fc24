"""The stored source offsets' one codec (cdc.log.offsets): the bytes both logs store per key,
pinned from the writers before the codec, and what a store leaves (the Kafka log's latest
images derive it without reading the topic, so it must agree with a real log's read)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from cdc.log.embedded import EmbeddedLog
from cdc.log.offsets import decode_offset, encode_offset, stored_after
from connectors.postgres.lsn import Lsn

#: The embedded log's ``source_offsets`` rows for PostgreSQL's position, the captured tables and
#: the filters, as the log stored them before this codec (read from its SQLite file).
ROWS_BEFORE = [
    ("captured", b'["public.a"]'),
    ("filters", b'{"public.a":"x"}'),
    ("postgres", b'{"lsn":6093753672,"lsn_str":"1/6B374D48"}'),
]


def stored_rows(path: Path) -> list[tuple[str, bytes]]:
    with sqlite3.connect(path / "log.sqlite3") as con:
        return con.execute("SELECT key, value FROM source_offsets ORDER BY key").fetchall()


def test_the_log_stores_the_bytes_it_stored_before(tmp_path: Path) -> None:
    log = EmbeddedLog(tmp_path / "log")
    try:
        tx = log.begin()
        items = {"captured": ["public.a"], "filters": {"public.a": "x"}, "gone": None}
        tx.store_offsets(Lsn(0x16B374D48).to_offsets().with_items(items))
        tx.commit()
    finally:
        log.close()
    assert stored_rows(tmp_path / "log") == ROWS_BEFORE


def test_the_bytes_stored_before_decode_to_the_position() -> None:
    offsets = {key: decode_offset(value) for key, value in ROWS_BEFORE}
    assert Lsn.from_offsets(offsets) == Lsn(0x16B374D48)
    assert offsets["captured"] == ["public.a"]
    assert [encode_offset(offsets[key]) for key, _ in ROWS_BEFORE] == [v for _, v in ROWS_BEFORE]


def test_none_deletes_the_key() -> None:
    assert encode_offset(None) is None
    assert stored_after({"a": 1, "b": 2}, {"a": None, "c": None}) == {"b": 2}


def test_what_a_store_leaves_is_what_the_log_reads_back(tmp_path: Path) -> None:
    before: dict[str, Any] = {"keep": {"n": 1}, "drop": [1], "change": "old"}
    changes: dict[str, Any] = {"drop": None, "change": ("new", 2), "add": {"t": (1, 2)}}
    log = EmbeddedLog(tmp_path / "log")
    try:
        for offsets in (before, changes):
            tx = log.begin()
            tx.store_offsets(offsets)
            tx.commit()
        read = log.source_offsets()
    finally:
        log.close()
    assert (
        stored_after(before, changes)
        == read
        == {
            "keep": {"n": 1},
            "change": ["new", 2],
            "add": {"t": [1, 2]},
        }
    )
