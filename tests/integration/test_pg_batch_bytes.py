"""A transaction of large TOASTed values against a real PostgreSQL 15: the source's polls are
bounded by ``max_batch_bytes`` (inserts, and updates whose unchanged TOAST values the source
fills in), split inside the transaction as ``max_batch_events`` splits it, and the whole
transaction reaches a real sink (JSON lines) complete and in order, read in batches bounded by
``batch_bytes``."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import quote

import orjson
import pytest
import structlog

from cdc.contracts.sink import SinkContext, SinkRecord
from cdc.runtime.schemas import SchemaCatalog
from cdc.runtime.sink_task import SinkTask, group_name
from cdc.testing import wait_until
from sinks.jsonl.config import JsonlSinkConfig
from sinks.jsonl.sink import JsonlSink
from tests.integration.pg_source_kit import PIPELINE, Harness, harness, query, sql

ROWS = 100
VALUE = 100_000  # bytes a row: incompressible md5 text, stored out of line (TOASTed)
MAX_BYTES = 1024 * 1024  # about 10 values a poll
FILL = f"""INSERT INTO big SELECT g, 0,
    (SELECT string_agg(md5(g::text || '.' || i), '') FROM generate_series(1, {VALUE // 32}) i)
    FROM generate_series(1, {ROWS}) g"""
TOPIC = f"{PIPELINE}.public.big"


def _digests(dsn: str) -> list[str]:
    """md5 of each row's payload, by id: what every copy downstream must hold."""
    return [row[0] for row in query(dsn, "SELECT md5(payload) FROM big ORDER BY id")]


def _md5(text: str) -> str:
    return hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()


def _polls(h: Harness, rows: int) -> list[tuple[int, int]]:
    """Step until ``rows`` events arrived and committed: each poll's (events, commits so far)."""
    polls: list[tuple[int, int]] = []
    deadline = time.monotonic() + 60
    before = len(h.commits)
    while sum(n for n, _ in polls) < rows or len(h.commits) == before:
        assert time.monotonic() < deadline, f"timed out after {polls}"
        seen = h.step(timeout_s=1.0)
        if seen:
            polls.append((seen, len(h.commits)))
    return polls


def _assert_bounded(polls: list[tuple[int, int]], commits_before: int) -> None:
    # Every poll stops once it holds MAX_BYTES (one value past it at most), and all but the
    # last are pieces of the open transaction: no offsets, nothing committed.
    per_poll = MAX_BYTES // VALUE + 1
    assert len(polls) >= 100 // per_poll, polls
    assert all(n <= per_poll for n, _ in polls), polls
    # Before the first piece, idle offers may have stored positions the server passed while it
    # decoded the transaction (IdleOffers: 50 ms apart, for read-your-writes fences).
    first = polls[0][1]
    assert first >= commits_before, polls
    assert [c for _, c in polls[:-1]] == [first] * (len(polls) - 1), polls
    assert polls[-1][1] == first + 1, polls


@pytest.mark.pgcore
def test_a_transaction_of_large_values_comes_in_polls_bounded_by_bytes(
    pg_db: str, tmp_path: Path
) -> None:
    sql(pg_db, "CREATE TABLE big (id int PRIMARY KEY, n int, payload text)")
    options = {"max_batch_events": 1000, "max_batch_bytes": MAX_BYTES}
    with harness(pg_db, tmp_path / "log", ["public.big"], **options) as h:
        h.open()
        sql(pg_db, FILL)
        _assert_bounded(_polls(h, ROWS), 0)
        digests = _digests(pg_db)
        inserted = [e.after for e in h.events]
        assert [a["id"] for a in inserted if a] == list(range(1, ROWS + 1))
        assert [_md5(a["payload"]) for a in inserted if a] == digests

        # Updates that leave the TOASTed value unchanged: the WAL carries a few bytes a row,
        # the source fills each value in from the log, and those bytes bound the polls too.
        sql(pg_db, "UPDATE big SET n = n + 1")
        _assert_bounded(_polls(h, ROWS), 1)
        updated = [e.after for e in h.events[ROWS:]]
        assert [(a["id"], a["n"]) for a in updated if a] == [(i, 1) for i in range(1, ROWS + 1)]
        assert [_md5(a["payload"]) for a in updated if a] == digests


@pytest.mark.pgcore
def test_a_streamed_transaction_is_replayed_in_polls_bounded_by_bytes(
    pg_db: str, tmp_path: Path
) -> None:
    # A tiny decoding memory makes the server stream the transaction before it commits: the
    # source spools it, and replays it at the commit (the bytes counted as they are replayed).
    sql(pg_db, "CREATE TABLE big (id int PRIMARY KEY, n int, payload text)")
    dsn = f"{pg_db}?options=" + quote("-c logical_decoding_work_mem=64kB")
    options = {"max_batch_bytes": MAX_BYTES, "stream_in_progress": True}
    with harness(dsn, tmp_path / "log", ["public.big"], **options) as h:
        h.open()
        sql(pg_db, FILL)
        _assert_bounded(_polls(h, ROWS), 0)
        inserted = [e.after for e in h.events]
        assert [a["id"] for a in inserted if a] == list(range(1, ROWS + 1))
        assert [_md5(a["payload"]) for a in inserted if a] == _digests(pg_db)
        streamed = query(
            pg_db, "SELECT stream_txns FROM pg_stat_replication_slots WHERE slot_name = 'pgt_slot'"
        )
    assert streamed and streamed[0][0] >= 1, "the server did not stream the transaction"


class _Watched(JsonlSink):
    """The real JSON-lines sink, noting the size of each batch the task hands it."""

    batches: list[tuple[int, int]] = []  # (records, value bytes)

    def write(self, records: Sequence[SinkRecord]) -> None:
        size = sum(len(orjson.dumps(r.value)) for r in records)
        type(self).batches.append((len(records), size))
        super().write(records)


@pytest.mark.pgcore
def test_the_transaction_reaches_a_sink_complete_in_order_in_reads_bounded_by_bytes(
    pg_db: str, tmp_path: Path
) -> None:
    sql(pg_db, "CREATE TABLE big (id int PRIMARY KEY, n int, payload text)")
    options = {"max_batch_bytes": MAX_BYTES}
    with harness(pg_db, tmp_path / "log", ["public.big"], **options) as h:
        h.open()
        sql(pg_db, FILL)
        _polls(h, ROWS)
        config = JsonlSinkConfig(name="files", path=str(tmp_path / "out"))
        context = SinkContext(
            pipeline=PIPELINE,
            sink_name="files",
            tables=[("public", "big")],
            schemas=SchemaCatalog(h.log, PIPELINE),
            logger=structlog.get_logger(),
        )
        _Watched.batches = []
        stop = threading.Event()
        task = SinkTask(
            PIPELINE,
            "files",
            h.log,
            lambda: _Watched(config, context),
            [TOPIC],
            stop,
            structlog.get_logger(),
            max_records=1000,
            max_bytes=MAX_BYTES,
        )
        thread = threading.Thread(target=task.run)
        thread.start()
        try:
            wait_until(
                lambda: (
                    sum(h.log.committed_offsets(group_name(PIPELINE, "files")).values()) >= ROWS
                ),
                60,
                describe=lambda: f"{ROWS} rows committed ({_Watched.batches})",
            )
        finally:
            stop.set()
            thread.join(10)
        lines = (tmp_path / "out" / f"{TOPIC}.jsonl").read_bytes().splitlines()
        rows = [orjson.loads(line)["value"]["after"] for line in lines]
        assert [r["id"] for r in rows] == list(range(1, ROWS + 1))
        assert [_md5(r["payload"]) for r in rows] == _digests(pg_db)
    # The first read knows no size yet (FIRST_READ records); every later one fits the bound.
    later = _Watched.batches[1:]
    assert later and all(n <= MAX_BYTES // VALUE + 1 for n, _ in later), _Watched.batches
    assert sum(n for n, _ in _Watched.batches) == ROWS
