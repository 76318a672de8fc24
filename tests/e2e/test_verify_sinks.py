"""``cdc verify`` against real PostgreSQL and Redis: two pipelines with a sink of the same name
in one Redis database each verify their own keys, and a sink that is behind the log is reported
LAGGING (with its offsets, not as thousands of differences) until ``--wait`` lets it catch up.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest

from tests.e2e.cli_helpers import cdc, start_run, status_json, stop, wait_for


def write_pipeline(tmp_path: Path, name: str, table: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        f"version: 1\nname: {name}\nsource:\n  type: postgres\n  dsn: ${{PG_DSN}}\n"
        f"  tables: [{table}]\n  snapshot: initial\n"
        f"log:\n  type: embedded\n  path: .cdc/{name}\n"
        "sinks:\n  - name: cache\n    type: redis\n    url: ${REDIS_URL}\n"
    )
    return path


def execute(dsn: str, *statements: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)  # type: ignore[arg-type]  # fixed test SQL


def lag(tmp_path: Path, pipeline: Path, env: dict[str, str]) -> tuple[int, int]:
    """(the sink's lag, records in the table's topic)."""
    (sink,) = status_json(pipeline, tmp_path, env)["sinks"]
    return sink["lag"], sum(t["end"] for t in sink["topics"])


def verify(tmp_path: Path, pipeline: Path, env: dict[str, str], *extra: str) -> Any:
    result = cdc("verify", str(pipeline), "--json", *extra, cwd=tmp_path, env=env, timeout=180)
    assert result.stdout, result.stderr
    return result.returncode, orjson.loads(result.stdout)


@pytest.fixture
def two(pg_db: str, redis_server: Any, tmp_path: Path) -> Any:
    redis_server.start()
    suffix = uuid.uuid4().hex[:6]
    names = (f"va_{suffix}", f"vb_{suffix}")
    execute(
        pg_db,
        "CREATE TABLE public.a (id integer PRIMARY KEY, v text)",
        "CREATE TABLE public.b (id integer PRIMARY KEY, v text)",
        "INSERT INTO public.a SELECT g, 'a' || g FROM generate_series(1, 200) g",
        "INSERT INTO public.b SELECT g, 'b' || g FROM generate_series(1, 300) g",
    )
    env = {"PG_DSN": pg_db, "REDIS_URL": redis_server.url}
    files = (
        write_pipeline(tmp_path, names[0], "public.a"),
        write_pipeline(tmp_path, names[1], "public.b"),
    )
    yield pg_db, env, files
    for file in files:
        cdc("drop", str(file), "--yes", cwd=tmp_path, env=env)


def test_two_pipelines_on_one_redis_db_and_a_lagging_sink(two: Any, tmp_path: Path) -> None:
    dsn, env, (a, b) = two
    log = tmp_path / "run.log"
    _check_each_pipeline_verifies_its_own_keys(tmp_path, env, (a, b), log)
    _check_a_sink_behind_the_log_is_lagging(tmp_path, env, dsn, a, log)
    _check_wait_lets_the_sink_catch_up(tmp_path, env, a)


def _check_each_pipeline_verifies_its_own_keys(
    tmp_path: Path, env: dict[str, str], files: tuple[Path, Path], log: Path
) -> None:
    a, b = files
    runs = [start_run(a, tmp_path, env), start_run(b, tmp_path, env)]
    for file, rows in ((a, 200), (b, 300)):
        wait_for(
            lambda file=file, rows=rows: lag(tmp_path, file, env) == (0, rows),
            timeout=90,
            interval=0.5,
            process=runs[0],
            log=log,
        )
    # Both sinks are named "cache" and share the database: each pipeline checks its own keys.
    for file, rows in ((a, 200), (b, 300)):
        code, report = verify(tmp_path, file, env)
        assert code == 0, report
        assert [(r["sink"], r["state"], r["sink_rows"]["count"]) for r in report] == [
            ("cache", "ok", rows)
        ]
    for run in runs:
        assert stop(run)[0] == 0


def _check_a_sink_behind_the_log_is_lagging(
    tmp_path: Path, env: dict[str, str], dsn: str, a: Path, log: Path
) -> None:
    # Only the source runs: the log moves on, the sink does not.
    source_only = start_run(a, tmp_path, env, "--role", "source")
    execute(dsn, "INSERT INTO public.a SELECT g, 'late' FROM generate_series(201, 260) g")
    wait_for(
        lambda: lag(tmp_path, a, env) == (60, 260),
        timeout=60,
        interval=0.5,
        process=source_only,
        log=log,
    )
    code, report = verify(tmp_path, a, env)
    assert code == 1
    (result,) = report
    assert result["state"] == "lagging" and not result["ok"]
    assert result["lag"]["records"] == 60 and not result["missing_in_sink"]
    assert sum(p["end"] - p["committed"] for p in result["lag"]["partitions"].values()) == 60
    human = cdc("verify", str(a), cwd=tmp_path, env=env)
    assert (
        human.returncode == 1 and "LAGGING" in human.stdout and "60 records behind" in human.stdout
    )
    assert "DIFFERENT" not in human.stdout
    assert stop(source_only)[0] == 0


def _check_wait_lets_the_sink_catch_up(tmp_path: Path, env: dict[str, str], a: Path) -> None:
    # The whole pipeline again: --wait lets the sink reach the log's end, then compares.
    run = start_run(a, tmp_path, env)
    code, report = verify(tmp_path, a, env, "--wait", "60")
    assert code == 0, report
    assert [(r["state"], r["sink_rows"]["count"]) for r in report] == [("ok", 260)]
    filtered = cdc(
        "verify", str(a), "--sink", "cache", "--table", "public.a", cwd=tmp_path, env=env
    )
    assert filtered.returncode == 0, filtered.stdout + filtered.stderr
    bad = cdc("verify", str(a), "--table", "public.b", cwd=tmp_path, env=env)
    assert bad.returncode == 2 and "public.b" in bad.stderr
    assert stop(run)[0] == 0
