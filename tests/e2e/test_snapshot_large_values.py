"""An initial snapshot of 1 MB values (incompressible, TOASTed out of line) through ``cdc run``
on a real PostgreSQL 15 and the embedded log, its pieces bounded by ``max_batch_bytes``: killed
with SIGKILL part way, it resumes without reading a finished chunk again and the topic ends
equal to the table, every value whole."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path
from typing import Any

import psycopg
import pytest

from cdc.testing import wait_until
from tests.e2e.cli_helpers import start_run
from tests.e2e.snapshot_helpers import (
    chunks_done,
    kill_after_chunks,
    run_log_events,
    snapshot_tables,
    topic_state,
    write_pipeline,
)
from tests.e2e.test_snapshot_pipeline import drop_objects, settle_and_stop, snapshot_finished

ROWS = 120
VALUE = 1_000_000  # bytes a row
FILL = f"""INSERT INTO t SELECT g,
    (SELECT string_agg(md5(g::text || '.' || i), '') FROM generate_series(1, {VALUE // 32}) i), 0
    FROM generate_series(1, {ROWS}) g"""


def _md5(text: str) -> str:
    return hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()


def _table(dsn: str) -> dict[int, tuple[str, int]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT id, md5(v), n FROM t").fetchall()
    return {i: (digest, n) for i, digest, n in rows}


def _topic(log_dir: Path) -> dict[int, tuple[str, int]]:
    return {k: (_md5(row["v"]), row["n"]) for k, row in topic_state(log_dir).items()}


@pytest.mark.timeout(300)
def test_sigkill_mid_snapshot_of_1mb_values_resumes_and_ends_complete(
    pg_db: str, tmp_path: Path
) -> None:
    with psycopg.connect(pg_db, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text NOT NULL, n int NOT NULL)")
        conn.execute(FILL)
    # Pieces of 2 MiB (three rows): a chunk of 4 rows is split across two pieces.
    pipeline = write_pipeline(
        tmp_path,
        pg_db,
        snapshot_chunk_rows=4,
        snapshot_workers=1,
        max_batch_bytes="2MiB",
    )
    log_dir = tmp_path / "log"
    runs: list[subprocess.Popen[str]] = []
    try:
        process = start_run(pipeline, tmp_path)
        runs.append(process)
        kill_after_chunks(process, log_dir)
        entry = snapshot_tables(log_dir)["public.t"]
        done_before = chunks_done(entry)
        assert entry["chunks_total"] == ROWS // 4 + 1  # and an empty one past the last key
        assert 0 < len(done_before) < entry["chunks_total"]
        first_run = len(run_log_events(tmp_path, "snapshot.chunk_done"))
        process = start_run(pipeline, tmp_path)
        runs.append(process)
        wait_until(lambda: snapshot_finished(log_dir), 120, 0.25, describe="the resumed snapshot")
        settle_and_stop(process, pg_db, log_dir)
        resumed = run_log_events(tmp_path, "snapshot.chunk_done")[first_run:]
        reread = {e["chunk"] for e in resumed} & done_before
        assert not reread, f"finished chunks read again: {sorted(reread)}"
        assert {e["chunk"] for e in resumed} | done_before == set(range(entry["chunks_total"]))
        assert {e["rows"] for e in resumed} <= {0, 4}
        in_topic: dict[Any, Any] = _topic(log_dir)
        assert in_topic == _table(pg_db)
        assert len(in_topic) == ROWS
    finally:
        drop_objects(pipeline, *runs)
