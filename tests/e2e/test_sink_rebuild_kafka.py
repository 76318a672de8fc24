"""``cdc sink --rebuild`` on the Kafka log (three partitions): a DuckDB copy built with
``--into`` beside the running pipeline equals the source and, swapped in, streams on from its
own offsets; an in-place rebuild of the Redis sink is applied by the running process and
followed by the command until the sink caught up. Real PostgreSQL, Kafka, Redis and DuckDB."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from tests.e2e.cli_helpers import cdc, start_run, stop, wait_for
from tests.e2e.rebuild_kit import (
    cache_rows,
    create_items,
    duckdb_sink,
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


def test_rebuilds_on_kafka(
    pg_db: str, redis_server: Any, kafka_server: Any, tmp_path: Path
) -> None:
    redis_server.start()
    name, prefix = f"rk_{uuid.uuid4().hex[:6]}", f"rk{uuid.uuid4().hex[:6]}"
    url = str(redis_server.url)
    log_config = {
        "type": "kafka",
        "bootstrap_servers": kafka_server.bootstrap_servers,
        "partitions": 3,
        "session_timeout_ms": 6000,
    }
    old, copy = tmp_path / "old.duckdb", tmp_path / "copy.duckdb"
    sinks = [duckdb_sink("wh", old), redis_sink("cache", url, prefix)]
    pipeline = pipeline_file(tmp_path, name, sinks, log_config)
    env = {"PG_DSN": pg_db}
    create_items(pg_db, 800)
    run = start_run(pipeline, tmp_path, env)
    log = tmp_path / "run.log"
    try:
        workload(pg_db, seed=41)
        want = source_rows(pg_db)
        wait_for(lambda: cache_rows(url, prefix) == want, 120, 0.3, run, log)
        wait_for(lambda: _caught_up(tmp_path, pipeline, env), 60, 0.3, run, log)
        built = cdc("sink", str(pipeline), "wh", "--rebuild", "--into", str(copy),
                    cwd=tmp_path, env=env)  # fmt: skip
        assert built.returncode == 0, built.stderr
        in_place = cdc("sink", str(pipeline), "cache", "--rebuild", "--timeout-s", "90",
                       cwd=tmp_path, env=env, timeout=180)  # fmt: skip
        assert in_place.returncode == 0, in_place.stdout + in_place.stderr
        assert "caught up with the log" in in_place.stdout
        assert cache_rows(url, prefix) == want
    finally:
        code, _ = stop(run)
    assert code == 0, log.read_text()[-3000:]
    assert warehouse_rows(copy) == warehouse_rows(old) == want
    swapped = [duckdb_sink("wh", copy), redis_sink("cache", url, prefix)]
    pipeline = pipeline_file(tmp_path, name, swapped, log_config)
    workload(pg_db, seed=42)
    run = start_run(pipeline, tmp_path, env)
    try:
        want = source_rows(pg_db)
        wait_for(lambda: cache_rows(url, prefix) == want, 120, 0.3, run, log)
        wait_for(lambda: _caught_up(tmp_path, pipeline, env), 60, 0.3, run, log)
    finally:
        code, _ = stop(run)
        cdc("drop", str(pipeline), "--yes", cwd=tmp_path, env=env)
    assert code == 0, log.read_text()[-3000:]
    assert warehouse_rows(copy) == want
