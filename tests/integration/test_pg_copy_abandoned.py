"""A COPY read left partway (a snapshot chunk stopped by cancel or shutdown, ``cdc verify`` or
``cdc trace`` stopping early) is cancelled on the server instead of drained to its end: the
server-side query is gone once the reader is closed, and its connection stays usable."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import sql

from connectors.postgres.config import PostgresSourceConfig
from connectors.postgres.snapshot.reader import read_lines
from connectors.postgres.snapshot.table_rows import table_rows

_QUERY = sql.SQL("COPY (SELECT g, repeat('x', 100) FROM generate_series(1, 300000) g) TO STDOUT")


def _copies_running(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE query LIKE 'COPY (SELECT g, repeat%%' AND state = 'active'"
        ).fetchone()
    return int(row[0]) if row else 0


@pytest.mark.pgany
@pytest.mark.timeout(60)
def test_an_abandoned_read_cancels_its_query(pg_db: str) -> None:
    with psycopg.connect(pg_db, autocommit=True) as conn:
        pieces = read_lines(conn, _QUERY, piece_rows=100)
        assert len(next(pieces)) == 100
        assert _copies_running(pg_db) == 1  # the server is still streaming the rest
        pieces.close()
        # Before the fix, close read the other 299,900 rows first; now the query is cancelled.
        assert _copies_running(pg_db) == 0
        assert conn.execute("SELECT 1").fetchone() == (1,)


@pytest.mark.pgany
@pytest.mark.timeout(60)
def test_a_read_left_by_an_error_cancels_its_query(pg_db: str) -> None:
    """A consumer's exception thrown into the reader (a shutdown while a piece is handled)."""
    with psycopg.connect(pg_db, autocommit=True) as conn:
        pieces = read_lines(conn, _QUERY, piece_rows=100, hides_values=True)
        next(pieces)
        with pytest.raises(KeyboardInterrupt):
            pieces.throw(KeyboardInterrupt())
        assert _copies_running(pg_db) == 0
        assert conn.execute("SELECT 1").fetchone() == (1,)


@pytest.mark.pgany
@pytest.mark.timeout(60)
@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
def test_a_table_read_left_early_closes_promptly(pg_db: str) -> None:
    """``cdc verify`` / ``cdc trace`` stopping at a row: closing the reader ended its connection
    with the COPY's generator still open, and the rollback waited for the rest of the table."""
    with psycopg.connect(pg_db, autocommit=True) as conn:
        conn.execute("CREATE TABLE big (id integer PRIMARY KEY, body text)")
        conn.execute("INSERT INTO big SELECT g, repeat('x', 100) FROM generate_series(1, 300000) g")
    config = PostgresSourceConfig.model_validate(
        {"type": "postgres", "dsn": pg_db, "tables": ["public.big"]}
    )
    rows = table_rows(config, "public", "big")
    assert next(rows)[0] == {"id": 1}
    rows.close()
    with psycopg.connect(pg_db, autocommit=True) as conn:
        left = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'cdc-verify'"
        ).fetchone()
    assert left == (0,)  # the reader's connection is closed, its query with it
