"""Helpers of the end-to-end tests of sinks built from the log (``cdc sink --rebuild``, a sink
added to a pipeline): a pipeline file of one PostgreSQL table into a DuckDB and a Redis sink,
a workload of inserts, updates and deletes, and each store's rows read back."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import duckdb
import psycopg
import yaml

from tests.e2e.sinks_kit import Cache, table_rows

TABLE = "public.items"


def pipeline_file(
    tmp_path: Path,
    name: str,
    sinks: list[dict[str, Any]],
    log: dict[str, Any] | None = None,
    file: str = "pipeline.yaml",
) -> Path:
    """``public.items`` from ``${PG_DSN}`` into ``sinks`` (default log: embedded in tmp)."""
    data = {
        "version": 1,
        "name": name,
        "source": {"type": "postgres", "dsn": "${PG_DSN}", "tables": [TABLE]},
        "log": log or {"type": "embedded", "path": str(tmp_path / "log")},
        "sinks": sinks,
    }
    path = tmp_path / file
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def duckdb_sink(name: str, path: Path, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": "duckdb", "path": str(path), **extra}


def redis_sink(name: str, url: str, prefix: str) -> dict[str, Any]:
    return {"name": name, "type": "redis", "url": url, "key_prefix": prefix}


def create_items(dsn: str, rows: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.items (id int PRIMARY KEY, v text NOT NULL, n int)")
        conn.execute(
            "INSERT INTO public.items SELECT g, md5(g::text), 0 FROM generate_series(1, %s) g",
            (rows,),
        )


def workload(dsn: str, seed: int, changes: int = 200) -> None:
    """Random updates, deletes and inserts, a few per transaction (ids up to 10 000)."""
    rng = random.Random(seed)
    with psycopg.connect(dsn) as conn:
        for _ in range(changes // 4):
            with conn.transaction():
                for _ in range(4):
                    key, what = rng.randint(1, 10_000), rng.random()
                    if what < 0.5:
                        conn.execute("UPDATE public.items SET n = n + 1 WHERE id = %s", (key,))
                    elif what < 0.7:
                        conn.execute("DELETE FROM public.items WHERE id = %s", (key,))
                    else:
                        conn.execute(
                            "INSERT INTO public.items VALUES (%s, md5(%s::text), 1) "
                            "ON CONFLICT (id) DO UPDATE SET n = items.n + 1",
                            (key, key),
                        )


def source_rows(dsn: str) -> dict[int, dict[str, Any]]:
    return table_rows(dsn, TABLE)


def warehouse_rows(path: Path) -> dict[int, dict[str, Any]]:
    """The DuckDB sink's ``public.items`` (read-only: no process may hold the file)."""
    with duckdb.connect(str(path), read_only=True) as db:
        rows = db.execute('SELECT id, v, n FROM "public"."items"').fetchall()
    return {i: {"id": i, "v": v, "n": n} for i, v, n in rows}


def cache_rows(url: str, prefix: str) -> dict[int, dict[str, Any]]:
    return Cache(url, prefix).rows(TABLE)


def other_db(url: str, db: int) -> str:
    """``url`` (``redis://host:port/N``) with database ``db``."""
    return url.rsplit("/", 1)[0] + f"/{db}"
