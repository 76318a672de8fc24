"""Schema changes under a running ``cdc run``, into DuckDB, Redis and search: DDL that rewrites
rows PostgreSQL never logs (a default, a volatile default, a rename, a type change, a drop), made
while the pipeline streams and while it is stopped. Every sink must converge on the table, row by
row, and ``cdc verify`` must say so, with only the rows DDL touched changed in between.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import duckdb
import orjson
import psycopg
import pytest

from cdc.config.pipeline import load
from connectors.postgres import PostgresSourcePlugin
from sinks.redis import RedisSinkPlugin
from sinks.search import SearchSinkPlugin
from tests.e2e.cli_helpers import cdc, start_run, stop, wait_for
from tests.e2e.snapshot_helpers import offsets, run_log_events
from tests.e2e.test_pg_all_sinks import wait_caught_up

ROWS = 400
TABLE = ("public", "items")


def write_pipeline(tmp_path: Path) -> Path:
    path = tmp_path / "shop.yaml"
    path.write_text(
        "version: 1\nname: shop\nsource:\n  type: postgres\n  dsn: ${PG_DSN}\n"
        "  tables: [public.items]\n  snapshot: initial\n"
        # Each convergence waits for the slot to confirm the WAL (wait_caught_up), which an
        # idle source reports once per status interval: 1 s, not the default 10 s.
        "  status_interval_s: 1\n"
        "sinks:\n"
        "  - name: warehouse\n    type: duckdb\n    path: out/shop.duckdb\n"
        "  - name: cache\n    type: redis\n    url: ${REDIS_URL}\n"
        "  - name: search\n    type: search\n    path: out/search\n"
    )
    return path


@pytest.fixture
def shop(pg_db: str, redis_server: Any, tmp_path: Path) -> Any:
    redis_server.start()
    import redis

    redis.Redis.from_url(redis_server.url).flushdb()
    with psycopg.connect(pg_db, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id int PRIMARY KEY, name text, price numeric(10,2))")
        conn.execute(
            "INSERT INTO items SELECT g, 'item ' || g, g * 1.5 FROM generate_series(1, %s) g",
            (ROWS,),
        )
    env = {"PG_DSN": pg_db, "REDIS_URL": redis_server.url}
    yield pg_db, env
    cdc("drop", str(tmp_path / "shop.yaml"), "--yes", cwd=tmp_path, env=env)


def ddl(dsn: str, *statements: str) -> None:
    """Run the DDL, then change one row: pgoutput describes a table before its next change."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)
        conn.execute("UPDATE items SET id = id WHERE id = 1")


def finished_requests(tmp_path: Path) -> int:
    state = offsets(tmp_path / ".cdc" / "shop").get("snapshot") or {}
    return len(state.get("finished") or [])


