"""DDL that commits while a re-snapshot reads a chunk: the chunk is read in the table's shape at
read time, never in the shape of its plan, and the request completes.

Deterministic: the reader's ``before_read`` hook holds the chunk read at a barrier (after its low
watermark, before the read), the test commits the DDL, or begins it and releases the read while
the DDL still holds its lock, then releases. The source runs through the real source task into a
real embedded log, against a real PostgreSQL (14 to 18: marker ``pgcore``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest

from cdc.runtime.schemas import SchemaCatalog
from cdc.testing import wait_until
from connectors.postgres.snapshot.signal import request_snapshot
from connectors.postgres.snapshot.window_rows import ChunkJob
from tests.integration.snapshot_kit import PIPELINE, Pipeline, execute, pipeline, table_state

ROWS = 300
WAIT_S = 60

#: Each changes the columns a plan made before it would read.
DDL = {
    "drop": "ALTER TABLE t DROP COLUMN b",
    "rename": "ALTER TABLE t RENAME COLUMN a TO a2",
    "add": "ALTER TABLE t ADD COLUMN c int DEFAULT 7",
    "retype": "ALTER TABLE t ALTER COLUMN v TYPE text",
}


@pytest.fixture
def p(pg_db: str, tmp_path: Path) -> Iterator[Pipeline]:
    execute(
        pg_db,
        "CREATE TABLE t (id int PRIMARY KEY, a text, b text, v int)",
        f"INSERT INTO t SELECT g, 'a' || g, 'b' || g, g FROM generate_series(1, {ROWS}) g",
        "CREATE TABLE u (id int PRIMARY KEY)",
    )
    tables = ["public.t", "public.u"]
    with pipeline(pg_db, tmp_path / "log", tables, snapshot_chunk_rows=100) as running:
        running.start()
        running.wait(lambda: bool(running.sources) and running.sources[-1].streaming)
        running.wait(lambda: running.matches("public.t"))
        yield running


class Held:
    """Holds the first chunk of ``public.t`` at a barrier until :meth:`release`: before its
    read, or (``high``) once read, before its high watermark."""

    def __init__(self, p: Pipeline, high: bool = False) -> None:
        stream = p.sources[-1].stream
        assert stream is not None
        self.entered, self._released = threading.Event(), threading.Event()
        self._fired = False
        if high:
            stream.reader.before_high = self
        else:
            stream.reader.before_read = self

    def __call__(self, job: ChunkJob) -> None:
        if self._fired or job.table.name != "public.t":
            return
        self._fired = True
        self.entered.set()
        if not self._released.wait(WAIT_S):
            raise AssertionError("the test never released the held read")

    def wait(self) -> None:
        assert self.entered.wait(WAIT_S), "no chunk read began"

    def release(self) -> None:
        self._released.set()


def resnapshot(p: Pipeline, high: bool = False) -> tuple[Held, str]:
    """Request a re-snapshot of ``t`` (as ``cdc snapshot`` does) and hold its first chunk."""
    held = Held(p, high)
    ident = str(request_snapshot(p.config, PIPELINE, "public.t", None)["id"])
    held.wait()
    return held, ident


def settled(p: Pipeline, ident: str) -> bool:
    """The request ended and nothing else is queued or being read."""
    state = p.snapshot_state()
    ended = ident in (state.get("finished") or []) or any(
        f["id"] == ident for f in state.get("failed") or []
    )
    return ended and not state.get("requests") and p.snapshot_done()


def published_columns(p: Pipeline) -> list[str]:
    schema = SchemaCatalog(p.log, PIPELINE, wait_s=0).get("public", "t")
    assert schema is not None
    return [c.name for c in schema.columns]


def table_columns(dsn: str) -> list[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT attname::text FROM pg_attribute WHERE attrelid = 't'::regclass"
            " AND attnum > 0 AND NOT attisdropped ORDER BY attnum"
        ).fetchall()
    return [r[0] for r in rows]


def converged(p: Pipeline, ident: str) -> None:
    """The request completed, nothing failed, and the log equals the table, schema included."""
    p.wait(lambda: settled(p, ident) and p.matches("public.t"), WAIT_S)
    state = p.snapshot_state()
    assert state.get("failed") == [], state.get("failed")
    assert ident in state["finished"]
    assert p.topic_state("public.t") == table_state(p.dsn, "public.t")
    assert published_columns(p) == table_columns(p.dsn)


@pytest.mark.pgcore
@pytest.mark.parametrize("ddl", DDL.values(), ids=DDL.keys())
def test_ddl_committed_during_a_chunk_read_is_read_in_its_new_shape(p: Pipeline, ddl: str) -> None:
    held, ident = resnapshot(p)
    # The UPDATE makes pgoutput send the new Relation inside the held chunk's window.
    execute(p.dsn, ddl, "UPDATE t SET id = id WHERE id = 150")
    held.release()
    converged(p, ident)


@pytest.mark.pgcore
@pytest.mark.parametrize("ddl", [DDL["drop"], DDL["rename"]], ids=["drop", "rename"])
def test_ddl_holding_its_lock_when_the_read_begins_is_waited_for(p: Pipeline, ddl: str) -> None:
    held, ident = resnapshot(p)
    with psycopg.connect(p.dsn) as conn:
        conn.execute(ddl)  # its transaction holds the table's ACCESS EXCLUSIVE lock
        held.release()
        wait_for_lock_wait(p.dsn)
        conn.execute("UPDATE t SET id = id WHERE id = 150")
        conn.commit()
    converged(p, ident)


def wait_for_lock_wait(dsn: str, application: str = "cdc-snapshot") -> None:
    """Until the session of ``application`` waits for a lock on ``t``."""
    query = (
        "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
        " WHERE a.application_name = %s AND NOT l.granted AND l.relation = 't'::regclass"
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        wait_until(
            lambda: conn.execute(query, (application,)).fetchone() == (1,),
            WAIT_S,
            0.02,
            describe=f"{application} to wait for a lock on t",
        )


@pytest.mark.pgcore
def test_ddl_cannot_commit_between_a_chunk_read_and_its_high_watermark(p: Pipeline) -> None:
    """The rows of a window are in the table's shape at the window's end: the stream shows a
    DDL either before the read (rows in the new shape) or after the high watermark."""
    held, ident = resnapshot(p, high=True)
    locked_at: list[int] = []
    ddl = threading.Thread(target=drop_b, args=(p.dsn, locked_at), daemon=True)
    ddl.start()
    # Before the fix the DDL commits at once; now it waits for the read's lock.
    ddl.join(2)
    if ddl.is_alive():
        wait_for_lock_wait(p.dsn, "test-ddl")
    held.release()
    ddl.join(WAIT_S)
    converged(p, ident)
    # Every row a window read with b sits before the DROP in the stream.
    old = [
        r
        for r in p.topic_records("public.t")
        if r["op"] == "r" and r["source"]["snapshot"] == "incremental" and "b" in r["after"]
    ]
    assert len(old) == 100  # the held chunk's (ids 1 to 100)
    assert all(int(orjson.loads(r["source"]["sequence"])[1]) < locked_at[0] for r in old)


def drop_b(dsn: str, locked_at: list[int]) -> None:
    """Drop column b; note a WAL position the DROP's commit comes after (it holds its lock)."""
    with psycopg.connect(dsn, application_name="test-ddl") as conn:
        conn.execute("ALTER TABLE t DROP COLUMN b")
        row = conn.execute("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn").fetchone()
        assert row is not None
        locked_at.append(int(row[0]))
        conn.execute("UPDATE t SET id = id WHERE id = 150")
        conn.commit()


