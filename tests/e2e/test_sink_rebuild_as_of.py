"""``cdc sink FILE NAME --rebuild --into NEW --as-of POSITION`` against real PostgreSQL and a
history-mode DuckDB sink: the new file holds the table as it was at the position (the
compacted log alone could not give it), and a position before what the history recorded is
refused with exit 2."""

from __future__ import annotations

import uuid
from pathlib import Path

import psycopg

from tests.e2e.cli_helpers import cdc, start_run, stop, wait_for
from tests.e2e.rebuild_kit import (
    create_items,
    duckdb_sink,
    pipeline_file,
    source_rows,
    warehouse_rows,
    workload,
)
from tests.e2e.sinks_kit import status


def _current_lsn(dsn: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    assert row is not None
    return str(row[0])


def _caught_up(tmp_path: Path, pipeline: Path, env: dict[str, str]) -> bool:
    sink = status(pipeline, tmp_path, env)["sinks"][0]
    return bool(sink["lag"] == 0 and sink["state"] == "running")


def test_as_of_gives_the_state_at_that_position(pg_db: str, tmp_path: Path) -> None:
    name = f"ao_{uuid.uuid4().hex[:6]}"
    history = tmp_path / "wh.duckdb"
    pipeline = pipeline_file(tmp_path, name, [duckdb_sink("wh", history, mode="history")])
    env = {"PG_DSN": pg_db}
    create_items(pg_db, 300)
    before_snapshot = _current_lsn(pg_db)
    run = start_run(pipeline, tmp_path, env)
    log, past = tmp_path / "run.log", tmp_path / "past.duckdb"
    try:
        # The snapshot done first: the history answers from the position of its reads on.
        wait_for(lambda: _caught_up(tmp_path, pipeline, env), 90, 0.3, run, log)
        workload(pg_db, seed=11, changes=120)
        at, then = _current_lsn(pg_db), source_rows(pg_db)
        workload(pg_db, seed=12, changes=120)
        now = source_rows(pg_db)
        assert now != then
        wait_for(lambda: _caught_up(tmp_path, pipeline, env), 90, 0.3, run, log)
        # While the pipeline writes the sink's file (and holds its lock).
        built = cdc("sink", str(pipeline), "wh", "--rebuild", "--into", str(past), "--as-of",
                    at, cwd=tmp_path, env=env)  # fmt: skip
        assert built.returncode == 0, built.stderr
    finally:
        code, _ = stop(run)
        cdc("drop", str(pipeline), "--yes", cwd=tmp_path, env=env)
    assert code == 0, log.read_text()[-3000:]
    assert warehouse_rows(history) == now
    assert warehouse_rows(past) == then
    again = cdc("sink", str(pipeline), "wh", "--rebuild", "--into", str(past), "--as-of", at,
                cwd=tmp_path, env=env)  # fmt: skip
    assert again.returncode == 2 and "exists" in again.stderr
    # Before the snapshot the history knows nothing: each key's first version is a read.
    early = cdc("sink", str(pipeline), "wh", "--rebuild", "--into", str(tmp_path / "e.duckdb"),
                "--as-of", before_snapshot, cwd=tmp_path, env=env)  # fmt: skip
    assert early.returncode == 2, early.stdout + early.stderr
    assert "answers positions from" in early.stderr
    assert not (tmp_path / "e.duckdb").exists()
