"""``cdc sink FILE NAME --rebuild --into ...`` against real PostgreSQL, Redis and DuckDB: a copy
built from the embedded log beside a running pipeline equals the sink that streamed, and,
swapped in (its place put in the file), streams on from exactly the offsets it read up to:
after more changes it equals the source, row by row and through ``cdc verify``."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from tests.e2e.cli_helpers import cdc, start_run, stop, wait_for
from tests.e2e.rebuild_kit import (
    cache_rows,
    create_items,
    duckdb_sink,
    other_db,
    pipeline_file,
    redis_sink,
    source_rows,
    warehouse_rows,
    workload,
)
from tests.e2e.sinks_kit import status


def _caught_up(tmp_path: Path, pipeline: Path, env: dict[str, str]) -> bool:
    report = status(pipeline, tmp_path, env)
    return all(s["lag"] == 0 and s["state"] == "running" for s in report["sinks"])


def test_a_copy_rebuilt_from_the_log_equals_the_streamed_sink_and_takes_over(
    pg_db: str, redis_server: Any, tmp_path: Path
) -> None:
    redis_server.start()
    name, prefix = f"rb_{uuid.uuid4().hex[:6]}", f"rb{uuid.uuid4().hex[:6]}"
    url = str(redis_server.url)
    old, copy = tmp_path / "old.duckdb", tmp_path / "copy.duckdb"
    sinks = [duckdb_sink("warehouse", old), redis_sink("cache", url, prefix)]
    pipeline = pipeline_file(tmp_path, name, sinks)
    env = {"PG_DSN": pg_db}
    create_items(pg_db, 1500)
    run = start_run(pipeline, tmp_path, env)
    log = tmp_path / "run.log"
    try:
        workload(pg_db, seed=1)
        want = source_rows(pg_db)
        wait_for(lambda: cache_rows(url, prefix) == want, 90, 0.3, run, log)
        wait_for(lambda: _caught_up(tmp_path, pipeline, env), 60, 0.3, run, log)
        # Beside the running pipeline: the copy reads the log, never the source.
        built = cdc("sink", str(pipeline), "warehouse", "--rebuild", "--into", str(copy),
                    cwd=tmp_path, env=env)  # fmt: skip
        assert built.returncode == 0, built.stderr
        assert "records/s" in built.stdout
        copied = cdc("sink", str(pipeline), "cache", "--rebuild", "--into", other_db(url, 1),
                     cwd=tmp_path, env=env)  # fmt: skip
        assert copied.returncode == 0, copied.stderr
        assert url.rsplit("/", 1)[0] not in copied.stdout + copied.stderr  # no URL shown
        assert cache_rows(other_db(url, 1), prefix) == cache_rows(url, prefix) == want
    finally:
        code, _ = stop(run)
    assert code == 0, log.read_text()[-3000:]
    assert warehouse_rows(copy) == warehouse_rows(old) == want
    _swap_in_and_stream_on(tmp_path, name, env, copy, other_db(url, 1), prefix)


def _swap_in_and_stream_on(
    tmp_path: Path, name: str, env: dict[str, str], copy: Path, url: str, prefix: str
) -> None:
    """The copies as the sinks: what changed since they were built arrives, nothing twice."""
    sinks = [duckdb_sink("warehouse", copy), redis_sink("cache", url, prefix)]
    pipeline = pipeline_file(tmp_path, name, sinks)
    workload(env["PG_DSN"], seed=2)  # while nothing runs: the copies must catch up
    run = start_run(pipeline, tmp_path, env)
    log = tmp_path / "run.log"
    try:
        workload(env["PG_DSN"], seed=3)
        want = source_rows(env["PG_DSN"])
        wait_for(lambda: cache_rows(url, prefix) == want, 90, 0.3, run, log)
        wait_for(lambda: _caught_up(tmp_path, pipeline, env), 60, 0.3, run, log)
        verified = cdc("verify", str(pipeline), cwd=tmp_path, env=env, timeout=180)
        assert verified.returncode == 0, verified.stdout + verified.stderr
    finally:
        code, _ = stop(run)
        cdc("drop", str(pipeline), "--yes", cwd=tmp_path, env=env)
    assert code == 0, log.read_text()[-3000:]
    assert warehouse_rows(copy) == want
