"""Two workers of one PostgreSQL sink (as Kafka spreads its partitions) racing a truncate,
against a real PostgreSQL server.

A truncate on one partition and older changes of the same table on another are applied by two
sink instances at once. The interleaving is forced, not hoped for: the test holds a row lock on
one worker's offsets row, so that worker stops inside its transaction (its rows written, not
committed) until the test lets it go. The other worker's flush then either finishes (nothing
orders the two: the bug) or waits on the table's truncate watermark row, which each flush reads
under a lock (shared to apply changes, exclusive to truncate); either way the test sees it
without sleeping. Afterwards no row older than the truncate may remain.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import psycopg
import pytest

from cdc.contracts.events import Op
from cdc.support.wait import wait_until
from tests.integration.duckdb_kit import event, item
from tests.integration.postgres_sink_kit import Harness

TRUNCATE_PARTITION, CHANGES_PARTITION = 0, 1


@pytest.fixture
def workers(pg_db: str) -> Iterator[tuple[Harness, Harness]]:
    truncating, applying = Harness(pg_db, sink="wh"), Harness(pg_db, sink="wh")
    try:
        # Each worker's partition gets an offsets row (the row the test locks) and a row.
        truncating.write(truncating.records(item(Op.CREATE, 1, 5, "a", 1), partition=0))
        applying.write(applying.records(item(Op.CREATE, 2, 6, "b", 2), partition=1))
        yield truncating, applying
    finally:
        truncating.close()
        applying.close()


def _lock_waiters(conn: psycopg.Connection[Any]) -> int:
    found = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'cdc-sink-wh' "
        "AND wait_event_type = 'Lock'"
    ).fetchone()
    return 0 if found is None else int(found[0])


@pytest.mark.parametrize("first", ["changes", "truncate"])
def test_no_row_older_than_a_truncate_outlives_it_when_two_workers_race(
    workers: tuple[Harness, Harness], pg_db: str, first: str
) -> None:
    truncating, applying = workers
    truncate = truncating.records(event(Op.TRUNCATE, {}, None, 20), partition=TRUNCATE_PARTITION)
    older = applying.records(item(Op.CREATE, 3, 10, "older", 3), partition=CHANGES_PARTITION)
    jobs = {"truncate": (truncating, truncate), "changes": (applying, older)}
    second = "changes" if first == "truncate" else "truncate"
    (held, held_batch), (other, other_batch) = jobs[first], jobs[second]
    held_partition = TRUNCATE_PARTITION if first == "truncate" else CHANGES_PARTITION
    with (
        ThreadPoolExecutor(2) as pool,
        psycopg.connect(pg_db) as gate,
        psycopg.connect(pg_db, autocommit=True) as watch,  # a fresh activity view each query
    ):
        # The held worker stops at its offsets, its table changes made and not committed.
        gate.execute(
            "SELECT FROM replica._cdc_offsets WHERE partition = %s FOR UPDATE", [held_partition]
        )
        held_flush = pool.submit(held.write, held_batch)
        wait_until(lambda: _lock_waiters(watch) == 1, 30, 0.02)
        other_flush: Future[None] = pool.submit(other.write, other_batch)
        # Without the watermark lock the other flush finishes now; with it, it waits.
        wait_until(lambda: other_flush.done() or _lock_waiters(watch) == 2, 30, 0.02)
        gate.rollback()  # let the held worker commit
        held_flush.result(30)
        other_flush.result(30)
    assert truncating.names() == {}, "a row older than the truncate outlived it"
    assert truncating.sql("SELECT count(*) FROM replica.items__cdc_deleted") == [(0,)]
