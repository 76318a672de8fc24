"""A keyless table under REPLICA IDENTITY FULL (the fix ``cdc doctor`` gives) against real
PostgreSQL and DuckDB: its records are keyed by every column, so two identical rows are one row
in the sink, and deleting one copy by ``ctid`` deletes the sink's row. ``cdc verify`` compares
such a table as a set: ``ok`` with a note while the source holds the duplicate, and NOT
VERIFIABLE with the reason (not DIFFERENT) once the copies' delete left the sink a row short;
``cdc doctor`` says that duplicates collapse."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import orjson
import psycopg

from tests.e2e.cli_helpers import cdc, start_run, status_json, stop, wait_for


def _execute(dsn: str, *statements: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)  # type: ignore[arg-type]  # fixed test SQL


def _verify(tmp_path: Path, pipeline: Path, env: dict[str, str]) -> tuple[int, dict[str, Any]]:
    result = cdc("verify", str(pipeline), "--json", "--attempts", "1", cwd=tmp_path, env=env)
    assert result.stdout, result.stderr
    by_table = {r["table"]: r for r in orjson.loads(result.stdout)}
    return result.returncode, by_table


def _ends(tmp_path: Path, pipeline: Path, env: dict[str, str]) -> dict[str, int]:
    """Each table's records in the log, once the sink applied every one of them (else {})."""
    [sink] = status_json(pipeline, tmp_path, env)["sinks"]
    ends = {t["topic"].split(".", 1)[1]: int(t["end"]) for t in sink["topics"]}
    return ends if sink["lag"] == 0 else {}


def _applied(
    tmp_path: Path, pipeline: Path, env: dict[str, str], more_than: dict[str, int]
) -> bool:
    """The sink applied more records of each table than ``more_than`` says, and all of them."""
    ends = _ends(tmp_path, pipeline, env)
    return bool(ends) and all(ends[t] > n for t, n in more_than.items())


def test_verify_and_doctor_on_a_keyless_full_table(pg_db: str, tmp_path: Path) -> None:
    _execute(
        pg_db,
        "CREATE TABLE public.k (a int, b text)",
        "ALTER TABLE public.k REPLICA IDENTITY FULL",
        "INSERT INTO public.k VALUES (1, 'x'), (1, 'x'), (2, 'y')",
        "CREATE TABLE public.p (id int PRIMARY KEY, b text)",
        "INSERT INTO public.p VALUES (1, 'x')",
    )
    name = f"kl_{uuid.uuid4().hex[:6]}"
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(
        f"version: 1\nname: {name}\nsource:\n  type: postgres\n  dsn: ${{PG_DSN}}\n"
        "  tables: [public.k, public.p]\n"
        "sinks:\n  - name: warehouse\n    type: duckdb\n    path: out/wh.duckdb\n"
    )
    env = {"PG_DSN": pg_db}
    doctor = cdc("doctor", str(pipeline), cwd=tmp_path, env=env)
    assert "identical rows collapse into one in the sinks" in doctor.stdout, doctor.stdout
    run, log = start_run(pipeline, tmp_path, env), tmp_path / "run.log"
    try:
        snapshot = {"public.k": 2, "public.p": 0}  # both tables' rows, not one table's
        wait_for(lambda: _applied(tmp_path, pipeline, env, snapshot), 90, 0.5, run, log)
        code, tables = _verify(tmp_path, pipeline, env)
        assert code == 0 and tables["public.k"]["state"] == "ok", tables
        assert "1 source row duplicate another row and is held once" in tables["public.k"]["note"]
        assert tables["public.p"]["note"] is None
        human = cdc("verify", str(pipeline), cwd=tmp_path, env=env).stdout
        assert "    note: 1 source row duplicate" in human, human
        before = {"public.k": _ends(tmp_path, pipeline, env)["public.k"]}
        _execute(pg_db, "DELETE FROM public.k WHERE ctid = (SELECT min(ctid) FROM public.k "
                        "WHERE a = 1)")  # fmt: skip
        wait_for(lambda: _applied(tmp_path, pipeline, env, before), 60, 0.5, run, log)
        code, tables = _verify(tmp_path, pipeline, env)
        human = cdc("verify", str(pipeline), cwd=tmp_path, env=env)
    finally:
        stopped, _ = stop(run)
        cdc("drop", str(pipeline), "--yes", cwd=tmp_path, env=env)
    assert stopped == 0, log.read_text()[-3000:]
    keyless = tables["public.k"]
    assert code == 1 and keyless["state"] == "unverifiable", keyless
    assert "identical rows collapse into one in a sink" in keyless["unverifiable"]
    assert keyless["missing_in_sink"] == [{"a": 1, "b": "x"}]  # kept for the reader
    assert tables["public.p"]["state"] == "ok"
    assert "NOT VERIFIABLE" in human.stdout and "DIFFERENT" not in human.stdout, human.stdout
    assert human.stdout.splitlines()[-1] == (
        "verify: 1 of 2 tables agree; 1 table NOT VERIFIABLE; exit 1"
    ), human.stdout
