"""No hidden value leaves the database, whatever path it could take (issue 25, check 3).

With masks, a left-out column and a row filter configured, this runs every command (validate,
doctor, run, status, topics, tail, verify, search, snapshot with and without ``--where``), every
schema change (a rename of the masked and of the left-out column, an added column, a dropped one,
a type change of the masked column, a column named like the masked one only by case), a SIGKILL
and the restarts after it, and then greps every byte the project wrote or printed for the raw
values: the log directory, the DuckDB file (and its rows, decoded: DuckDB compresses strings),
the search index (and its rows), the JSON-lines files, every Redis key and value, the run log,
and every command's stdout and stderr.

Every hidden value carries ``-RAW-``: the masked ``ssn`` and ``email``, the left-out
``password_hash``, and every column of a row the row filter leaves out. The column named like
``ssn`` only by case is not hidden (the configuration does not say so): its values are plain, and
the run warns of it.
"""

from __future__ import annotations

import signal
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import duckdb
import orjson
import psycopg
import pytest
import redis

from sinks.search.index import live_rows, open_reader
from tests.e2e.cli_helpers import cdc, start_run, stop, wait_for
from tests.e2e.test_pg_filters_pipeline import _redis_bytes, execute

PIPELINE = "leak"
KEY = "leak-e2e-mask-key-0123456789abcdef"
RAW = b"-RAW-"
PREFIX = "leak-e2e"
ENTRY = (
    "{name: public.users, columns: {exclude: [%s]}, mask: {%s: redact, email: hash},"
    " where: 'tenant = 42'}"
)
BEFORE = ENTRY % ("password_hash", "ssn")
AFTER = ENTRY % ("pwh2", "ssn2")


def write_pipeline(tmp_path: Path, users: str, extra: str = "") -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text(f"""
version: 1
name: {PIPELINE}
source:
  type: postgres
  dsn: ${{PG_DSN}}
  snapshot: initial
  status_interval_s: 1
  mask_key: ${{CDC_MASK_KEY}}
  tables:
    - {users}
log: {{type: embedded, path: {tmp_path / "log"}}}
sinks:
  - {{name: warehouse, type: duckdb, path: {tmp_path / "out.duckdb"}}}
  - {{name: cache, type: redis, url: "${{REDIS_URL}}", key_prefix: "{PREFIX}"}}
  - {{name: index, type: search, path: {tmp_path / "index"}}}
  - {{name: files, type: jsonl, path: {tmp_path / "jsonl"}}}
{extra}
""")
    return path


def insert(dsn: str, first: int, last: int, renamed: bool = False) -> None:
    """Rows ``first..last``: every fourth outside the row filter, all its values raw markers
    (``renamed``: after the schema changes)."""
    columns = "ssn2, pwh2, score" if renamed else "ssn, password_hash, score, notes"
    notes = "" if renamed else ", CASE WHEN t = 42 THEN 'note-' || g ELSE 'OUT-RAW-note' END"
    execute(
        dsn,
        f"INSERT INTO users (id, tenant, name, email, {columns})"
        " SELECT g, t, CASE WHEN t = 42 THEN 'name-' || g ELSE 'OUT-RAW-' || g END,"
        f" 'MAIL-RAW-' || g || '@x.test', 'SSN-RAW-' || g, 'PW-RAW-' || g, g{notes}"
        " FROM (SELECT g, CASE WHEN g % 4 = 0 THEN 7 ELSE 42 END AS t"
        f" FROM generate_series({first}, {last}) g) s",
    )


