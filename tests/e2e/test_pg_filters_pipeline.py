"""A filtered, masked and routed PostgreSQL pipeline through ``cdc run``, into DuckDB, Redis and
the search index, against real servers.

What a user relies on:

* the sinks hold exactly the rows the row filter accepts (rows move in and out as they change),
  with excluded columns absent and masked ones masked; two routed tables merged into one topic
  with unique keys; the operations ``ops`` leaves out never arrive;
* no raw excluded or masked value is in any byte the pipeline wrote: the log, the sinks' files,
  Redis, ``cdc tail`` of every topic, the dead letters, the run's own log;
* ``cdc verify`` agrees, and disagrees once a sink is tampered with;
* a changed filter stops the next start (exit 2, saying what changed and the choices), and
  ``on_transform_change: resnapshot`` re-reads the table under the new filter.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest
import redis

from cdc.transforms.masks import hash_text, keep_last
from sinks.duckdb.reader import read_rows
from tests.e2e.cli_helpers import cdc, start_run, stop, wait_for

PIPELINE = "flt"
KEY = "e2e-mask-key-0123456789abcdef"
FILTER = "tenant = 42 AND NOT deleted"
RAW = ("pw-secret-", "ssn-raw-", "note-raw-", "@mail.test", "555-01")


def write_pipeline(tmp_path: Path, users: str, extra: str = "") -> Path:
    text = f"""
version: 1
name: {PIPELINE}
source:
  type: postgres
  dsn: ${{PG_DSN}}
  snapshot: initial
  status_interval_s: 1
  mask_key: ${{CDC_MASK_KEY}}
  tables:
    - public.orders_1
    - public.orders_2
    - {{name: public.events, ops: [c, u]}}
    - {users}
transforms:
  - {{type: route, match: "public\\\\.orders_\\\\d+", topic: public.orders}}
  - {{type: add_field, match: "public\\\\.users", field: region, value: eu}}
log: {{type: embedded, path: {tmp_path / "log"}}}
sinks:
  - {{name: warehouse, type: duckdb, path: {tmp_path / "out.duckdb"}}}
  - {{name: cache, type: redis, url: "${{REDIS_URL}}", key_prefix: "flt-e2e"}}
  - {{name: index, type: search, path: {tmp_path / "index"}}}
{extra}
"""
    path = tmp_path / "pipeline.yaml"
    path.write_text(text)
    return path


USERS = (
    "{name: public.users, columns: {exclude: [password_hash]}, where: '" + FILTER + "', "
    "mask: {email: hash, ssn: redact, phone: {type: keep_last, n: 4}, notes: 'null'}}"
)
NARROWER = FILTER + " AND id <= 30"
# The next start's settings: ssn hashed, and a narrower filter (id 41 leaves it).
USERS_CHANGED = USERS.replace("ssn: redact", "ssn: hash").replace(FILTER, NARROWER)


def execute(dsn: str, *statements: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)  # type: ignore[arg-type]  # fixed test SQL


def source_rows(dsn: str, statement: str) -> list[dict[str, Any]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return [r[0] for r in conn.execute(statement).fetchall()]  # type: ignore[arg-type]


def expected_users(
    dsn: str, ssn_mask: str = "redact", where: str = FILTER
) -> dict[int, dict[str, Any]]:
    """What every sink must hold of ``users``: the filter's rows, masked, with the field the
    transform adds."""
    out = {}
    for row in source_rows(dsn, f"SELECT to_jsonb(u) FROM users u WHERE {where}"):
        row.pop("password_hash")
        row["email"] = hash_text(KEY.encode(), row["email"])
        row["ssn"] = "***" if ssn_mask == "redact" else hash_text(KEY.encode(), row["ssn"])
        row["phone"] = keep_last(row["phone"], 4)
        row["notes"] = None
        row["region"] = "eu"
        out[row["id"]] = row
    return out


def duck(tmp_path: Path, table: str, *order: str) -> list[dict[str, Any]]:
    """The DuckDB sink's rows of ``table`` (read while the pipeline writes it), sorted."""
    schema, _, name = table.partition(".")
    found = [row for _, row in read_rows(tmp_path / "out.duckdb", schema, name)]
    return sorted(found, key=lambda row: tuple(row[c] for c in order))


def verify(
    tmp_path: Path, pipeline: Path, env: dict[str, str], *extra: str
) -> tuple[int, list[Any]]:
    result = cdc("verify", str(pipeline), "--json", "--wait", "60", *extra, cwd=tmp_path, env=env)
    assert result.stdout, result.stderr
    return result.returncode, orjson.loads(result.stdout)


def states(report: list[Any]) -> dict[tuple[str, str], str]:
    return {(r["sink"], r["table"]): r["state"] for r in report}


