"""Types, operations, settings and sinks, through ``cdc run``, in one test (issue 25, check 2).

Four tables of every column type of the differential workload (``tests/debezium/workload.py``),
each with the workload's composite key: nullable and NOT NULL, under REPLICA IDENTITY DEFAULT
and FULL; and the workload's values table (every form of numeric and timestamptz(p), a
single-column key). Their rows are snapshotted, then changed one transaction a statement:
inserts, updates (one leaving a TOASTed value unchanged), a primary-key update, deletes, a
transaction mixing them, and on three of the tables a TRUNCATE followed by new rows. Three
pipelines read the same tables at once, one an envelope setting: the readable envelope,
Debezium's defaults, and the readable envelope with ``schemas.enable: true``; each writes to
every sink (DuckDB current, DuckDB history, Redis, search, jsonl).

Then, for every pipeline and sink: the sink is still running, ``cdc verify`` of the sinks it can
read back exits 0, and each sink's contents equal the table's current rows converted the way
that sink stores them. Contents are read with DuckDB's SQL (the current table, and the open
versions of the history), Redis GETs, the search plugin's reader and the jsonl lines replayed;
the conversion (``tests/e2e/matrix_values.py``) is written from PostgreSQL's and Debezium's
documented encodings, not from the product's converters. Every failing cell is collected and
reported at once, so one run names everything that is wrong.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest
import redis
import yaml
from psycopg import sql

from cdc.envelope.options import DEBEZIUM_DEFAULTS, READABLE
from cdc.testing import WaitTimeout, wait_until
from connectors.postgres.lsn import str_to_lsn
from tests.e2e import matrix_values as mv
from tests.e2e.cli_helpers import cdc, start_run, status_json, stop
from tests.e2e.matrix_tables import values, wide
from tests.e2e.sinks_kit import redis_url

__all__ = ["redis_url"]  # the fixture

#: The server's types decide what each sink holds: CI runs this on every full version too.
pytestmark = pytest.mark.pgtypes

#: One pipeline per envelope setting. Debezium's defaults skip truncates
#: (``skipped.operations: t``), which chooses which records exist, not how they are written;
#: the matrix needs the truncate in every sink, so that one option is ``none`` here too.
SETTINGS: dict[str, dict[str, Any]] = {
    "mx_readable": READABLE.properties(),
    "mx_debezium": {**DEBEZIUM_DEFAULTS.properties(), "skipped.operations": "none"},
    "mx_schemas": {**READABLE.properties(), "schemas.enable": True},
}
SINKS = ("current", "history", "cache", "search", "files")
#: The wide tables: NOT NULL or not, REPLICA IDENTITY FULL or DEFAULT, two truncated mid-stream;
#: and the workload's values table (a single-column key).
TABLES = [
    wide("mx_null_default", not_null=False, full=False, truncated=True),
    wide("mx_null_full", not_null=False, full=True, truncated=False),
    wide("mx_notnull_default", not_null=True, full=False, truncated=False),
    wide("mx_notnull_full", not_null=True, full=True, truncated=True),
    values("mx_values"),
]


# --- the tables and their changes -------------------------------------------------------


def create_tables(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')")
        conn.execute("CREATE EXTENSION hstore")
        for table in TABLES:
            name = sql.Identifier(table.name)
            conn.execute(sql.SQL(table.create()).format(name))
            if "c_toast" in table.types:  # stored out of line: an unchanged value stays out
                conn.execute(
                    sql.SQL("ALTER TABLE {} ALTER COLUMN c_toast SET STORAGE EXTERNAL").format(name)
                )
            if table.full:
                conn.execute(sql.SQL("ALTER TABLE {} REPLICA IDENTITY FULL").format(name))
            for row in table.rows:
                conn.execute(sql.SQL("INSERT INTO {} VALUES " + row).format(name))


def change_tables(dsn: str) -> None:
    """The streamed changes, one transaction a statement (the mixed one excepted)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in TABLES:
            name = sql.Identifier(table.name)
            for step in table.steps:
                with conn.transaction():
                    for statement in step:
                        conn.execute(sql.SQL(statement).format(name))


# --- pipelines --------------------------------------------------------------------------


def write_pipeline(root: Path, name: str, env: dict[str, str]) -> Path:
    cwd = root / name
    cwd.mkdir()
    data = {
        "version": 1,
        "name": name,
        "envelope": SETTINGS[name],
        "source": {
            "type": "postgres",
            "dsn": "${PG_DSN}",
            "tables": [f"public.{t.name}" for t in TABLES],
            "snapshot": "initial",
            "status_interval_s": 1,
        },
        "log": {"type": "embedded", "path": "log"},
        "sinks": [
            {"name": "current", "type": "duckdb", "path": "out/current.duckdb", "mode": "current"},
            {"name": "history", "type": "duckdb", "path": "out/history.duckdb", "mode": "history"},
            {"name": "cache", "type": "redis", "url": "${REDIS_URL}", "key_prefix": name},
            {"name": "search", "type": "search", "path": "out/search"},
            {"name": "files", "type": "jsonl", "path": "out/jsonl"},
        ],
    }
    path = cwd / "pipeline.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def status(pipeline: Path, env: dict[str, str]) -> dict[str, Any]:
    return status_json(pipeline, pipeline.parent, env)


