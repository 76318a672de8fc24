"""``cdc status`` tells what ``/readyz`` tells. Real PostgreSQL and Redis, through the CLI:

- a Redis outage (the server stopped) puts the cache sink in ``retrying`` with the reason, in
  ``/readyz`` and in ``cdc status`` alike, and ``running`` again in both once Redis is back;
- a pipeline stopped mid-snapshot shows its snapshot ``paused``, with no ETA, and its sinks not
  running (it showed ``running … ETA 12 s`` and ``cache running``).
"""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest

from tests.e2e.cli_helpers import cdc, http_get, start_run, stop, wait_for
from tests.services.ports import LOOPBACK, free_port
from tests.services.redis import LocalRedis, own_redis


@pytest.fixture
def redis() -> Iterator[LocalRedis]:
    # Its own, since the test stops it; append-only, so a restart keeps the sink's data.
    with own_redis(appendonly=True) as server:
        yield server


def _readyz(listen: str) -> tuple[int, dict[str, Any]]:
    status, body = http_get(f"http://{listen}/readyz")
    return status, orjson.loads(body) if status else {}  # 0: not listening yet


def _status(tmp_path: Path, pipeline: Path, env: dict[str, str]) -> dict[str, Any]:
    result = cdc("status", str(pipeline), "--json", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    report: dict[str, Any] = orjson.loads(result.stdout)
    return report


def _cache(report: dict[str, Any]) -> dict[str, Any]:
    return next(s for s in report["sinks"] if s["sink"] == "cache")


def _write(tmp_path: Path, name: str, source: str, sinks: str) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(
        f"version: 1\nname: {name}\nsource:\n  type: postgres\n  dsn: ${{PG_DSN}}\n"
        f"  tables: [public.t]\n{source}sinks:\n{sinks}"
    )
    return path


def test_status_says_retrying_during_a_redis_outage_as_readyz_does(
    pg_db: str, redis: LocalRedis, tmp_path: Path
) -> None:
    with psycopg.connect(pg_db, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.t (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO public.t SELECT g, 'v' FROM generate_series(1, 20) g")
    listen = f"{LOOPBACK}:{free_port()}"
    sinks = "  - name: cache\n    type: redis\n    url: ${REDIS_URL}\n"
    pipeline = _write(tmp_path, f"st_{uuid.uuid4().hex[:6]}", "", sinks)
    pipeline.write_text(pipeline.read_text() + f"metrics:\n  listen: '{listen}'\n")
    env = {"PG_DSN": pg_db, "REDIS_URL": redis.url}
    run, log = start_run(pipeline, tmp_path, env), tmp_path / "run.log"
    try:
        wait_for(lambda: _readyz(listen)[0] == 200, 90, 0.5, run, log)
        redis.stop()
        with psycopg.connect(pg_db, autocommit=True) as conn:
            conn.execute("INSERT INTO public.t VALUES (100, 'during the outage')")
        wait_for(lambda: "sink:cache: retrying" in str(_readyz(listen)[1]), 60, 0.5, run, log)
        cache = _cache(_status(tmp_path, pipeline, env))
        assert cache["state"] == "retrying" and cache["reason"], cache
        human = cdc("status", str(pipeline), cwd=tmp_path, env=env).stdout
        assert "sink cache: retrying since" in human and "sink cache: running" not in human
        redis.start()
        wait_for(lambda: _readyz(listen)[0] == 200, 90, 0.5, run, log)
        back = lambda: _cache(_status(tmp_path, pipeline, env))["state"] == "running"  # noqa: E731
        wait_for(back, 30, 0.5, run, log)
    finally:
        code, _ = stop(run)
        cdc("drop", str(pipeline), "--yes", cwd=tmp_path, env=env)
    assert code == 0, log.read_text()[-3000:]


def test_a_pipeline_stopped_mid_snapshot_shows_it_paused_without_an_eta(
    pg_db: str, tmp_path: Path
) -> None:
    with psycopg.connect(pg_db, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.t (id int PRIMARY KEY, v text)")
        conn.execute(
            "INSERT INTO public.t SELECT g, md5(g::text) FROM generate_series(1, 300000) g"
        )
    source = "  snapshot_chunk_rows: 2500\n  snapshot_workers: 1\n"
    sinks = "  - name: files\n    type: jsonl\n    path: out/files\n"
    pipeline = _write(tmp_path, f"sp_{uuid.uuid4().hex[:6]}", source, sinks)
    env = {"PG_DSN": pg_db}
    run, log = start_run(pipeline, tmp_path, env), tmp_path / "run.log"
    try:
        wait_for(lambda: _snapshot_running(tmp_path, pipeline, env), 120, 0.2, run, log)
        code, _ = stop(run, signal.SIGTERM)
        assert code == 0, log.read_text()[-3000:]
        report = _status(tmp_path, pipeline, env)
        [row] = [r for r in report["snapshot"] if r["table"] == "public.t"]
        assert row["state"] == "paused" and row["eta_s"] is None, row
        assert 0 < row["chunks_done"] < row["chunks_total"], row
        [files] = report["sinks"]
        assert files["state"] == "not running" and "stopped" in files["reason"], files
        assert [p["state"] for p in report["processes"]] == ["stopped"]
        human = cdc("status", str(pipeline), cwd=tmp_path, env=env).stdout
        table_row = next(line for line in human.splitlines() if "public.t " in line)
        assert "paused" in table_row and "running" not in table_row, human
        assert " s │" not in table_row, human  # no ETA
    finally:
        if run.poll() is None:
            stop(run)
        cdc("drop", str(pipeline), "--yes", cwd=tmp_path, env=env)


def _snapshot_running(tmp_path: Path, pipeline: Path, env: dict[str, str]) -> bool:
    rows = _status(tmp_path, pipeline, env)["snapshot"]
    return any(r["state"] == "running" and r.get("chunks_done", 0) >= 2 for r in rows)


def test_status_says_retrying_while_the_sink_cannot_open(
    pg_db: str, redis: LocalRedis, tmp_path: Path
) -> None:
    with psycopg.connect(pg_db, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.t (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO public.t SELECT g, 'v' FROM generate_series(1, 20) g")
    listen = f"{LOOPBACK}:{free_port()}"
    sinks = "  - name: cache\n    type: redis\n    url: ${REDIS_URL}\n"
    pipeline = _write(tmp_path, f"so_{uuid.uuid4().hex[:6]}", "", sinks)
    pipeline.write_text(pipeline.read_text() + f"metrics:\n  listen: '{listen}'\n")
    env = {"PG_DSN": pg_db, "REDIS_URL": redis.url}
    log = tmp_path / "run.log"
    first = start_run(pipeline, tmp_path, env)
    try:
        wait_for(lambda: _readyz(listen)[0] == 200, 90, 0.5, first, log)
    finally:
        code, _ = stop(first)
    assert code == 0, log.read_text()[-3000:]
    redis.stop()  # the sink recorded running; the next start cannot open it
    run = start_run(pipeline, tmp_path, env)
    try:
        wait_for(lambda: "sink:cache: not open yet" in str(_readyz(listen)[1]), 60, 0.5, run, log)
        retrying = lambda: _cache(_status(tmp_path, pipeline, env))["state"] == "retrying"  # noqa: E731
        wait_for(retrying, 30, 0.5, run, log)
        redis.start()
        wait_for(lambda: _readyz(listen)[0] == 200, 90, 0.5, run, log)
        back = lambda: _cache(_status(tmp_path, pipeline, env))["state"] == "running"  # noqa: E731
        wait_for(back, 30, 0.5, run, log)  # the state is written a moment after it opened
    finally:
        code, _ = stop(run)
        cdc("drop", str(pipeline), "--yes", cwd=tmp_path, env=env)
    assert code == 0, log.read_text()[-3000:]
