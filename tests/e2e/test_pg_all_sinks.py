"""PostgreSQL through the CLI into all three sinks: a random workload over every type, then
``cdc verify`` and a row-by-row comparison of each sink with the table, with typed values.

Also: the same under three SIGKILLs of ``cdc run``, each once it is mid-work (history mode must
hold no duplicate), and Redis stopped mid-run until the cache is well behind (no loss, the other
sinks unaffected). Every wait is on a condition (the workload's commits, ``cdc status``), not a
clock.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import orjson
import psycopg
import pytest

from cdc.config.pipeline import load
from cdc.log.factory import open_log
from cdc.records.normalize import canonical
from cdc.runtime.schemas import SchemaCatalog
from connectors.postgres import PostgresSourcePlugin
from connectors.postgres.lsn import str_to_lsn
from sinks.redis import RedisSinkPlugin
from sinks.search import SearchSinkPlugin
from tests.e2e.cli_helpers import cdc, start_run, status_json, stop, wait_for
from tests.e2e.shop_workload import Workload, create
from tests.services.redis import LocalRedis

TABLE = ("public", "everything")


KAFKA_LOG = "log:\n  type: kafka\n  bootstrap_servers: ${KAFKA}\n  partitions: 3\n"


def write_pipeline(
    tmp_path: Path, mode: str = "current", log: str = "", status_interval_s: float = 1
) -> Path:
    """The pipeline file; its name is ``$PIPE`` (default ``shop``), the log embedded or ``log``.

    ``status_interval_s`` is 1 s, not the default 10 s: ``caught_up`` waits for the slot to
    confirm the WAL, which an idle source reports only once per interval.
    """
    path = tmp_path / "shop.yaml"
    path.write_text(
        "version: 1\nname: ${PIPE:-shop}\nsource:\n  type: postgres\n  dsn: ${PG_DSN}\n"
        "  tables: [public.everything, public.lines]\n  snapshot: initial\n"
        f"  status_interval_s: {status_interval_s}\n"
        f"{log}"
        "sinks:\n"
        f"  - name: warehouse\n    type: duckdb\n    path: out/shop.duckdb\n    mode: {mode}\n"
        "  - name: cache\n    type: redis\n    url: ${REDIS_URL}\n"
        "  - name: search\n    type: search\n    path: out/search\n"
    )
    return path


def status(tmp_path: Path, pipeline: Path, env: dict[str, str]) -> dict[str, Any]:
    return status_json(pipeline, tmp_path, env)


def lag(report: dict[str, Any], sink: str) -> int:
    return next(int(s["lag"]) for s in report["sinks"] if s["sink"] == sink)


# What caught_up() saw last, for the failure message of a wait on it.
LAST_SEEN: dict[str, Any] = {}


def caught_up(tmp_path: Path, pipeline: Path, env: dict[str, str], dsn: str, target: int) -> bool:
    """The slot has confirmed WAL up to ``target`` and every sink has applied all of the log.

    ``target`` is the server's WAL position once the workload stopped, fixed: comparing with the
    current position instead would make any WAL written meanwhile in other databases of the
    shared server (autovacuum, other tests) a moving goal, which the slot reaches only at its
    next status interval.
    """
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = %s",
            (env.get("PIPE", "shop") + "_slot",),
        ).fetchone()
    LAST_SEEN.update(slot=row, target=target)
    if row is None or row[0] is None or str_to_lsn(row[0]) < target - 10_000:
        return False  # WAL left that is not only idle; ``cdc status`` (a process) can wait
    report = status(tmp_path, pipeline, env)
    LAST_SEEN["status"] = report
    return all(s["lag"] == 0 for s in report["sinks"])


def wait_caught_up(
    process: Any, tmp_path: Path, pipeline: Path, env: dict[str, str], dsn: str, timeout: float
) -> None:
    """Wait until all the WAL written so far is in the log and in every sink."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    assert row is not None
    target = str_to_lsn(row[0])
    LAST_SEEN.clear()
    wait_for(
        lambda: caught_up(tmp_path, pipeline, env, dsn, target),
        timeout=timeout,
        interval=0.2,
        process=process,
        log=tmp_path / "run.log",
        last_seen=LAST_SEEN,
    )


def source_rows(pipeline_path: Path, env: dict[str, str]) -> dict[Any, dict[str, Any]]:
    pipeline = load(pipeline_path, {**os.environ, **env})
    return {k["id"]: r for k, r in PostgresSourcePlugin.read_rows(pipeline.source, *TABLE)}


