"""One sink's schema problem stops that sink alone, and ``cdc sink --reset-table`` repairs it.

Real PostgreSQL, DuckDB and Redis, through the CLI: ``ALTER COLUMN ... TYPE text`` on an
``integer`` column stops the DuckDB sink (not a widening change), while the source and the Redis
sink go on, before and after a restart; ``cdc status`` and ``cdc verify`` say so; then
``cdc sink FILE warehouse --reset-table`` rebuilds the table from the log and it equals the
source table row by row. A table with no rows gets its DuckDB table too.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import duckdb
import orjson
import psycopg
import pytest
import redis

from tests.e2e.cli_helpers import cdc, start_run, stop, wait_for


def write_pipeline(tmp_path: Path, name: str) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(
        f"version: 1\nname: {name}\nsource:\n  type: postgres\n  dsn: ${{PG_DSN}}\n"
        "  tables: [public.items, public.empty]\n  snapshot: initial\n"
        "sinks:\n"
        "  - name: warehouse\n    type: duckdb\n    path: out/wh.duckdb\n"
        "  - name: cache\n    type: redis\n    url: ${REDIS_URL}\n"
    )
    return path


def status(tmp_path: Path, pipeline: Path, env: dict[str, str]) -> dict[str, Any]:
    result = cdc("status", str(pipeline), "--json", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    report: dict[str, Any] = orjson.loads(result.stdout)
    return report


def sink_of(report: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in report["sinks"] if s["sink"] == name)


def cached(url: str, name: str, key: int) -> dict[str, Any] | None:
    value = redis.Redis.from_url(url).get(f"{name}:public.items:{key}")
    return None if value is None else dict(orjson.loads(value))


def source_rows(dsn: str) -> dict[int, tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return {r[0]: r for r in conn.execute("SELECT id, qty, note FROM public.items")}


def execute(dsn: str, *statements: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)  # type: ignore[arg-type]  # fixed test SQL


@pytest.fixture
def setup(pg_db: str, redis_server: Any, tmp_path: Path) -> Any:
    redis_server.start()
    name = f"iso_{uuid.uuid4().hex[:8]}"
    execute(
        pg_db,
        "CREATE TABLE public.items (id integer PRIMARY KEY, qty integer, note text)",
        "INSERT INTO public.items SELECT g, g * 10, 'n' || g FROM generate_series(1, 50) g",
        "CREATE TABLE public.empty (id bigint PRIMARY KEY, v text, at date)",
    )
    env = {"PG_DSN": pg_db, "REDIS_URL": redis_server.url}
    pipeline = write_pipeline(tmp_path, name)
    yield pg_db, env, pipeline, name
    cdc("drop", str(pipeline), "--yes", cwd=tmp_path, env=env)


def test_a_stopped_sink_stops_alone_and_a_reset_rebuilds_its_table(
    setup: Any, tmp_path: Path
) -> None:
    dsn, env, pipeline, name = setup
    url = env["REDIS_URL"]
    log = tmp_path / "run.log"
    process = start_run(pipeline, tmp_path, env)

    def caught_up() -> bool:
        report = status(tmp_path, pipeline, env)
        return all(s["lag"] == 0 and s["state"] == "running" for s in report["sinks"]) and any(
            t["topic"] == f"{name}.public.items" and t["records"] >= 50 for t in report["topics"]
        )

    wait_for(caught_up, timeout=90, interval=0.5, process=process, log=log)

    # Not a widening change: DuckDB cannot follow it; writes go on after it.
    execute(
        dsn,
        "ALTER TABLE public.items ALTER COLUMN qty TYPE text",
        "UPDATE public.items SET qty = 'many' WHERE id <= 5",
        "INSERT INTO public.items VALUES (101, 'x', 'after the change')",
    )

    def warehouse_stopped() -> bool:
        return sink_of(status(tmp_path, pipeline, env), "warehouse")["state"] == "stopped"

    wait_for(warehouse_stopped, timeout=60, interval=0.5, process=process, log=log)
    wait_for(lambda: cached(url, name, 101) is not None, timeout=30, process=process, log=log)
    execute(dsn, "INSERT INTO public.items VALUES (102, 'y', 'the source goes on')")
    wait_for(lambda: cached(url, name, 102) is not None, timeout=30, process=process, log=log)
    assert cached(url, name, 3) == {"id": 3, "qty": "many", "note": "n3"}
    assert process.poll() is None  # the pipeline still runs

    warehouse = sink_of(status(tmp_path, pipeline, env), "warehouse")
    assert "qty" in warehouse["reason"] and "not a widening change" in warehouse["reason"]
    assert "--reset-table public.items" in warehouse["reason"]
    assert sink_of(status(tmp_path, pipeline, env), "cache")["state"] == "running"
    text = cdc("status", str(pipeline), cwd=tmp_path, env=env)
    assert text.returncode == 0, text.stderr
    assert "sink warehouse: STOPPED since" in text.stdout and "not a widening" in text.stdout
    assert "sink cache: running" in text.stdout

    # verify: the stopped sink is LAGGING, not DIFFERENT; the other sink agrees.
    checked = cdc("verify", str(pipeline), "--json", cwd=tmp_path, env=env)
    assert checked.returncode == 1 and checked.stdout, checked.stdout + checked.stderr
    by_sink = {(r["sink"], r["table"]): r for r in orjson.loads(checked.stdout)}
    lagging = by_sink[("warehouse", "public.items")]
    assert lagging["state"] == "lagging" and lagging["lag"]["sink_state"] == "stopped"
    assert lagging["lag"]["records"] >= 1 and not lagging["missing_in_sink"]
    assert by_sink[("cache", "public.items")]["state"] == "ok"
    human = cdc("verify", str(pipeline), "--sink", "warehouse", cwd=tmp_path, env=env)
    assert "LAGGING" in human.stdout and "DIFFERENT" not in human.stdout, human.stdout
    assert "the sink is STOPPED" in human.stdout

    # A restart tries the sink again: it stops alone again, the rest goes on.
    code, _ = stop(process)
    assert code == 1, log.read_text()[-3000:]  # a sink stopped: not a clean run
    assert "pipeline.stopped_with_sinks_stopped" in log.read_text()
    before = sink_of(status(tmp_path, pipeline, env), "warehouse")["since_ms"]
    process = start_run(pipeline, tmp_path, env)

    def stopped_again() -> bool:
        again = sink_of(status(tmp_path, pipeline, env), "warehouse")
        return again["state"] == "stopped" and again["since_ms"] > before

    wait_for(stopped_again, timeout=60, interval=0.5, process=process, log=log)
    execute(dsn, "INSERT INTO public.items VALUES (103, 'z', 'after a restart')")
    wait_for(lambda: cached(url, name, 103) is not None, timeout=30, process=process, log=log)

    # The remedy, while the pipeline runs.
    reset = cdc(
        "sink", str(pipeline), "warehouse", "--reset-table", "public.items", "--wait",
        "--timeout-s", "120", cwd=tmp_path, env=env, timeout=180,
    )  # fmt: skip
    assert reset.returncode == 0, reset.stdout + reset.stderr + log.read_text()[-3000:]
    assert "public.items: rebuilt from the log" in reset.stdout
    assert sink_of(status(tmp_path, pipeline, env), "warehouse")["state"] == "running"
    execute(dsn, "UPDATE public.items SET qty = 'after reset' WHERE id = 7")
    checked = cdc("verify", str(pipeline), "--wait", "60", cwd=tmp_path, env=env, timeout=180)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "LAGGING" not in checked.stdout
    code, _ = stop(process)
    assert code == 0, log.read_text()[-3000:]

    # Row by row: the rebuilt DuckDB table equals the source table.
    with duckdb.connect(str(tmp_path / "out" / "wh.duckdb"), read_only=True) as con:
        rebuilt = {
            r[0]: r for r in con.execute('SELECT id, qty, note FROM "public"."items"').fetchall()
        }
        qty_type = con.execute(
            "SELECT data_type FROM information_schema.columns WHERE table_schema = 'public' "
            "AND table_name = 'items' AND column_name = 'qty'"
        ).fetchone()
        empty = con.execute(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = 'public' AND table_name = 'empty' ORDER BY ordinal_position"
        ).fetchall()
        empty_rows = con.execute('SELECT count(*) FROM "public"."empty"').fetchone()
    assert rebuilt == source_rows(dsn)
    assert len(rebuilt) == 53 and rebuilt[7][1] == "after reset" and rebuilt[3][1] == "many"
    assert qty_type == ("VARCHAR",)
    # The table with no rows got its DuckDB table, from its published schema.
    assert empty[:3] == [("id", "BIGINT"), ("v", "VARCHAR"), ("at", "DATE")]
    assert empty_rows == (0,)


def test_reset_table_rejects_unknown_names(setup: Any, tmp_path: Path) -> None:
    _, env, pipeline, _ = setup
    unknown_sink = cdc("sink", str(pipeline), "nope", "--reset-table", "public.items",
                       cwd=tmp_path, env=env)  # fmt: skip
    assert unknown_sink.returncode == 2 and "no sink 'nope'" in unknown_sink.stderr
    unknown_table = cdc("sink", str(pipeline), "cache", "--reset-table", "public.nope",
                        cwd=tmp_path, env=env)  # fmt: skip
    assert unknown_table.returncode == 2 and "holds no table public.nope" in unknown_table.stderr


def test_a_reset_requested_while_nothing_runs_is_applied_at_the_next_start(
    setup: Any, tmp_path: Path
) -> None:
    dsn, env, pipeline, _ = setup
    log = tmp_path / "run.log"
    process = start_run(pipeline, tmp_path, env)
    wait_for(
        lambda: (
            sink_of(status(tmp_path, pipeline, env), "warehouse")["lag"] == 0
            and sink_of(status(tmp_path, pipeline, env), "warehouse")["state"] == "running"
            and any(t["records"] >= 50 for t in status(tmp_path, pipeline, env)["topics"])
        ),
        timeout=90,
        interval=0.5,
        process=process,
        log=log,
    )
    assert stop(process)[0] == 0
    # Damage the warehouse by hand while nothing runs: a reset must bring it back.
    with duckdb.connect(str(tmp_path / "out" / "wh.duckdb")) as con:
        con.execute('DELETE FROM "public"."items" WHERE id <= 10')
    requested = cdc("sink", str(pipeline), "warehouse", "--reset-table", "public.items",
                    cwd=tmp_path, env=env)  # fmt: skip
    assert requested.returncode == 0, requested.stderr
    assert "applies it before reading anything" in requested.stdout
    report = sink_of(status(tmp_path, pipeline, env), "warehouse")
    assert [r["state"] for r in report["resets"]] == ["requested"]
    process = start_run(pipeline, tmp_path, env)
    wait_for(
        lambda: (
            [r["state"] for r in sink_of(status(tmp_path, pipeline, env), "warehouse")["resets"]]
            == ["done"]
        ),
        timeout=90,
        interval=0.5,
        process=process,
        log=log,
    )
    assert stop(process)[0] == 0
    with duckdb.connect(str(tmp_path / "out" / "wh.duckdb"), read_only=True) as con:
        rebuilt = {
            r[0]: r for r in con.execute('SELECT id, qty, note FROM "public"."items"').fetchall()
        }
    assert rebuilt == source_rows(dsn) and len(rebuilt) == 50
