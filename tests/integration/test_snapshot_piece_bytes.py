"""A snapshot of 1 MB values (incompressible text, TOASTed out of line) against a real
PostgreSQL 15: every read of a chunk hands its rows on in pieces bounded by bytes as well as rows
(the source's ``max_batch_bytes``), complete and in order, each chunk's rows split across
pieces and its end marked once, on its last piece."""

from __future__ import annotations

import hashlib
import time
from collections import defaultdict
from typing import Any

import orjson
import psycopg
import pytest
import structlog

from connectors.postgres.catalog import Catalog
from connectors.postgres.snapshot.parallel import ExportedSnapshotReader, Piece, ReadSettings
from connectors.postgres.snapshot.reader import (
    SnapshotTable,
    chunk_query,
    describe,
    plan,
    read_lines,
)
from connectors.postgres.types.registry import TypeRegistry

ROWS = 24
VALUE = 1_000_000  # bytes a row: md5 hex, incompressible, stored out of line
PIECE_BYTES = 4 * 1024 * 1024  # four rows and a bit: the fifth row crosses it
PER_PIECE = PIECE_BYTES // VALUE + 1
FILL = f"""INSERT INTO big SELECT g,
    (SELECT string_agg(md5(g::text || '.' || i), '') FROM generate_series(1, {VALUE // 32}) i)
    FROM generate_series(1, {ROWS}) g"""

pytestmark = pytest.mark.pgcore


@pytest.fixture
def big(pg_db: str) -> str:
    with psycopg.connect(pg_db, autocommit=True) as conn:
        conn.execute("CREATE TABLE big (id int PRIMARY KEY, payload text NOT NULL)")
        conn.execute(FILL)
        # Out of line, as 1 MB values always are: the test reads TOASTed values.
        [(toasted,)] = conn.execute(
            "SELECT pg_relation_size(reltoastrelid) > 0 FROM pg_class WHERE relname = 'big'"
        ).fetchall()
    assert toasted
    return pg_db


def _digests(dsn: str) -> dict[int, str]:
    with psycopg.connect(dsn) as conn:
        return dict(conn.execute("SELECT id, md5(payload) FROM big").fetchall())


def _md5(text: str) -> str:
    return hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()


def _describe(dsn: str) -> SnapshotTable:
    catalog = Catalog(dsn, "test", 10)
    try:
        info = catalog.table("public", "big", catalog.check_role())
        return describe(catalog, TypeRegistry(), "pb", info, None, None)
    finally:
        catalog.close()


def test_a_chunk_of_1mb_values_is_read_in_pieces_bounded_by_bytes(big: str) -> None:
    table = _describe(big)
    with psycopg.connect(big) as conn:
        [chunk] = plan(conn, table, ROWS * 2)
        pieces = list(read_lines(conn, chunk_query(table, chunk, None), 5000, False, PIECE_BYTES))
    # Without the byte bound: one piece of all 24 rows (24 MB).
    assert [len(p) for p in pieces] == [PER_PIECE] * (ROWS // PER_PIECE) + [ROWS % PER_PIECE]
    lines = [line.rstrip(b"\n").split(b"\t") for piece in pieces for line in piece]
    digests = _digests(big)
    assert {int(i): _md5(v.decode()) for i, v in lines} == digests


def test_the_exported_snapshot_reader_hands_on_chunks_in_pieces_bounded_by_bytes(
    big: str,
) -> None:
    table = _describe(big)
    holder = psycopg.connect(big)  # holds the exported snapshot open while the workers read
    try:
        holder.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        [(name,)] = holder.execute("SELECT pg_export_snapshot()").fetchall()
        chunks = plan(holder, table, 10)
        pieces = _read_all(big, str(name), [(table, chunk) for chunk in chunks])
    finally:
        holder.close()
    assert len(chunks) == 3  # 10, 10 and 4 rows
    by_chunk: dict[int, list[Piece]] = defaultdict(list)
    for piece in pieces:
        by_chunk[piece.chunk].append(piece)
    rows: dict[int, str] = {}
    for index, chunk_pieces in by_chunk.items():
        *reads, end = chunk_pieces
        # A chunk's rows split across pieces of at most PER_PIECE rows (about PIECE_BYTES);
        # its end comes once, after them, with the chunk's row count: progress moves there.
        assert all(not p.last and 0 < len(p.records) <= PER_PIECE for p in reads), index
        assert end.last and not end.records
        assert end.rows == sum(len(p.records) for p in reads) == (4 if index == 2 else 10)
        for piece in reads:
            for record in piece.records:
                after = orjson.loads(record.value or b"{}")["after"]
                rows[after["id"]] = _md5(after["payload"])
    assert sorted(by_chunk) == [0, 1, 2]
    assert len(pieces) > len(chunks) * 2  # without the byte bound: one piece a chunk
    assert rows == _digests(big)


def _read_all(dsn: str, snapshot: str, work: list[Any]) -> list[Piece]:
    settings = ReadSettings(
        dsn=dsn,
        connect_timeout_s=10,
        pipeline="pb",
        db="db",
        position=1,
        ts_ms=0,
        piece_bytes=PIECE_BYTES,
    )
    reader = ExportedSnapshotReader(settings, snapshot, work, 1, structlog.get_logger())
    reader.start()
    pieces: list[Piece] = []
    deadline = time.monotonic() + 60
    try:
        while not reader.finished:
            assert time.monotonic() < deadline, [(p.chunk, len(p.records)) for p in pieces]
            piece = reader.next(0.5)
            if piece is not None:
                pieces.append(piece)
    finally:
        reader.close()
    return pieces
