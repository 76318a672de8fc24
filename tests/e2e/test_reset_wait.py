"""``cdc sink FILE NAME --reset-table T --wait`` exits 0 only when the sink holds the rebuilt
table and runs on; a sink that stops again at once (here: the record that stopped it is in
another of its tables, still unread) ends the wait at once with exit 1 and the sink's reason,
not with a success nor after the whole timeout. Real PostgreSQL and DuckDB, through the CLI."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

from tests.e2e.cli_helpers import cdc, start_run, status_json, stop, wait_for


def _execute(dsn: str, *statements: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)  # type: ignore[arg-type]  # fixed test SQL


def _warehouse(tmp_path: Path, pipeline: Path, env: dict[str, str]) -> dict[str, Any]:
    sink: dict[str, Any] = status_json(pipeline, tmp_path, env)["sinks"][0]
    return sink


def test_reset_wait_fails_with_the_reason_when_the_sink_stops_again(
    pg_db: str, tmp_path: Path
) -> None:
    name = f"rw_{uuid.uuid4().hex[:6]}"
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(
        f"version: 1\nname: {name}\nsource:\n  type: postgres\n  dsn: ${{PG_DSN}}\n"
        "  tables: [public.items, public.other]\n"
        "sinks:\n  - name: warehouse\n    type: duckdb\n    path: out/wh.duckdb\n"
    )
    _execute(
        pg_db,
        "CREATE TABLE public.items (id int PRIMARY KEY, qty int)",
        "CREATE TABLE public.other (id int PRIMARY KEY, qty int)",
        "INSERT INTO public.items SELECT g, g FROM generate_series(1, 50) g",
        "INSERT INTO public.other SELECT g, g FROM generate_series(1, 10) g",
    )
    env = {"PG_DSN": pg_db}
    run = start_run(pipeline, tmp_path, env)
    log = tmp_path / "run.log"
    try:
        wait_for(lambda: _holds_every_row(tmp_path, pipeline, env), 90, 0.5, run, log)
        # Not a widening change: DuckDB cannot follow it, the sink stops on public.other.
        _execute(pg_db, "ALTER TABLE public.other ALTER COLUMN qty TYPE text",
                 "UPDATE public.other SET qty = 'many' WHERE id = 1")  # fmt: skip
        stopped = lambda: _warehouse(tmp_path, pipeline, env)["state"] == "stopped"  # noqa: E731
        wait_for(stopped, 60, 0.5, run, log)
        _check_the_wrong_reset_fails_at_once(tmp_path, pipeline, env)
        _check_the_right_reset_succeeds(tmp_path, pipeline, env)
    finally:
        code, _ = stop(run)
        cdc("drop", str(pipeline), "--yes", cwd=tmp_path, env=env)
    assert code == 0, log.read_text()[-3000:]


def _holds_every_row(tmp_path: Path, pipeline: Path, env: dict[str, str]) -> bool:
    sink = _warehouse(tmp_path, pipeline, env)
    return (
        sink["state"] == "running"
        and sink["lag"] == 0
        and sum(t["end"] for t in sink["topics"]) >= 60
    )


def _check_the_wrong_reset_fails_at_once(
    tmp_path: Path, pipeline: Path, env: dict[str, str]
) -> None:
    started = time.monotonic()
    reset = cdc("sink", str(pipeline), "warehouse", "--reset-table", "public.items", "--wait",
                "--timeout-s", "90", cwd=tmp_path, env=env, timeout=150)  # fmt: skip
    took = time.monotonic() - started
    assert reset.returncode == 1, reset.stdout + reset.stderr
    assert "error: sink warehouse stopped again after the reset: " in reset.stderr, reset.stderr
    assert "not a widening change" in reset.stderr and "timed out" not in reset.stderr
    assert took < 60, took  # the stop ends the wait, not the timeout


def _check_the_right_reset_succeeds(tmp_path: Path, pipeline: Path, env: dict[str, str]) -> None:
    reset = cdc("sink", str(pipeline), "warehouse", "--reset-table", "public.other", "--wait",
                "--timeout-s", "90", cwd=tmp_path, env=env, timeout=150)  # fmt: skip
    assert reset.returncode == 0, reset.stdout + reset.stderr
    assert "public.other: rebuilt from the log" in reset.stdout
    assert "sink warehouse: running, caught up with the log" in reset.stdout
    assert _warehouse(tmp_path, pipeline, env)["state"] == "running"