class Outputs:
    """Runs ``cdc`` commands and keeps their stdout and stderr for the final grep."""

    def __init__(self, tmp_path: Path, env: dict[str, str]) -> None:
        self.tmp_path, self.env, self.printed = tmp_path, env, [b""]

    def __call__(self, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
        result = cdc(*args, cwd=self.tmp_path, env=self.env, timeout=timeout)
        self.printed += [result.stdout.encode(), result.stderr.encode()]
        return result

    def many(self, *commands: tuple[str, ...]) -> list[subprocess.CompletedProcess[str]]:
        """``commands`` side by side (independent processes), results in order."""
        with ThreadPoolExecutor(max_workers=len(commands)) as pool:
            return list(pool.map(lambda args: self(*args), commands))


@pytest.fixture
def shop(pg_db: str, redis_server: Any) -> dict[str, str]:
    redis_server.start()
    if psycopg.connect(pg_db).info.server_version < 150000:
        pytest.skip("row filters need PostgreSQL 15 (14 refuses them at start: integration)")
    execute(
        pg_db,
        "CREATE TABLE users (id int PRIMARY KEY, tenant int NOT NULL, name text, email text,"
        " ssn text, password_hash text, score int, notes text)",
        "ALTER TABLE users REPLICA IDENTITY FULL",  # the row filter's column is in it
        "CREATE SEQUENCE s",
    )
    insert(pg_db, 1, 12)
    client = redis.Redis.from_url(redis_server.url)
    for key in client.scan_iter(f"{PREFIX}*"):
        client.delete(key)
    return {"PG_DSN": pg_db, "REDIS_URL": redis_server.url, "CDC_MASK_KEY": KEY}


def cached(env: dict[str, str]) -> dict[int, dict[str, Any]]:
    """The cache sink's users rows, by id."""
    client = redis.Redis.from_url(env["REDIS_URL"])
    rows = {}
    for key in client.scan_iter(f"{PREFIX}*public.users:*"):
        value = client.get(key) if client.type(key) == b"string" else None
        if value:
            row = orjson.loads(value)
            rows[row["id"]] = row
    return rows


def inside(dsn: str) -> set[int]:
    with psycopg.connect(dsn) as conn:
        return {r[0] for r in conn.execute("SELECT id FROM users WHERE tenant = 42")}


def converged(env: dict[str, str], *fields: str, **values: Any) -> bool:
    """The cache holds exactly the filter's rows, each with ``fields`` and ``values``."""
    rows = cached(env)
    return set(rows) == inside(env["PG_DSN"]) and all(
        all(f in row for f in fields) and all(row.get(k) == v for k, v in values.items())
        for row in rows.values()
    )


@pytest.mark.pgcore
def test_no_hidden_value_leaves_by_any_path(shop: dict[str, str], tmp_path: Path) -> None:
    env, dsn, log = shop, shop["PG_DSN"], tmp_path / "run.log"
    out = Outputs(tmp_path, env)
    pipeline = write_pipeline(tmp_path, BEFORE)
    validated, _ = out.many(("validate", str(pipeline)), ("doctor", str(pipeline)))
    assert validated.returncode == 0, validated.stderr
    run = start_run(pipeline, tmp_path, env)
    wait_for(lambda: converged(env, ssn="***"), 60, process=run, log=log)
    _stream_changes(dsn)
    wait_for(lambda: converged(env, ssn="***"), 60, process=run, log=log)
    _every_command(out, pipeline, dsn)
    _schema_changes(dsn)
    wait_for(
        lambda: (
            converged(env, ssn2="***", extra="d")
            and cached(env).get(3, {}).get("SSN") == "twin-visible"
        ),
        60,
        process=run,
        log=log,
    )
    assert "filter.column_renamed" in log.read_text()
    assert "filter.case_twin" in log.read_text()
    out("verify", str(pipeline), "--json")  # the YAML still says ssn: refused, and says why
    stop(run, signal.SIGKILL)

    # The YAML still names the old columns: the next start stops before reading anything.
    refused = out("run", str(pipeline), timeout=60)
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert "which the table does not have" in refused.stderr
    pipeline = write_pipeline(tmp_path, AFTER, "on_transform_change: continue")
    run = start_run(pipeline, tmp_path, env)
    insert(dsn, 13, 16, renamed=True)
    execute(dsn, "UPDATE users SET ssn2 = 'SSN-RAW-x', pwh2 = 'PW-RAW-x' WHERE id = 1")
    wait_for(lambda: converged(env, ssn2="***") and 13 in cached(env), 60, process=run, log=log)
    file = str(pipeline)
    out("snapshot", file, "--table", "public.users", "--wait", "--timeout-s", "60")
    sinks = ("--sink", "warehouse", "--sink", "cache", "--sink", "index")  # jsonl: unreadable
    verified, *_ = out.many(
        ("verify", file, "--json", "--wait", "30", *sinks),
        ("status", file, "--json"),
        ("tail", file, f"{PIPELINE}.public.users", "--from-beginning", "--timeout-s", "0.5"),
        ("search", file, "public.users", "name"),
    )
    assert stop(run)[0] == 0
    assert verified.returncode == 0, verified.stdout + verified.stderr[-3000:]
    _nothing_raw_anywhere(tmp_path, env, out.printed)


def _stream_changes(dsn: str) -> None:
    insert(dsn, 101, 104)
    execute(
        dsn,
        "UPDATE users SET ssn = 'SSN-RAW-changed', email = 'MAIL-RAW-changed' WHERE id = 1",
        "UPDATE users SET password_hash = 'PW-RAW-changed' WHERE id = 2",
        "UPDATE users SET tenant = 7, name = 'OUT-RAW-moved' WHERE id = 3",  # moves out
        "UPDATE users SET tenant = 42, name = 'name-4', notes = 'note-4' WHERE id = 4",  # in
        "UPDATE users SET notes = 'OUT-RAW-still-out' WHERE id = 8",  # outside: nothing
        "DELETE FROM users WHERE id = 5",
    )


def _every_command(out: Outputs, pipeline: Path, dsn: str) -> None:
    """Every reading command, side by side (each is a Python start: minutes one by one), then
    the snapshot requests."""
    file, users = str(pipeline), ("--table", "public.users")
    wait = ("--wait", "--timeout-s", "60")
    topics, *rest = out.many(
        ("topics", file, "--json"),
        ("status", file),
        ("status", file, "--json"),
        ("verify", file, "--json", "--wait", "30"),
        ("search", file, "public.users", "name"),
        ("search", file, "public.users", "row.ssn:*"),
        ("doctor", file, "--json"),
        ("snapshot", file, *users, *wait),
        # Refused: a cast that fails on a masked value, a volatile function.
        ("snapshot", file, *users, "--where", "ssn::int > 0"),
        ("snapshot", file, *users, "--where", "nextval('s') > 0"),
    )
    assert topics.returncode == 0 and rest[0].returncode == 0, topics.stderr + rest[0].stderr
    requested, cast, volatile = rest[-3:]
    assert requested.returncode == 0, requested.stderr
    assert cast.returncode == 2 and "SQLSTATE 22P02" in cast.stderr, cast.stderr
    assert volatile.returncode == 2 and "read-only transaction" in volatile.stderr
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT is_called FROM s").fetchone() == (False,)
    tails = [
        ("tail", file, t["topic"], "--from-beginning", "--timeout-s", "0.5")
        for t in orjson.loads(topics.stdout)
    ]
    for tailed in out.many(("snapshot", file, *users, "--where", "id > 2", *wait), *tails):
        assert tailed.returncode == 0, tailed.stderr


def _schema_changes(dsn: str) -> None:
    execute(
        dsn,
        "ALTER TABLE users RENAME COLUMN ssn TO ssn2",
        "ALTER TABLE users RENAME COLUMN password_hash TO pwh2",
        "UPDATE users SET ssn2 = 'SSN-RAW-renamed', pwh2 = 'PW-RAW-renamed' WHERE id = 1",
        "ALTER TABLE users ADD COLUMN extra text NOT NULL DEFAULT 'd'",
        "UPDATE users SET name = 'name-2b' WHERE id = 2",
        "ALTER TABLE users DROP COLUMN notes",
        "UPDATE users SET name = 'name-6b' WHERE id = 6",
        "ALTER TABLE users ALTER COLUMN ssn2 TYPE char(20)",  # rewrites values: a re-read
        "UPDATE users SET name = 'name-7b' WHERE id = 7",
        'ALTER TABLE users ADD COLUMN "SSN" text',  # named like ssn only by case: not hidden
        # Moves row 3 back in, with values it may show.
        """UPDATE users SET "SSN" = 'twin-visible', tenant = 42, name = 'name-3' WHERE id = 3""",
    )


def _nothing_raw_anywhere(tmp_path: Path, env: dict[str, str], printed: list[bytes]) -> None:
    places = {
        **{str(p): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()},
        "redis": _redis_bytes(redis.Redis.from_url(env["REDIS_URL"])),
        "duckdb rows": _duckdb_rows(tmp_path / "out.duckdb"),
        "search rows": _search_rows(tmp_path / "index"),
        "printed": b"".join(printed),
    }
    assert b"public.users" in places["printed"] and b"twin-visible" in places["redis"]
    leaks = {
        where: blob[blob.find(RAW) - 40 : blob.find(RAW) + 40]
        for where, blob in places.items()
        if RAW in blob
    }
    assert not leaks, f"raw values in {leaks}"
    keyed = [where for where, blob in places.items() if KEY.encode() in blob]
    assert not keyed, f"the mask key in {keyed}"


def _duckdb_rows(path: Path) -> bytes:
    """Every row of every table in the DuckDB file, decoded (its strings are compressed)."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        tables = con.execute(
            "SELECT table_schema, table_name FROM information_schema.tables"
        ).fetchall()
        rows = [con.execute(f'SELECT * FROM "{s}"."{t}"').fetchall() for s, t in tables]
    finally:
        con.close()
    assert tables
    return repr(rows).encode()


def _search_rows(path: Path) -> bytes:
    """Every live row of every index of the search sink, decoded."""
    found = [list(live_rows(open_reader(meta.parent))) for meta in path.rglob("meta.json")]
    assert found
    return orjson.dumps(found)