@pytest.mark.pgcore
def test_a_table_dropped_during_a_chunk_read_ends_its_request_with_the_reason(
    p: Pipeline,
) -> None:
    held, ident = resnapshot(p)
    execute(p.dsn, "DROP TABLE t")
    held.release()
    p.wait(lambda: settled(p, ident) or failed(p, ident) is not None, WAIT_S)
    failure = failed(p, ident)
    assert failure is not None and failure["table"] == "public.t"
    assert "public.t no longer exists" in failure["reason"], failure["reason"]
    execute(p.dsn, "INSERT INTO u VALUES (1)")  # the stream goes on
    p.wait(lambda: p.matches("public.u") and bool(p.topic_state("public.u")), WAIT_S)


def failed(p: Pipeline, ident: str) -> dict[str, Any] | None:
    return next((f for f in p.snapshot_state().get("failed") or [] if f["id"] == ident), None)


@pytest.mark.pgcore
def test_a_chunk_key_changed_since_the_plan_is_planned_again(p: Pipeline) -> None:
    """The plan's boundaries are values of the old key: under the new one the request is
    planned again, and every row is read under its new key."""
    held, ident = resnapshot(p)
    execute(p.dsn, "ALTER TABLE t DROP CONSTRAINT t_pkey, ADD PRIMARY KEY (id, v)")
    held.release()
    p.wait(lambda: settled(p, ident), WAIT_S)
    state = p.snapshot_state()
    assert state.get("failed") == [], state.get("failed")
    assert ident in state["finished"]
    read = {
        (r["key"]["id"], r["key"]["v"])
        for r in p.topic_records("public.t")
        if r["op"] == "r" and r["source"]["snapshot"] == "incremental" and len(r["key"]) == 2
    }
    assert read == {(i, i) for i in range(1, ROWS + 1)}