def slots(dsn: str) -> dict[str, int | None]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT slot_name, confirmed_flush_lsn::text FROM pg_replication_slots")
        return {n: (None if lsn is None else str_to_lsn(lsn)) for n, lsn in rows.fetchall()}


def wait_for_slots(dsn: str, runs: dict[str, subprocess.Popen[str]], root: Path) -> None:
    """Each pipeline made its slot (its snapshot point): later changes are streamed to all."""

    def made() -> bool:
        if all(f"{name}_slot" in slots(dsn) for name in runs):
            return True
        for name, run in runs.items():
            assert run.poll() is None, f"{name} exited: " + (root / name / "run.log").read_text()
        return False

    wait_until(made, 60, 0.2, describe=lambda: f"every pipeline's slot (slots {slots(dsn)})")


def settled(pipeline: Path, env: dict[str, str], target: int, dsn: str) -> bool:
    """The pipeline's slot confirmed ``target`` and each sink applied its log or stopped."""
    lsn = slots(dsn).get(f"{pipeline.parent.name}_slot")
    if lsn is None or lsn < target:
        return False
    return all(s["lag"] == 0 or s.get("state") == "stopped" for s in status(pipeline, env)["sinks"])


def wait_settled(
    pipelines: list[Path], runs: dict[str, subprocess.Popen[str]], env: dict[str, str], dsn: str
) -> None:
    """Wait (a bounded time) until every running pipeline settled; what did not is reported by
    the checks that follow, cell by cell, instead of one timeout here."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    assert row is not None
    # Fixed once the changes are made: WAL other databases of the shared server write later is
    # not waited for (an idle source confirms it only at its next status interval).
    target = str_to_lsn(row[0])
    waiting = list(pipelines)

    def all_settled() -> bool:
        waiting[:] = [
            p
            for p in waiting
            if runs[p.parent.name].poll() is None and not settled(p, env, target, dsn)
        ]
        return not waiting

    with contextlib.suppress(WaitTimeout):  # what did not settle fails the checks that follow
        wait_until(all_settled, 60, 0.3)


# --- the cells ---------------------------------------------------------------------------


def sink_states(pipeline: Path, env: dict[str, str]) -> list[tuple[str, str]]:
    """``(sink, problem)`` for each sink that is not running or has not applied its log."""
    problems = []
    for sink in status(pipeline, env)["sinks"]:
        cell = f"{pipeline.parent.name} / {sink['sink']}"
        if sink.get("state") != "running":
            problems.append((sink["sink"], f"{cell}: {sink.get('state')}: {sink.get('reason')}"))
        elif sink["lag"]:
            problems.append((sink["sink"], f"{cell}: {sink['lag']} records behind the log"))
    return problems


#: Sinks ``cdc verify`` cannot read back (jsonl has no ``read_rows``): not given to it.
UNVERIFIABLE = frozenset({"files"})


def last_words(stderr: str) -> str:
    """A traceback's last frame and its exception, or the last lines of other output."""
    lines = [line for line in stderr.strip().splitlines() if line.strip(" ^~")]
    frames = [i for i, line in enumerate(lines) if line.lstrip().startswith("File ")]
    return " | ".join(line.strip() for line in lines[frames[-1] if frames else -3 :])[-700:]


def verify(
    pipeline: Path, env: dict[str, str], sinks: list[str], table: str | None = None
) -> list[str]:
    """``cdc verify`` of ``sinks`` (of one ``table``); a problem line for each table it did not
    find equal, and for its exit code. A run that ends without a report is run again table by
    table, to name the tables it fails on."""
    args = ["verify", str(pipeline), "--json", "--wait", "30" if table is None else "0"]
    args += [a for s in sinks for a in ("--sink", s)]
    args += [] if table is None else ["--table", table]
    cell = " ".join([pipeline.parent.name, *([] if table is None else [table])])
    try:
        result = cdc(*args, cwd=pipeline.parent, env=env, timeout=60)
    except subprocess.TimeoutExpired:
        return [f"{cell}: cdc verify did not finish in 60 s"]
    if not result.stdout:
        crash = f"{cell}: cdc verify exited {result.returncode}: {last_words(result.stderr)}"
        if table is not None:
            return [crash]
        return [f"{cell}: cdc verify exited {result.returncode} with no report"] + [
            p for t in TABLES for p in verify(pipeline, env, sinks, f"public.{t.name}")
        ]
    problems = [
        f"{cell} / {r['sink']} / {r['table']}: cdc verify says {r['state']}"
        f" (missing {r['missing_in_sink'][:3]}, extra {r['extra_in_sink'][:3]},"
        f" different {r['different'][:3]}, details {r['details'][:2]}, skipped {r['skipped']})"
        for r in orjson.loads(result.stdout)
        if not r["ok"] or r["skipped"]
    ]
    if result.returncode != 0:
        problems.append(f"{cell}: cdc verify exited {result.returncode}")
    return problems