@pytest.fixture
def shop(pg_db: str, redis_server: Any) -> dict[str, str]:
    redis_server.start()
    if psycopg.connect(pg_db).info.server_version < 150000:
        pytest.skip("row filters need PostgreSQL 15 (a start error on 14: integration tests)")
    execute(
        pg_db,
        "CREATE TABLE users (id int PRIMARY KEY, tenant int NOT NULL, deleted bool NOT NULL,"
        " email text NOT NULL, password_hash text, ssn text, phone text, notes text)",
        "ALTER TABLE users REPLICA IDENTITY FULL",  # the row filter's columns are in it
        "INSERT INTO users SELECT g, CASE WHEN g % 4 = 0 THEN 7 ELSE 42 END, false,"
        " 'user' || g || '@mail.test', 'pw-secret-' || g, 'ssn-raw-' || g,"
        " '555-01' || lpad(g::text, 2, '0'), 'note-raw-' || g FROM generate_series(1, 40) g",
        "CREATE TABLE orders_1 (id int PRIMARY KEY, amount int)",
        "CREATE TABLE orders_2 (id int PRIMARY KEY, amount int)",
        "INSERT INTO orders_1 SELECT g, g FROM generate_series(1, 5) g",
        "INSERT INTO orders_2 SELECT g, 100 + g FROM generate_series(1, 5) g",
        "CREATE TABLE events (id int PRIMARY KEY, kind text)",
        "INSERT INTO events SELECT g, 'boot' FROM generate_series(1, 3) g",
    )
    return {"PG_DSN": pg_db, "REDIS_URL": redis_server.url, "CDC_MASK_KEY": KEY}


def test_filtered_masked_routed_pipeline_in_every_sink(
    shop: dict[str, str], tmp_path: Path
) -> None:
    dsn, env = shop["PG_DSN"], shop
    pipeline = write_pipeline(tmp_path, USERS)
    run = start_run(pipeline, tmp_path, env)
    log = tmp_path / "run.log"
    try:
        # Streaming from here: the changes below are changes, not snapshot rows.
        wait_for(lambda: _users(tmp_path) == expected_users(dsn), 90, process=run, log=log)
        execute(
            dsn,
            "UPDATE users SET tenant = 42 WHERE id = 4",  # moves in
            "UPDATE users SET deleted = true WHERE id = 5",  # moves out
            "UPDATE users SET tenant = 7 WHERE id = 6",  # moves out
            "UPDATE users SET email = 'changed7@mail.test', password_hash = 'pw-secret-x'"
            " WHERE id = 7",
            "UPDATE users SET notes = 'note-raw-outside' WHERE id = 8",  # outside: nothing
            "DELETE FROM users WHERE id = 9",
            "INSERT INTO users VALUES (41, 42, false, 'new@mail.test', 'pw-secret-41',"
            " 'ssn-raw-41', '555-0141', 'note-raw-41')",
            "INSERT INTO orders_2 VALUES (6, 106)",
            "UPDATE orders_1 SET amount = 50 WHERE id = 1",
            "DELETE FROM orders_2 WHERE id = 2",
            "INSERT INTO events VALUES (4, 'login')",
            "UPDATE events SET kind = 'logout' WHERE id = 1",
            "DELETE FROM events WHERE id = 2",  # ops leave out d: stays in every sink
        )
        wait_for(lambda: _users(tmp_path) == expected_users(dsn), 90, process=run, log=log)
        code, report = verify(
            tmp_path, pipeline, env, "--table", "public.orders", "--table", "public.users"
        )
        assert code == 0, report
        assert set(states(report).values()) == {"ok"}
        assert {r["table"] for r in report} == {"public.orders", "public.users"}
        # events leaves deletes and snapshot reads out: its sinks cannot equal the table.
        code, report = verify(tmp_path, pipeline, env)
        assert code == 1
        assert {t: s for (_, t), s in states(report).items()}["public.events"] == "unverifiable"
        _check_sinks(tmp_path, dsn, env)
        _check_nothing_raw_anywhere(tmp_path, pipeline, env)
        _check_tampering_is_found(tmp_path, pipeline, env)
    finally:
        assert stop(run)[0] == 0
    _check_a_changed_filter(tmp_path, dsn, env)
    cdc("drop", str(pipeline), "--yes", cwd=tmp_path, env=env)
    _check_a_filter_the_table_cannot_take(tmp_path, dsn, env)


def _check_a_filter_the_table_cannot_take(tmp_path: Path, dsn: str, env: dict[str, str]) -> None:
    """A row filter on a column outside the replica identity: a config error (exit 2) that
    names it and the fix, before the publication holds it (the application's UPDATEs work)."""
    bad = tmp_path / "bad"
    bad.mkdir()
    pipeline = write_pipeline(bad, "{name: public.users, where: 'id > 0'}")
    text = pipeline.read_text().replace(
        "- public.orders_1", "- {name: public.orders_1, where: 'amount > 1'}"
    )
    pipeline.write_text(text)
    result = cdc("run", str(pipeline), cwd=bad, env=env, timeout=60)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "amount, outside its replica identity" in result.stderr
    execute(dsn, "UPDATE orders_1 SET amount = amount + 1")
    cdc("drop", str(pipeline), "--yes", cwd=bad, env=env)