def converge(process: Any, tmp_path: Path, pipeline: Path, env: dict[str, str], done: int) -> int:
    """Wait for one more finished re-snapshot, then for every sink to apply it; ``cdc verify``."""
    wait_for(
        lambda: finished_requests(tmp_path) > done,
        timeout=120,
        process=process,
        log=tmp_path / "run.log",
    )
    wait_caught_up(process, tmp_path, pipeline, env, env["PG_DSN"], timeout=120)
    result = cdc("verify", str(pipeline), "--json", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert all(r["ok"] and not r["skipped"] for r in orjson.loads(result.stdout))
    return finished_requests(tmp_path)


def test_defaults_renames_type_changes_and_drops_converge_in_every_sink(
    shop: Any, tmp_path: Path
) -> None:
    dsn, env = shop
    pipeline = write_pipeline(tmp_path)
    process = start_run(pipeline, tmp_path, env)
    wait_caught_up(process, tmp_path, pipeline, env, dsn, timeout=120)
    done = finished_requests(tmp_path)  # the initial snapshot
    done = _migrate_while_streaming(process, tmp_path, pipeline, env, done)

    # A migration while the pipeline is stopped is caught at the next start.
    assert stop(process)[0] == 0
    ddl(dsn, "ALTER TABLE items RENAME COLUMN status TO state")
    process = start_run(pipeline, tmp_path, env)
    done = converge(process, tmp_path, pipeline, env, done)
    assert stop(process)[0] == 0

    _check_every_change_was_logged_in_order(tmp_path)
    compare(tmp_path, pipeline, env, dsn)


def _migrate_while_streaming(
    process: Any, tmp_path: Path, pipeline: Path, env: dict[str, str], done: int
) -> int:
    """Each DDL while ``cdc run`` streams, every sink converged after each; returns ``done``."""
    dsn = env["PG_DSN"]
    # A stored default and a volatile one (that one rewrites the table): PostgreSQL logs neither.
    ddl(
        dsn,
        "ALTER TABLE items ADD COLUMN status text NOT NULL DEFAULT 'new'",
        "ALTER TABLE items ADD COLUMN score int DEFAULT (random() * 1000)::int",
    )
    done = converge(process, tmp_path, pipeline, env, done)
    ddl(dsn, "ALTER TABLE items RENAME COLUMN name TO title")
    done = converge(process, tmp_path, pipeline, env, done)
    # numeric(10,2) -> (12,3) rewrites every value ('1.50' -> '1.500'); DuckDB widens it.
    ddl(dsn, "ALTER TABLE items ALTER COLUMN price TYPE numeric(12,3)")
    done = converge(process, tmp_path, pipeline, env, done)
    ddl(dsn, "ALTER TABLE items DROP COLUMN score")
    return converge(process, tmp_path, pipeline, env, done)


def _check_every_change_was_logged_in_order(tmp_path: Path) -> None:
    changes = [e["change"] for e in run_log_events(tmp_path, "schema.changed")]
    assert changes == [
        {"added": ["status"]},
        {"added": ["score"]},
        {"renamed": {"name": "title"}},
        {"retyped": {"price": "numeric(10,2) -> numeric(12,3)"}},
        {"dropped": ["score"]},
        {"renamed": {"status": "state"}},
    ] or changes == [
        # Both ADD COLUMNs can reach the stream as one Relation message.
        {"added": ["status", "score"]},
        *changes[1:],
    ]


def compare(tmp_path: Path, pipeline_path: Path, env: dict[str, str], dsn: str) -> None:
    """Each sink, row by row, against the table as the stream shapes it."""
    pipeline = load(pipeline_path, {**os.environ, **env})
    expected = {k["id"]: r for k, r in PostgresSourcePlugin.read_rows(pipeline.source, *TABLE)}
    assert len(expected) == ROWS
    assert set(expected[2]) == {"id", "title", "price", "state"}
    assert expected[2]["price"] == "3.000" and expected[2]["state"] == "new"
    with contextlib.chdir(tmp_path):  # sink paths in the file are relative to it
        cache = RedisSinkPlugin.read_rows(pipeline.sink("cache"), *TABLE, pipeline="shop")
        search = SearchSinkPlugin.read_rows(pipeline.sink("search"), *TABLE)
        # The JSON rows exactly: no stale field (name, status, score), the new value text.
        assert {r["id"]: r for _, r in cache} == expected
        assert {r["id"]: r for _, r in search} == expected
    with duckdb.connect(str(tmp_path / "out" / "shop.duckdb"), read_only=True) as db:
        cursor = db.execute('SELECT * FROM "public"."items"')
        names = [d[0] for d in cursor.description]
        rows = {r[0]: dict(zip(names, r, strict=True)) for r in cursor.fetchall()}
    # Renamed in place, data kept; the dropped column stays (NULL), as the sink's rule says.
    assert [n for n in names if not n.startswith("__cdc")] == [
        "id",
        "title",
        "price",
        "state",
        "score",
    ]
    with psycopg.connect(dsn) as conn:
        table = {r[0]: r for r in conn.execute("SELECT id, title, price, state FROM items")}
    for key, (_, title, price, state) in table.items():
        row = rows[key]
        assert (row["title"], row["price"], row["state"]) == (title, price, state), key
        assert str(row["price"]) == str(price)  # the new scale, not just an equal number
        assert row["score"] is None, key
