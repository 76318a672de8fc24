"""Helpers of the end-to-end tests of online snapshots with sinks: a pipeline of PostgreSQL
tables into the embedded log, a Redis sink and a DuckDB sink, and the rows read back from each."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import orjson
import psycopg
import pytest
import yaml

from cdc.contracts.snapshot_offsets import progress
from cdc.envelope.options import EnvelopeOptions
from sinks.redis import RedisSinkConfig, RedisSinkPlugin
from tests.e2e.cli_helpers import cdc, start_run, status_json, wait_for
from tests.e2e.snapshot_helpers import offsets

PIPELINE = "snp"


def write_pipeline(
    tmp_path: Path, dsn: str, redis_url: str, prefix: str, tables: list[str], **source: Any
) -> Path:
    """``tables`` into the embedded log at ``tmp_path/log``, a Redis sink and a DuckDB sink."""
    lines = [
        "version: 1",
        f"name: {PIPELINE}",
        "source:",
        "  type: postgres",
        f"  dsn: '{dsn}'",
        f"  tables: [{', '.join(tables)}]",
        "  status_interval_s: 1",
        *(f"  {k}: {v}" for k, v in source.items()),
        "log:",
        "  type: embedded",
        f"  path: {tmp_path / 'log'}",
        "sinks:",
        "  - name: cache",
        "    type: redis",
        f"    url: {redis_url}",
        f"    key_prefix: {prefix}",
        "  - name: warehouse",
        "    type: duckdb",
        f"    path: {tmp_path / 'out.duckdb'}",
    ]
    path = tmp_path / "pipeline.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def create_table(dsn: str, name: str, rows: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, v text NOT NULL, n int NOT NULL)")
        conn.execute(
            f"INSERT INTO {name} SELECT g, md5(g::text), 0 FROM generate_series(1, %s) g", (rows,)
        )


def table_rows(dsn: str, name: str) -> dict[int, dict[str, Any]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(f"SELECT id, v, n FROM {name}").fetchall()
    return {i: {"id": i, "v": v, "n": n} for i, v, n in rows}


class Cache:
    """The Redis sink's rows, read back through its plugin."""

    def __init__(self, url: str, prefix: str) -> None:
        self.config = RedisSinkConfig(name="cache", type="redis", url=url, key_prefix=prefix)

    def rows(self, name: str) -> dict[int, dict[str, Any]]:
        schema, _, table = name.partition(".")
        return {r["id"]: r for _, r in RedisSinkPlugin.read_rows(self.config, schema, table)}

    def equals(self, dsn: str, name: str) -> bool:
        return self.rows(name) == table_rows(dsn, name)


def duckdb_rows(path: Path, name: str) -> dict[int, dict[str, Any]]:
    schema, _, table = name.partition(".")
    with duckdb.connect(str(path), read_only=True) as db:
        rows = db.execute(f'SELECT id, v, n FROM "{schema}"."{table}"').fetchall()
    return {i: {"id": i, "v": v, "n": n} for i, v, n in rows}


def status(pipeline: Path, cwd: Path, env: dict[str, str]) -> dict[str, Any]:
    return status_json(pipeline, cwd, env)


def execute(dsn: str, *statements: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)  # type: ignore[arg-type]


def published(dsn: str) -> set[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT schemaname || '.' || tablename FROM pg_publication_tables WHERE pubname = %s",
            (f"{PIPELINE}_pub",),
        ).fetchall()
    return {r[0] for r in rows}


def snapshot_of(tmp_path: Path, table: str) -> dict[str, Any]:
    """The ``cdc status`` snapshot row of ``table`` (empty while there is none)."""
    rows = (progress(offsets(tmp_path / "log")) or {}).get("tables") or {}
    entry = rows.get(table)
    if not entry:
        return {}
    done = sum(b - a + 1 for a, b in entry["done"])
    return {**entry, "state": "done" if done >= entry["chunks_total"] else "running"}


def topic_ends(pipeline: Path, cwd: Path, env: dict[str, str]) -> dict[str, Any]:
    """End offsets by topic, from ``cdc topics``."""
    result = cdc("topics", str(pipeline), "--json", cwd=cwd, env=env)
    assert result.returncode == 0, result.stderr
    return {t["topic"]: t["end_offsets"] for t in orjson.loads(result.stdout)}


@pytest.fixture
def redis_url(redis_server: Any) -> str:
    redis_server.start()
    return str(redis_server.url)


@dataclass
class Scene:
    """A pipeline of these tests and every ``cdc run`` started for it (for ``drop_objects``)."""

    dsn: str
    tmp_path: Path
    pipeline: Path
    cache: Cache
    env: dict[str, str] = field(default_factory=dict)
    runs: list[subprocess.Popen[str]] = field(default_factory=list)

    @property
    def log(self) -> Path:
        return self.tmp_path / "run.log"

    @property
    def process(self) -> subprocess.Popen[str]:
        """The run started last."""
        return self.runs[-1]

    def start(self) -> None:
        self.runs.append(start_run(self.pipeline, self.tmp_path, self.env))

    def wait_for_the_cache(self, table: str, timeout: float) -> None:
        """Waits until the Redis sink holds ``table`` as the source does; fails if the run ends."""

        def equal() -> bool:
            return self.cache.equals(self.dsn, table)

        wait_for(equal, timeout, process=self.process, log=self.log)

    def cdc(self, *args: str) -> subprocess.CompletedProcess[str]:
        return cdc(*args, cwd=self.tmp_path, env=self.env)

    def snapshots(self) -> list[dict[str, Any]]:
        """The ``snapshot`` rows of ``cdc status --json``."""
        rows: list[dict[str, Any]] = status(self.pipeline, self.tmp_path, self.env)["snapshot"]
        return rows


def three_sinks_pipeline(tmp_path: Path, name: str, table: str, options: EnvelopeOptions) -> Path:
    """A pipeline of ``table`` into a Redis, a DuckDB and a search sink on the embedded log,
    under ``options``; its DSN, Redis URL and key prefix come from ``${PG_DSN}``,
    ``${REDIS_URL}`` and ``${PREFIX}``."""
    data = {
        "version": 1,
        "name": name,
        "envelope": options.properties(),
        "source": {"type": "postgres", "dsn": "${PG_DSN}", "tables": [table]},
        "log": {"type": "embedded", "path": str(tmp_path / "log")},
        "sinks": [
            {"name": "cache", "type": "redis", "url": "${REDIS_URL}", "key_prefix": "${PREFIX}"},
            {"name": "warehouse", "type": "duckdb", "path": str(tmp_path / "out.duckdb")},
            {"name": "search", "type": "search", "path": str(tmp_path / "search")},
        ],
    }
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