def typed_rows(dsn: str) -> dict[int, dict[str, Any]]:
    with psycopg.connect(dsn) as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        return {r["id"]: r for r in cur.execute("SELECT * FROM public.everything")}


def assert_duckdb_equals_table(dsn: str, path: Path) -> None:
    """Typed comparison: DuckDB's values against psycopg's for the same rows."""
    expected = typed_rows(dsn)
    with duckdb.connect(str(path), read_only=True) as db:
        db.execute("SET TimeZone = 'UTC'")
        cursor = db.execute('SELECT * FROM "public"."everything"')
        names = [d[0] for d in cursor.description]
        got = {row[0]: dict(zip(names, row, strict=True)) for row in cursor.fetchall()}
    assert got.keys() == expected.keys()
    for key, row in expected.items():
        mine = got[key]
        assert mine["n"] == row["n"], key  # DECIMAL(12,3) both sides
        assert mine["tstz"] == row["tstz"], key
        assert mine["ts"] == row["ts"] and mine["d"] == row["d"], key
        assert mine["i2"] == row["i2"] and mine["i4"] == row["i4"], key
        assert mine["b"] == row["b"] and mine["t"] == row["t"] and mine["vc"] == row["vc"], key
        assert mine["ai"] == row["ai"] and mine["at"] == row["at"], key
        assert (None if mine["by"] is None else bytes(mine["by"])) == row["by"], key
        assert mine["u"] == row["u"], key
        jb = mine["jb"] if not isinstance(mine["jb"], str) else orjson.loads(mine["jb"])
        assert jb == row["jb"], key
        for column in ("f8", "nn"):
            left, right = mine[column], row[column]
            if isinstance(right, float | Decimal) and right != right:  # NaN
                assert str(left).lower() == "nan", (key, column, left)
            else:
                assert canonical(
                    left, "double precision" if column == "f8" else "numeric"
                ) == canonical(right, "double precision" if column == "f8" else "numeric"), key


def assert_json_sink_equals_table(
    pipeline_path: Path, env: dict[str, str], plugin: Any, sink: str, catalog: SchemaCatalog
) -> None:
    """Redis and search hand rows back as JSON: compare them normalised by column type."""
    pipeline = load(pipeline_path, {**os.environ, **env})
    schema = catalog.get(*TABLE)
    assert schema is not None
    expected = source_rows(pipeline_path, env)
    got = {r["id"]: r for _, r in plugin.read_rows(pipeline.sink(sink), *TABLE)}
    assert got.keys() == expected.keys()
    for key, row in expected.items():
        for column in schema.columns:
            assert canonical(got[key].get(column.name), column.type) == canonical(
                row.get(column.name), column.type
            ), (sink, key, column.name)


def table_records(report: dict[str, Any]) -> int:
    """Records in the table's topic, all partitions: what the source has committed so far."""
    topic = f"{report['pipeline']}.{TABLE[0]}.{TABLE[1]}"
    ends = [t["end_offsets"] for t in report["topics"] if t["topic"] == topic]
    return sum(int(o) for offsets in ends for o in offsets.values())


def wait_status(
    process: Any,
    tmp_path: Path,
    pipeline: Path,
    env: dict[str, str],
    holds: Any,
    timeout: float = 120,
) -> dict[str, Any]:
    """Poll ``cdc status --json`` until ``holds(report)``; return that report."""
    seen: dict[str, Any] = {}

    def check() -> bool:
        seen["status"] = status(tmp_path, pipeline, env)
        return bool(holds(seen["status"]))

    wait_for(check, timeout, 0.2, process=process, log=tmp_path / "run.log", last_seen=seen)
    return seen["status"]


# Transactions of the random workload (seeded, so the same changes every run), in place of
# 8 s of it: the same amount on a machine of any speed, well past the 100 the first test needs.
TRANSACTIONS = 250


def run_workload(workload: Workload, process: Any, tmp_path: Path) -> None:
    """Run ``workload`` beside ``cdc run`` until it committed ``TRANSACTIONS``."""
    seen: dict[str, Any] = {}

    def done() -> bool:
        seen["committed"] = workload.count
        return workload.count >= TRANSACTIONS

    workload.start()
    wait_for(done, timeout=120, process=process, log=tmp_path / "run.log", last_seen=seen)
    workload.stop()


