"""``cdc sink FILE NAME --rebuild`` in place with no process running the sink: the command runs
it (every table reset, read again from the compacted log, then streaming) until SIGTERM. Rows
deleted from Redis while nothing ran come back as the source holds them. Real PostgreSQL and
Redis, on the embedded log."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import redis

from tests.e2e.cli_helpers import cdc, cdc_env, start_run, stop, wait_for
from tests.e2e.rebuild_kit import (
    cache_rows,
    create_items,
    pipeline_file,
    redis_sink,
    source_rows,
)


def test_rebuild_in_place_runs_the_sink_when_nothing_does(
    pg_db: str, redis_server: Any, tmp_path: Path
) -> None:
    redis_server.start()
    name, prefix = f"ip_{uuid.uuid4().hex[:6]}", f"ip{uuid.uuid4().hex[:6]}"
    url = str(redis_server.url)
    pipeline = pipeline_file(tmp_path, name, [redis_sink("cache", url, prefix)])
    env = {"PG_DSN": pg_db}
    create_items(pg_db, 500)
    run = start_run(pipeline, tmp_path, env)
    want = source_rows(pg_db)
    wait_for(lambda: cache_rows(url, prefix) == want, 90, 0.3, run, tmp_path / "run.log")
    assert stop(run)[0] == 0
    client = redis.Redis.from_url(url)
    tampered = [k for k in client.scan_iter(f"{prefix}:public.items:*", count=1000)][:20]
    client.delete(*tampered)
    assert cache_rows(url, prefix) != want
    rebuild = subprocess.Popen(
        [sys.executable, "-m", "cdc.cli.main", "sink", str(pipeline), "cache", "--rebuild"],
        cwd=tmp_path, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        env=cdc_env(env),
    )  # fmt: skip
    try:
        wait_for(lambda: cache_rows(url, prefix) == want, 90, 0.3, rebuild)
    finally:
        code, _ = stop(rebuild)
        output = rebuild.stdout.read() if rebuild.stdout else ""
        cdc("drop", str(pipeline), "--yes", cwd=tmp_path, env=env)
    assert code == 0, output[-3000:]
    assert "no process runs the sink: running it here" in output
