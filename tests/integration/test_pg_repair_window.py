"""``cdc verify --repair``'s requests on a real PostgreSQL, the real source and an embedded log:
the keys asked for are re-read between watermarks, a key the table lacks is deleted (its
delete and tombstone reach the topic, where a sink holding it extra takes them), and a key the
stream changes while the window is open keeps that change: a concurrent insert wins over the
repair's delete.

Deterministic: the reader's ``before_high`` hook holds the last chunk's window after its read;
the test inserts a key there that the read found absent.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from connectors.postgres.snapshot.signal import request_repair
from connectors.postgres.snapshot.window_rows import ChunkJob
from tests.integration.snapshot_kit import PIPELINE, Pipeline, execute, pipeline, table_state
from tests.integration.test_pg_resnapshot_ddl import WAIT_S, Held, settled

ROWS = 300


@pytest.fixture
def p(pg_db: str, tmp_path: Path) -> Iterator[Pipeline]:
    execute(
        pg_db,
        "CREATE TABLE t (id int PRIMARY KEY, a text, b text, v int)",
        f"INSERT INTO t SELECT g, 'a' || g, 'b' || g, g FROM generate_series(1, {ROWS}) g",
    )
    with pipeline(pg_db, tmp_path / "log", ["public.t"], snapshot_chunk_rows=100) as running:
        running.start()
        running.wait(lambda: bool(running.sources) and running.sources[-1].streaming)
        running.wait(lambda: running.matches("public.t"))
        yield running


class HeldLast(Held):
    """Holds the chunk of keys above 300 (the last: keys 400 and 401), once read."""

    def __call__(self, job: ChunkJob) -> None:
        if job.chunk.index == ROWS // 100:
            super().__call__(job)


def _after(p: Pipeline, start: int) -> list[tuple[Any, Any]]:
    """(key id, op) of the topic's records from ``start`` on."""
    return [(r["key"]["id"], r["op"]) for r in p.topic_records("public.t")[start:]]


def test_a_repair_reads_its_keys_and_deletes_the_absent_ones_unless_the_stream_wins(
    p: Pipeline,
) -> None:
    start = len(p.topic_records("public.t"))
    held = HeldLast(p, high=True)
    keys = [{"id": 5}, {"id": 250}, {"id": 400}, {"id": 401}]
    ident = str(request_repair(p.config, PIPELINE, "public.t", keys)["id"])
    held.wait()
    # Inside the window: the read found 401 absent, and the stream now inserts it.
    execute(p.dsn, "INSERT INTO t VALUES (401, 'new', 'new', 401)")
    held.release()
    p.wait(lambda: settled(p, ident), WAIT_S)
    assert p.snapshot_state().get("failed") == []
    records = _after(p, start)
    assert sorted(k for k, op in records if op == "r") == [5, 250]
    assert [k for k, op in records if op == "d"] == [400]  # 401's insert won
    assert (400, None) in records  # the delete's tombstone
    assert (401, "c") in records and (401, None) not in records
    assert p.topic_state("public.t") == table_state(p.dsn, "public.t")
