"""``cdc verify``'s summary line says what it did not verify: a jsonl sink (which cannot be read
back) is NOT VERIFIABLE, named in the summary, and the exit is 1, as for a table the transforms
make impossible to compare; ``--sink`` leaves it out and the rest verifies with exit 0. Real
PostgreSQL, a real pipeline run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import psycopg

from tests.e2e.cli_helpers import cdc, start_run, status_json, stop, wait_for


def _pipeline(tmp_path: Path) -> Path:
    path = tmp_path / "vs.yaml"
    path.write_text(
        "version: 1\nname: vs\nsource:\n  type: postgres\n  dsn: ${PG_DSN}\n"
        "  tables: [public.items]\nlog:\n  type: embedded\n  path: .cdc/vs\n"
        "sinks:\n  - name: warehouse\n    type: duckdb\n    path: out/vs.duckdb\n"
        "  - name: files\n    type: jsonl\n    path: out/files\n"
    )
    return path


def _caught_up(tmp_path: Path, pipeline: Path, env: dict[str, str]) -> bool:
    try:
        sinks = status_json(pipeline, tmp_path, env)["sinks"]
    except Exception:  # as the command's exit 1: the log not there yet
        sinks = []
    return bool(sinks) and all(s["lag"] == 0 and any(t["end"] for t in s["topics"]) for s in sinks)


def test_verify_names_the_sink_it_cannot_read_back_and_exits_1(pg_db: str, tmp_path: Path) -> None:
    with psycopg.connect(pg_db, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.items (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO public.items SELECT g, 'v' || g FROM generate_series(1, 50) g")
    env = {"PG_DSN": pg_db}
    pipeline = _pipeline(tmp_path)
    run = start_run(pipeline, tmp_path, env)
    try:
        wait_for(lambda: _caught_up(tmp_path, pipeline, env), 90, process=run)
    finally:
        code, _ = stop(run)
        cdc("drop", str(pipeline), "--yes", cwd=tmp_path, env=env)
    assert code == 0
    everything = cdc("verify", str(pipeline), cwd=tmp_path, env=env)
    summary = everything.stdout.splitlines()[-1]
    assert summary == (
        "verify: 1 of 2 tables agree; 1 sink not verifiable "
        "(files: jsonl sinks cannot be read back); exit 1"
    ), everything.stdout
    assert everything.returncode == 1, everything.stderr
    as_json: list[dict[str, Any]] = orjson.loads(
        cdc("verify", str(pipeline), "--json", cwd=tmp_path, env=env).stdout
    )
    assert {(r["sink"], r["state"], r["ok"]) for r in as_json} == {
        ("warehouse", "ok", True),
        ("files", "unverifiable", False),
    }
    warehouse = cdc("verify", str(pipeline), "--sink", "warehouse", cwd=tmp_path, env=env)
    assert warehouse.returncode == 0, warehouse.stdout + warehouse.stderr
    assert warehouse.stdout.splitlines()[-1] == "verify: 1 of 1 table agrees; exit 0"