def verify(tmp_path: Path, pipeline: Path, env: dict[str, str]) -> None:
    """``cdc verify`` passes for every sink (run while the pipeline still runs)."""
    result = cdc("verify", str(pipeline), "--json", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    report = orjson.loads(result.stdout)
    assert {r["sink"] for r in report} == {"warehouse", "cache", "search"}
    assert all(r["ok"] and not r["skipped"] for r in report)


def lines_rows(dsn: str) -> dict[tuple[int, int], tuple[int, str]]:
    """``public.lines`` (composite key, TOASTed body) as ``{(order_id, line_no): (qty, body)}``."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT order_id, line_no, qty, body FROM public.lines").fetchall()
    return {(o, n): (q, b) for o, n, q, b in rows}


def assert_lines_equal(
    expected: dict[tuple[int, int], tuple[int, str]], rows: Any, sink: str
) -> None:
    got = {(int(r["order_id"]), int(r["line_no"])): (int(r["qty"]), r["body"]) for r in rows}
    assert got.keys() == expected.keys(), sink
    assert got == expected, sink  # every body whole: unchanged TOAST was filled in


def compare_row_by_row(tmp_path: Path, pipeline: Path, env: dict[str, str], dsn: str) -> None:
    """Each sink against the table (after ``cdc run`` stopped: DuckDB allows one process)."""
    assert_duckdb_equals_table(dsn, tmp_path / "out" / "shop.duckdb")
    lines = lines_rows(dsn)
    with duckdb.connect(str(tmp_path / "out" / "shop.duckdb"), read_only=True) as db:
        cursor = db.execute('SELECT order_id, line_no, qty, body FROM "public"."lines"')
        names = [d[0] for d in cursor.description]
        assert_lines_equal(
            lines, [dict(zip(names, r, strict=True)) for r in cursor.fetchall()], "warehouse"
        )
    with contextlib.chdir(tmp_path):
        config = load(pipeline, {**os.environ, **env})
        log = open_log(config)
    try:
        catalog = SchemaCatalog(log, config.name)
        with contextlib.chdir(tmp_path):  # sink paths in the file are relative to it
            assert_json_sink_equals_table(pipeline, env, RedisSinkPlugin, "cache", catalog)
            assert_json_sink_equals_table(pipeline, env, SearchSinkPlugin, "search", catalog)
            config = load(pipeline, {**os.environ, **env})
            for plugin, sink in ((RedisSinkPlugin, "cache"), (SearchSinkPlugin, "search")):
                rows = (r for _, r in plugin.read_rows(config.sink(sink), "public", "lines"))
                assert_lines_equal(lines, rows, sink)
    finally:
        log.close()


def finish(process: Any, tmp_path: Path, pipeline: Path, env: dict[str, str], dsn: str) -> None:
    verify(tmp_path, pipeline, env)
    assert stop(process)[0] == 0, (tmp_path / "run.log").read_text()[-3000:]
    compare_row_by_row(tmp_path, pipeline, env, dsn)


@pytest.fixture
def shop(pg_db: str, redis_server: Any, tmp_path: Path) -> tuple[str, dict[str, str]]:
    redis_server.start()
    import redis

    redis.Redis.from_url(redis_server.url).flushdb()
    create(pg_db, rows=2000)
    env = {"PG_DSN": pg_db, "REDIS_URL": redis_server.url}
    yield pg_db, env
    cdc("drop", str(tmp_path / "shop.yaml"), "--yes", cwd=tmp_path, env=env)


def test_all_sinks_equal_the_table_after_a_random_workload(
    shop: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    dsn, env = shop
    pipeline = write_pipeline(tmp_path)
    process = start_run(pipeline, tmp_path, env)
    workload = Workload(dsn)
    run_workload(workload, process, tmp_path)
    assert workload.count > 100
    wait_caught_up(process, tmp_path, pipeline, env, dsn, timeout=180)
    finish(process, tmp_path, pipeline, env, dsn)


def test_all_sinks_equal_the_table_on_kafka(
    shop: tuple[str, dict[str, str]], kafka_server: Any, tmp_path: Path
) -> None:
    dsn, env = shop
    # Topics are per pipeline name: a fresh name keeps this run apart from others on the broker.
    env = {**env, "PIPE": f"shop_{uuid.uuid4().hex[:8]}", "KAFKA": kafka_server.bootstrap_servers}
    pipeline = write_pipeline(tmp_path, log=KAFKA_LOG)
    process = start_run(pipeline, tmp_path, env)
    run_workload(Workload(dsn), process, tmp_path)
    wait_caught_up(process, tmp_path, pipeline, env, dsn, timeout=240)
    finish(process, tmp_path, pipeline, env, dsn)
    cdc("drop", str(pipeline), "--yes", cwd=tmp_path, env=env)


def kill_mid_work(
    process: Any,
    workload: Workload,
    tmp_path: Path,
    pipeline: Path,
    env: dict[str, str],
    records: int,
    rng: random.Random,
) -> int:
    """SIGKILL ``cdc run`` once it is provably mid-work; return the table's records then.

    Mid-work: this run has committed a random number more records of the table than there
    were (``records``) while the workload still writes, so the source is behind it.
    """
    target = records + rng.randint(50, 300)
    report = wait_status(process, tmp_path, pipeline, env, lambda r: table_records(r) >= target)
    assert process.poll() is None and workload.is_alive(), "the kill would test nothing"
    assert not workload.stop_event.is_set()
    stop(process, signal.SIGKILL)
    return table_records(report)


@pytest.mark.pgcore
def test_three_sigkills_then_exact_state_and_no_history_duplicates(
    shop: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    dsn, env = shop
    # The default status interval, as a user runs it: after each SIGKILL the slot is as far
    # behind the log as it would be there, and the restart must skip what the log holds.
    pipeline = write_pipeline(tmp_path, mode="history", status_interval_s=10)
    workload = Workload(dsn)
    workload.start()
    rng = random.Random(5)
    records = 0
    for _ in range(3):
        process = start_run(pipeline, tmp_path, env)
        records = kill_mid_work(process, workload, tmp_path, pipeline, env, records, rng)
    process = start_run(pipeline, tmp_path, env)
    more = records + 50  # the last run streams the workload too before it stops
    wait_status(process, tmp_path, pipeline, env, lambda r: table_records(r) >= more)
    workload.stop()
    wait_caught_up(process, tmp_path, pipeline, env, dsn, timeout=240)
    finish(process, tmp_path, pipeline, env, dsn)
    with duckdb.connect(str(tmp_path / "out" / "shop.duckdb"), read_only=True) as db:
        for table, key in (("everything", "id"), ("lines", "order_id, line_no")):
            duplicates = db.execute(
                f"SELECT count(*) FROM (SELECT {key}, __cdc_position, __cdc_sequence, "
                f'count(*) AS n FROM "public"."{table}__history" GROUP BY ALL HAVING n > 1)'
            ).fetchone()
            assert duplicates == (0,), table
        # Exactly the current rows are open versions (deletes close theirs).
        current = db.execute(
            'SELECT count(*) FROM "public"."everything__history" WHERE valid_to IS NULL'
        ).fetchone()
        assert current == (len(typed_rows(dsn)),)


def test_redis_down_for_20_s_loses_nothing_and_others_keep_going(
    shop: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    dsn, env = shop
    # A cache that keeps its data across a stop (append-only file): the outage is the point
    # here, not data loss, which the Redis sink's own tests cover.
    with LocalRedis(appendonly=True) as redis_server:
        env = {**env, "REDIS_URL": redis_server.url}
        pipeline = write_pipeline(tmp_path)
        process = start_run(pipeline, tmp_path, env)
        wait_caught_up(process, tmp_path, pipeline, env, dsn, timeout=120)
        workload = Workload(dsn)
        workload.start()
        redis_server.stop()
        try:
            # Down until the cache has fallen 300 records further behind while the others kept
            # up: what a fixed 20 s used to wait for, on a machine of any speed.
            during = wait_status(process, tmp_path, pipeline, env, lambda r: lag(r, "cache") > 0)
            behind = lag(during, "cache") + 300
            later = wait_status(
                process,
                tmp_path,
                pipeline,
                env,
                lambda r: (
                    lag(r, "cache") >= behind and max(lag(r, "warehouse"), lag(r, "search")) < 200
                ),
            )
        finally:
            redis_server.start()
        workload.stop()
        assert lag(later, "cache") > lag(during, "cache") > 0  # the cache falls behind...
        assert lag(later, "warehouse") < 200 and lag(later, "search") < 200  # ...not the others
        wait_caught_up(process, tmp_path, pipeline, env, dsn, timeout=180)
        finish(process, tmp_path, pipeline, env, dsn)