def _users(tmp_path: Path) -> dict[int, dict[str, Any]]:
    """The DuckDB sink's users (none while the table does not exist yet)."""
    if not (tmp_path / "out.duckdb").exists():
        return {}  # the sink has not opened its file yet
    return {r["id"]: r for r in duck(tmp_path, "public.users", "id")}


def _check_sinks(tmp_path: Path, dsn: str, env: dict[str, str]) -> None:
    users = _users(tmp_path)
    assert users == expected_users(dsn)
    assert 4 in users and 41 in users and not {5, 6, 8, 9} & set(users)
    orders = duck(tmp_path, "public.orders", "__dbz__physicalTableIdentifier", "id")
    assert [(r["__dbz__physicalTableIdentifier"][-1], r["id"], r["amount"]) for r in orders] == [
        ("1", 1, 50),
        ("1", 2, 2),
        ("1", 3, 3),
        ("1", 4, 4),
        ("1", 5, 5),
        ("2", 1, 101),
        ("2", 3, 103),
        ("2", 4, 104),
        ("2", 5, 105),
        ("2", 6, 106),
    ]
    # ops [c, u]: the delete of event 2 never arrived, and no snapshot row did either.
    assert [(r["id"], r["kind"]) for r in duck(tmp_path, "public.events", "id")] == [
        (1, "logout"),
        (4, "login"),
    ]


def _check_nothing_raw_anywhere(tmp_path: Path, pipeline: Path, env: dict[str, str]) -> None:
    written = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
    stored = _redis_bytes(redis.Redis.from_url(env["REDIS_URL"]))
    topics = cdc("topics", str(pipeline), "--json", cwd=tmp_path, env=env)
    tailed = b""
    for topic in orjson.loads(topics.stdout):
        result = cdc(
            "tail",
            str(pipeline),
            topic["topic"],
            "--from-beginning",
            "--timeout-s",
            "0.5",
            cwd=tmp_path,
            env=env,
        )
        assert result.returncode == 0, result.stderr
        tailed += result.stdout.encode()
    assert b'"id":4' in tailed and f"{PIPELINE}.__dlq".encode() in topics.stdout.encode()
    for raw in RAW:
        for where, blob in (("files", written), ("redis", stored), ("cdc tail", tailed)):
            assert raw.encode() not in blob, f"{raw!r} in {where}"
    assert KEY.encode() not in written + stored + tailed


def _redis_bytes(client: redis.Redis) -> bytes:
    """Every key and value in the Redis database: the sink's rows and its own bookkeeping."""
    out = []
    for key in client.scan_iter():
        kind = client.type(key)
        out.append(key)
        if kind == b"string":
            out.append(client.get(key) or b"")
        elif kind == b"hash":
            out.extend(b"".join(pair) for pair in client.hgetall(key).items())
        elif kind == b"zset":
            out.extend(client.zrange(key, 0, -1))
        elif kind == b"set":
            out.extend(client.smembers(key))
    return b"".join(out)


def _check_tampering_is_found(tmp_path: Path, pipeline: Path, env: dict[str, str]) -> None:
    client = redis.Redis.from_url(env["REDIS_URL"])
    (key,) = [k for k in client.scan_iter("flt-e2e*public.users:41")]
    row = orjson.loads(client.get(key) or b"{}")
    client.set(key, orjson.dumps({**row, "ssn": "tampered"}))
    code, report = verify(tmp_path, pipeline, env, "--table", "public.users")
    assert code == 1
    assert states(report)[("cache", "public.users")] == "different"
    assert states(report)[("warehouse", "public.users")] == "ok"
    client.set(key, orjson.dumps(row))


def _check_a_changed_filter(tmp_path: Path, dsn: str, env: dict[str, str]) -> None:
    changed = write_pipeline(tmp_path, USERS_CHANGED)
    refused = cdc("run", str(changed), cwd=tmp_path, env=env, timeout=60)
    assert refused.returncode == 2, refused.stderr
    assert "other transforms or table filters" in refused.stderr
    assert "public.users" in refused.stderr and "on_transform_change" in refused.stderr
    resnapshot = write_pipeline(tmp_path, USERS_CHANGED, "on_transform_change: resnapshot")
    run = start_run(resnapshot, tmp_path, env)
    try:
        # Re-read under the new settings: every row's ssn hashed, and the rows the narrower
        # filter leaves out (id 41) deleted from every sink.
        wanted = expected_users(dsn, ssn_mask="hash", where=NARROWER)
        assert 41 not in wanted and 41 in _users(tmp_path)
        wait_for(
            lambda: _users(tmp_path) == wanted, timeout=90, process=run, log=tmp_path / "run.log"
        )
        code, report = verify(tmp_path, resnapshot, env, "--table", "public.users")
        assert code == 0, report
    finally:
        assert stop(run)[0] == 0
