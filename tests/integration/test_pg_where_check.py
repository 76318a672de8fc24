"""``cdc snapshot --where``'s server-side check, on a real PostgreSQL: it shows no hidden value
and writes nothing; nor does a request that fails at run time.

Before the fix the check evaluated the predicate on any 100 rows, the row filter ignored, and
echoed the server's error: ``--where "ssn::int > 0"`` answered ``invalid input syntax for type
integer: "SSN-RAW-1"``, a masked value of a row the row filter leaves out.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest
from structlog.testing import capture_logs

from cdc.contracts.errors import ConfigError
from connectors.postgres.config import PostgresSourceConfig
from connectors.postgres.snapshot.signal import _write, request_snapshot
from tests.integration.snapshot_kit import PIPELINE, execute, pipeline


def config(dsn: str, users: dict[str, Any] | str) -> PostgresSourceConfig:
    return PostgresSourceConfig.model_validate(
        {"type": "postgres", "dsn": dsn, "tables": [users, "public.plain"]}
    )


def refusal(cfg: PostgresSourceConfig, table: str, where: str) -> str:
    with pytest.raises(ConfigError) as raised:
        request_snapshot(cfg, "wc", table, where)
    [(field, message)] = raised.value.problems
    assert field == "--where"
    return message


@pytest.fixture
def dsn(pg_db: str) -> str:
    execute(
        pg_db,
        "CREATE TABLE users (id int PRIMARY KEY, tenant int NOT NULL, ssn text)",
        "ALTER TABLE users REPLICA IDENTITY FULL",
        # Row 1 is outside the row filter: nothing of it is the pipeline's to read.
        "INSERT INTO users VALUES (1, 7, 'SSN-RAW-1'), (2, 42, '22'), (3, 42, '33')",
        "CREATE TABLE plain (id int PRIMARY KEY, v text)",
        "INSERT INTO plain VALUES (1, 'PLAIN-1')",
        "CREATE SEQUENCE s",
    )
    return pg_db


USERS = {"name": "public.users", "mask": {"ssn": "redact"}, "where": "tenant = 42"}


@pytest.mark.pgcore
def test_a_refused_where_shows_no_masked_value(dsn: str) -> None:
    cfg = config(dsn, USERS)
    # Inside the row filter every ssn is a number: the check passes, as the read would.
    assert request_snapshot_checks(cfg, "public.users", "ssn::int > 0")
    execute(dsn, "UPDATE users SET ssn = 'SSN-RAW-2' WHERE id = 2")
    message = refusal(cfg, "public.users", "ssn::int > 0")
    assert "SSN-RAW" not in message
    assert "SQLSTATE 22P02" in message and "data exception" in message
    # A table that hides nothing keeps the server's own words.
    assert 'invalid input syntax for type integer: "PLAIN-1"' in refusal(
        cfg, "public.plain", "v::int > 0"
    )


@pytest.mark.pgcore
def test_the_check_of_a_volatile_where_advances_no_sequence(dsn: str) -> None:
    for users in (USERS, "public.users"):
        message = refusal(config(dsn, users), "public.users", "nextval('s') > 0")
        assert "read-only transaction" in message
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT is_called FROM s").fetchone() == (False,)


def request_snapshot_checks(cfg: PostgresSourceConfig, table: str, where: str) -> bool:
    """Whether the check accepts ``where`` (the request itself then needs a running pipeline's
    signal table: its absence is the next, expected, refusal)."""
    try:
        request_snapshot(cfg, "wc", table, where)
    except ConfigError:
        return False
    except Exception as exc:  # the signal's write, after the check
        return "signal table" in str(exc) or "snapshot" in str(exc)
    return True


@pytest.mark.pgcore
def test_a_request_failing_at_run_time_shows_no_hidden_value(dsn: str, tmp_path: Path) -> None:
    """A hand-written signal skips ``cdc snapshot``'s check: its chunk read fails on a masked
    value, and neither the request's stored reason nor a log line quotes it."""
    users, rows = USERS, 2
    with psycopg.connect(dsn) as conn:
        if conn.info.server_version < 150000:
            # Publications filter rows from 15 on (a row filter is a start error on 14): there
            # the mask alone hides the values, and every row is read.
            users, rows = {k: v for k, v in USERS.items() if k != "where"}, 3
    with (
        pipeline(dsn, tmp_path / "log", [users], snapshot="initial") as p,
        capture_logs() as logs,
    ):
        p.start()
        p.wait(lambda: bool(p.sources) and p.sources[-1].streaming)
        p.wait(lambda: len(p.topic_state("public.users")) == rows)
        execute(dsn, "UPDATE users SET ssn = 'SSN-RAW-2' WHERE id = 2")
        request = {"id": uuid.uuid4().hex, "type": "snapshot", "table": "public.users"}
        request["where"] = "ssn::int > 0"
        _write(p.config, PIPELINE, request, lambda conn: None)
        p.wait(lambda: any(f.get("id") == request["id"] for f in p.snapshot_state()["failed"]))
        [failed] = [f for f in p.snapshot_state()["failed"] if f.get("id") == request["id"]]
        stored = p.offsets()
    assert "SQLSTATE 22P02" in str(failed), failed
    assert b"SSN-RAW" not in orjson.dumps([stored, [dict(e) for e in logs]], default=str)
