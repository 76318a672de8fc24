"""The service fixtures really serve: each test talks to the real server it asked for."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg.pq import ExecStatus


def _needs_restart(server: Any) -> None:
    if not server.supports_restart:
        pytest.skip("server given by address (environment variable): cannot restart it")


def test_postgres_is_logical_and_accepts_replication(pg_db: str) -> None:
    with psycopg.connect(pg_db) as conn:
        assert conn.execute("SHOW wal_level").fetchone() == ("logical",)
    with psycopg.connect(pg_db, replication="database", autocommit=True) as repl:
        result = repl.pgconn.exec_(b"IDENTIFY_SYSTEM")
        assert result.status == ExecStatus.TUPLES_OK, result.error_message
        assert result.get_value(0, 3) == pg_db.rsplit("/", 1)[1].encode()


def test_pg_db_drops_its_slots(pg_server: Any) -> None:
    name = pg_server.create_database("test_slot_cleanup")
    try:
        with psycopg.connect(pg_server.dsn_for(dbname=name), autocommit=True) as conn:
            conn.execute("SELECT pg_create_logical_replication_slot('leak', 'pgoutput')")
    finally:
        pg_server.drop_database(name)
    with psycopg.connect(pg_server.dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_replication_slots WHERE database = %s", (name,)
        ).fetchone()
    assert row == (0,)


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_postgres_restart_keeps_committed_rows(pg_server: Any, pg_db: str, mode: str) -> None:
    _needs_restart(pg_server)
    with psycopg.connect(pg_db) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
        conn.execute("INSERT INTO t VALUES (1), (2)")
    pg_server.stop(mode=mode)
    pg_server.start()
    with psycopg.connect(pg_db) as conn:
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (2,)
