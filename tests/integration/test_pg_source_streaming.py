"""In-progress transactions (``stream_in_progress``), on every supported version: large
transactions streamed before commit are spooled and emitted once, at commit, in commit order;
aborted transactions and rolled-back savepoints emit nothing. The protocol is the highest the
server speaks (2 on 14, 3 on 15, 4 with ``streaming = parallel`` on 16+). Also the heartbeat,
which moves the slot when nothing else writes."""

from __future__ import annotations

from collections.abc import MutableMapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
from structlog.testing import capture_logs

from cdc.testing import wait_until
from connectors.postgres.replication.versions import protocol_version
from tests.integration.pg_source_kit import harness, query, slot_flush, sql

# A tiny decoding memory makes the server stream any transaction past 64 kB.
SMALL_MEMORY = "options=" + quote("-c logical_decoding_work_mem=64kB")


def _server_version(dsn: str) -> int:
    return int(query(dsn, "SHOW server_version_num")[0][0])


def _events(logs: list[MutableMapping[str, Any]], name: str) -> list[MutableMapping[str, Any]]:
    return [e for e in logs if e["event"] == name]


@pytest.mark.pgcore
def test_streamed_transactions_commit_abort_and_savepoints(pg_db: str, tmp_path: Path) -> None:
    version = _server_version(pg_db)
    sql(pg_db, "CREATE TABLE s (id int PRIMARY KEY, pad text)")
    dsn = f"{pg_db}?{SMALL_MEMORY}"
    with (
        capture_logs() as logs,
        harness(dsn, tmp_path / "log", ["public.s"], stream_in_progress=True) as h,
    ):
        h.open()
        with psycopg.connect(pg_db) as big, psycopg.connect(pg_db, autocommit=True) as small:
            big.execute("INSERT INTO s SELECT g, repeat('p', 200) FROM generate_series(1, 3000) g")
            big.execute("SAVEPOINT sp")
            # Past the 64 kB on its own, so it is streamed before it rolls back.
            big.execute(
                "INSERT INTO s SELECT g, repeat('g', 200) FROM generate_series(3001, 4000) g"
            )
            big.execute("ROLLBACK TO SAVEPOINT sp")
            big.execute("INSERT INTO s SELECT g, 'kept' FROM generate_series(4001, 5000) g")
            small.execute("INSERT INTO s VALUES (-1, 'committed first')")
            for _ in range(20):  # let the server stream the big one while it is open
                h.step(0.1)
            assert [e.key["id"] for e in h.events] == [-1]
            big.commit()
        with psycopg.connect(pg_db) as aborted:
            aborted.execute(
                "INSERT INTO s SELECT g, repeat('a', 200) FROM generate_series(6001, 9000) g"
            )
            # Streamed while still open, then aborted: PostgreSQL 18 no longer streams a
            # transaction that has already aborted by the time it is decoded.
            for _ in range(20):
                h.step(0.1)
            aborted.rollback()
        sql(pg_db, "INSERT INTO s VALUES (-2, 'last')")
        h.collect(4002)
        ids = [e.key["id"] for e in h.events]
        assert ids == [-1, *range(1, 3001), *range(4001, 5001), -2]
        positions = [e.source.position for e in h.events]
        assert positions == sorted(positions)
        stats = query(
            pg_db,
            "SELECT stream_txns, stream_count FROM pg_stat_replication_slots"
            " WHERE slot_name = 'pgt_slot'",
        )
    assert stats and stats[0][0] >= 2, "the server did not stream in progress"
    assert stats[0][1] > stats[0][0], "the large transactions did not come in pieces"
    [started] = _events(logs, "source.streaming")
    parallel = version >= 160000
    expected = {14: 2, 15: 3}.get(version // 10000, 4)
    assert started["proto_version"] == protocol_version(version) == expected
    assert started["streaming"] == ("parallel" if parallel else "on")
    [sub] = _events(logs, "stream.subtransaction_aborted")
    [whole] = _events(logs, "stream.aborted")
    assert sub["xid"] != sub["subxid"] and whole["xid"] not in (sub["xid"], sub["subxid"])
    assert whole["spooled_bytes"] > 64 * 1024
    # Protocol 4's parallel streaming sends where and when the abort happened.
    if parallel:
        assert whole["abort_lsn"] > 0 and whole["abort_ts_us"] > 0
    else:
        assert whole["abort_lsn"] is None and whole["abort_ts_us"] is None


@pytest.mark.pgcore
def test_heartbeat_moves_an_idle_slot(pg_db: str, tmp_path: Path) -> None:
    sql(pg_db, "CREATE TABLE quiet (id int PRIMARY KEY)")
    options = {"heartbeat_interval_s": 0.5, "status_interval_s": 0.5}
    with harness(pg_db, tmp_path / "log", ["public.quiet"], **options) as h:
        h.open()
        h.run_until(lambda: True, settle_s=1.0)
        start = slot_flush(pg_db)
        # Each step waits up to 0.2 s for the source: no pause between looks.
        wait_until(lambda: h.step(0.2) >= 0 and slot_flush(pg_db) > start, 8, 0)
        assert not h.events, "heartbeat messages are not changes"
