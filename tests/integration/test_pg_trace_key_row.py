"""The PostgreSQL source's ``read_key`` (``cdc trace``) on a real server: one row by its record
key as the sinks got it (masked), a row the row filter leaves out told from no row, a keyless
table's key with a NULL, and a key value its column's type cannot read."""

from __future__ import annotations

import psycopg
import pytest

from cdc.cli.trace_source import _find
from connectors.postgres.config import PostgresSourceConfig
from connectors.postgres.plugin import PostgresSourcePlugin
from connectors.postgres.snapshot.key_row import read_key


def _config(dsn: str, *tables: object) -> PostgresSourceConfig:
    return PostgresSourceConfig.model_validate(
        {"type": "postgres", "dsn": dsn, "tables": list(tables)}
    )


@pytest.mark.pgany
def test_a_row_by_its_key(pg_db: str) -> None:
    with psycopg.connect(pg_db, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id integer PRIMARY KEY, label text, secret text)")
        conn.execute("INSERT INTO items VALUES (1, 'one', 's1'), (500, 'big', 's2')")
        conn.execute("CREATE TABLE notes (a integer, b text)")
        conn.execute("ALTER TABLE notes REPLICA IDENTITY FULL")
        conn.execute("INSERT INTO notes VALUES (1, NULL), (1, 'x')")
    items = {"name": "public.items", "mask": {"secret": "redact"}, "where": "id < 100"}
    config = _config(pg_db, items, "public.notes")
    row, exists = read_key(config, "public", "items", {"id": 1})
    assert (row, exists) == ({"id": 1, "label": "one", "secret": "***"}, True)
    assert read_key(config, "public", "items", {"id": 500}) == (None, True)  # filtered out
    assert read_key(config, "public", "items", {"id": 2}) == (None, False)
    assert read_key(config, "public", "notes", {"a": 1, "b": None}) == ({"a": 1, "b": None}, True)
    with pytest.raises(LookupError):
        read_key(config, "public", "items", {"id": "not a number"})


@pytest.mark.pgany
# The hang this guards against lasted minutes; its timeout is raised while the abandoned reader
# is finalized, where Python reports it as unraisable: made an error here, so the test fails.
@pytest.mark.timeout(30)
@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
def test_a_table_read_for_one_key_reads_to_the_end(pg_db: str) -> None:
    """The trace's way without a key lookup: the key's row picked out of the table's rows. Left
    at the key, the source's COPY kept streaming and closing its connection waited forever."""
    with psycopg.connect(pg_db, autocommit=True) as conn:
        conn.execute("CREATE TABLE big (id integer PRIMARY KEY, body text)")
        conn.execute("INSERT INTO big SELECT g, repeat('x', 100) FROM generate_series(1, 100000) g")
    config = _config(pg_db, "public.big")
    row = _find(lambda: PostgresSourcePlugin.read_rows(config, "public", "big"), {"id": 1})
    assert row == {"id": 1, "body": "x" * 100}