def compare(name: str, sink: str, table: str, expected: mv.Rows, got: mv.Rows) -> list[str]:
    """A problem line for each key missing, extra, or with a column that differs."""
    cell = f"{name} / {sink} / {table}"
    problems = [f"{cell}: missing {k}" for k in sorted(expected.keys() - got.keys())]
    problems += [f"{cell}: extra {k}" for k in sorted(got.keys() - expected.keys())]
    for key in sorted(expected.keys() & got.keys()):
        for column, want in expected[key].items():
            have = got[key].get(column, mv.ABSENT)
            if have != want:
                problems.append(f"{cell}: {key} {column}: sink {have!r} != source {want!r}")
    return problems


def compare_sinks(pipeline: Path, env: dict[str, str], dsn: str) -> list[str]:
    """Every sink of ``pipeline`` against the tables, read with each sink's own client."""
    name, out = pipeline.parent.name, pipeline.parent / "out"
    options = SETTINGS[name]
    problems = []
    for table in TABLES:
        want = mv.expected(mv.source_rows(dsn, table), options, table)
        assert len(want) >= 2, f"{table.name}: the workload left too few rows to compare"
        topic = f"{name}.public.{table.name}"
        reads: dict[str, Callable[[], mv.Rows]] = {
            "current": partial(mv.duckdb_rows, out / "current.duckdb", table, False, options),
            "history": partial(mv.duckdb_rows, out / "history.duckdb", table, True, options),
            "history's current table": partial(
                mv.duckdb_rows, out / "history.duckdb", table, False, options
            ),
            "cache": partial(mv.redis_rows, env["REDIS_URL"], name, table, options),
            "search": partial(mv.search_rows, out / "search", table, options),
            "files": partial(mv.jsonl_rows, out / "jsonl", topic, table, options),
        }
        for sink, read in reads.items():
            try:
                got = read()
            except Exception as exc:  # a sink that cannot be read is a failing cell, reported
                problems.append(f"{name} / {sink} / {table.name}: cannot read: {exc!r}")
                continue
            problems += compare(name, sink, table.name, want, got)
    return problems


@pytest.fixture
def scene(pg_db: str, redis_url: str, tmp_path: Path) -> Any:
    create_tables(pg_db)
    env = {"PG_DSN": pg_db, "REDIS_URL": redis_url}
    client = redis.Redis.from_url(redis_url)
    for name in SETTINGS:  # the session's Redis: no keys of an earlier run under these prefixes
        for key in client.scan_iter(match=f"{name}:*"):
            client.delete(key)
    client.close()
    pipelines = [write_pipeline(tmp_path, name, env) for name in SETTINGS]
    yield env, pipelines
    for pipeline in pipelines:
        cdc("drop", str(pipeline), "--yes", cwd=pipeline.parent, env=env)


def test_every_type_operation_setting_and_sink(scene: Any, tmp_path: Path) -> None:
    env, pipelines = scene
    dsn = env["PG_DSN"]
    runs = {p.parent.name: start_run(p, p.parent, env) for p in pipelines}
    problems: list[str] = []
    try:
        wait_for_slots(dsn, runs, tmp_path)
        change_tables(dsn)
        wait_settled(pipelines, runs, env, dsn)
        for pipeline in pipelines:
            if runs[pipeline.parent.name].poll() is not None:
                log = (pipeline.parent / "run.log").read_text()[-1500:]
                problems.append(f"{pipeline.parent.name}: cdc run stopped: {log}")
                continue
            states = sink_states(pipeline, env)
            problems += [line for _, line in states]
            # A stopped sink is reported above: verify the others, not waiting for it to catch up.
            stopped = {sink for sink, _ in states}
            problems += verify(pipeline, env, [s for s in SINKS if s not in stopped | UNVERIFIABLE])
    finally:
        for name, run in runs.items():
            code = stop(run, timeout=30)[0] if run.poll() is None else run.returncode
            if code != 0:
                problems.append(f"{name}: cdc run exited {code}")
    for pipeline in pipelines:
        problems += compare_sinks(pipeline, env, dsn)
    assert not problems, f"{len(problems)} failing cells:\n" + "\n".join(problems)
