"""One sink's schema problem stops that sink alone, and ``cdc sink --reset-table`` repairs it.

Real PostgreSQL, DuckDB and Redis, through the CLI: ``ALTER COLUMN ... TYPE text`` on an
``integer`` column stops the DuckDB sink (not a widening change), while the source and the Redis
sink go on, before and after a restart; ``cdc status`` and ``cdc verify`` say so; then
``cdc sink FILE warehouse --reset-table`` rebuilds the table from the log and it equals the
source table row by row. A table with no rows gets its DuckDB table too.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import orjson
import psycopg
import pytest
import redis

from tests.e2e.cli_helpers import cdc, start_run, status_json, stop, wait_for


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
    return status_json(pipeline, tmp_path, env)


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


@dataclass
class Scene:
    """One pipeline under test: its files, its environment, and its ``cdc run`` process."""

    tmp_path: Path
    dsn: str
    env: dict[str, str]
    pipeline: Path
    name: str
    process: subprocess.Popen[str] | None = None

    @property
    def log(self) -> Path:
        return self.tmp_path / "run.log"

    @property
    def url(self) -> str:
        return self.env["REDIS_URL"]

    def start(self) -> None:
        self.process = start_run(self.pipeline, self.tmp_path, self.env)

    def stop(self) -> int:
        assert self.process is not None
        code, _ = stop(self.process)
        return code

    def cdc(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return cdc(*args, cwd=self.tmp_path, env=self.env, timeout=timeout)

    def status(self) -> dict[str, Any]:
        return status(self.tmp_path, self.pipeline, self.env)

    def sink(self, name: str) -> dict[str, Any]:
        return sink_of(self.status(), name)

    def wait(self, predicate: Callable[[], bool], timeout: float, **options: Any) -> None:
        wait_for(predicate, timeout=timeout, process=self.process, log=self.log, **options)

    def wait_cached(self, key: int) -> None:
        self.wait(lambda: cached(self.url, self.name, key) is not None, timeout=30)


def test_a_stopped_sink_stops_alone_and_a_reset_rebuilds_its_table(
    setup: Any, tmp_path: Path
) -> None:
    scene = Scene(tmp_path, *setup)
    scene.start()
    scene.wait(lambda: _caught_up(scene), timeout=90, interval=0.5)
    _make_a_change_duckdb_cannot_follow(scene.dsn)
    _check_the_warehouse_stops_and_the_rest_goes_on(scene)
    _check_status_names_the_stopped_sink(scene)
    _check_verify_calls_it_lagging_not_different(scene)
    _restart_and_check_it_stops_alone_again(scene)
    _reset_the_table_while_the_pipeline_runs(scene)
    _check_the_rebuilt_table_equals_the_source(scene)


def _caught_up(scene: Scene) -> bool:
    report = scene.status()
    return all(s["lag"] == 0 and s["state"] == "running" for s in report["sinks"]) and any(
        t["topic"] == f"{scene.name}.public.items" and t["records"] >= 50 for t in report["topics"]
    )


def _make_a_change_duckdb_cannot_follow(dsn: str) -> None:
    # Not a widening change: DuckDB cannot follow it; writes go on after it.
    execute(
        dsn,
        "ALTER TABLE public.items ALTER COLUMN qty TYPE text",
        "UPDATE public.items SET qty = 'many' WHERE id <= 5",
        "INSERT INTO public.items VALUES (101, 'x', 'after the change')",
    )


def _check_the_warehouse_stops_and_the_rest_goes_on(scene: Scene) -> None:
    scene.wait(lambda: scene.sink("warehouse")["state"] == "stopped", timeout=60, interval=0.5)
    scene.wait_cached(101)
    execute(scene.dsn, "INSERT INTO public.items VALUES (102, 'y', 'the source goes on')")
    scene.wait_cached(102)
    assert cached(scene.url, scene.name, 3) == {"id": 3, "qty": "many", "note": "n3"}
    assert scene.process is not None and scene.process.poll() is None  # the pipeline still runs


def _check_status_names_the_stopped_sink(scene: Scene) -> None:
    warehouse = scene.sink("warehouse")
    assert "qty" in warehouse["reason"] and "not a widening change" in warehouse["reason"]
    assert "--reset-table public.items" in warehouse["reason"]
    assert scene.sink("cache")["state"] == "running"
    text = scene.cdc("status", str(scene.pipeline))
    assert text.returncode == 0, text.stderr
    assert "sink warehouse: STOPPED since" in text.stdout and "not a widening" in text.stdout
    assert "sink cache: running" in text.stdout


def _check_verify_calls_it_lagging_not_different(scene: Scene) -> None:
    # verify: the stopped sink is LAGGING, not DIFFERENT; the other sink agrees.
    checked = scene.cdc("verify", str(scene.pipeline), "--json")
    assert checked.returncode == 1 and checked.stdout, checked.stdout + checked.stderr
    by_sink = {(r["sink"], r["table"]): r for r in orjson.loads(checked.stdout)}
    lagging = by_sink[("warehouse", "public.items")]
    assert lagging["state"] == "lagging" and lagging["lag"]["sink_state"] == "stopped"
    assert lagging["lag"]["records"] >= 1 and not lagging["missing_in_sink"]
    assert by_sink[("cache", "public.items")]["state"] == "ok"
    human = scene.cdc("verify", str(scene.pipeline), "--sink", "warehouse")
    assert "LAGGING" in human.stdout and "DIFFERENT" not in human.stdout, human.stdout
    assert "the sink is STOPPED" in human.stdout


def _restart_and_check_it_stops_alone_again(scene: Scene) -> None:
    # A restart tries the sink again: it stops alone again, the rest goes on.
    code = scene.stop()
    assert code == 1, scene.log.read_text()[-3000:]  # a sink stopped: not a clean run
    assert "pipeline.stopped_with_sinks_stopped" in scene.log.read_text()
    before = scene.sink("warehouse")["since_ms"]
    scene.start()

    def stopped_again() -> bool:
        again = scene.sink("warehouse")
        return again["state"] == "stopped" and again["since_ms"] > before

    scene.wait(stopped_again, timeout=60, interval=0.5)
    execute(scene.dsn, "INSERT INTO public.items VALUES (103, 'z', 'after a restart')")
    scene.wait_cached(103)


def _reset_the_table_while_the_pipeline_runs(scene: Scene) -> None:
    reset = scene.cdc(
        "sink", str(scene.pipeline), "warehouse", "--reset-table", "public.items", "--wait",
        "--timeout-s", "120", timeout=180,
    )  # fmt: skip
    assert reset.returncode == 0, reset.stdout + reset.stderr + scene.log.read_text()[-3000:]
    assert "public.items: rebuilt from the log" in reset.stdout
    assert scene.sink("warehouse")["state"] == "running"
    execute(scene.dsn, "UPDATE public.items SET qty = 'after reset' WHERE id = 7")
    checked = scene.cdc("verify", str(scene.pipeline), "--wait", "60", timeout=180)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "LAGGING" not in checked.stdout
    code = scene.stop()
    assert code == 0, scene.log.read_text()[-3000:]


def _check_the_rebuilt_table_equals_the_source(scene: Scene) -> None:
    # Row by row: the rebuilt DuckDB table equals the source table.
    with duckdb.connect(str(scene.tmp_path / "out" / "wh.duckdb"), read_only=True) as con:
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
    assert rebuilt == source_rows(scene.dsn)
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
    scene = Scene(tmp_path, *setup)
    scene.start()
    scene.wait(lambda: _warehouse_caught_up(scene), timeout=90, interval=0.5)
    assert scene.stop() == 0
    # Damage the warehouse by hand while nothing runs: a reset must bring it back.
    with duckdb.connect(str(tmp_path / "out" / "wh.duckdb")) as con:
        con.execute('DELETE FROM "public"."items" WHERE id <= 10')
    requested = scene.cdc("sink", str(scene.pipeline), "warehouse", "--reset-table", "public.items")
    assert requested.returncode == 0, requested.stderr
    assert "applies it before reading anything" in requested.stdout
    assert _reset_states(scene) == ["requested"]
    scene.start()
    scene.wait(lambda: _reset_states(scene) == ["done"], timeout=90, interval=0.5)
    assert scene.stop() == 0
    with duckdb.connect(str(tmp_path / "out" / "wh.duckdb"), read_only=True) as con:
        rebuilt = {
            r[0]: r for r in con.execute('SELECT id, qty, note FROM "public"."items"').fetchall()
        }
    assert rebuilt == source_rows(scene.dsn) and len(rebuilt) == 50


def _warehouse_caught_up(scene: Scene) -> bool:
    return (
        scene.sink("warehouse")["lag"] == 0
        and scene.sink("warehouse")["state"] == "running"
        and any(t["records"] >= 50 for t in scene.status()["topics"])
    )


def _reset_states(scene: Scene) -> list[str]:
    return [r["state"] for r in scene.sink("warehouse")["resets"]]
