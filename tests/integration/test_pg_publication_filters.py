"""PostgreSQL 15+ publication row filters and column lists: a filtered publication streams only
the rows its filter accepts, and only its listed columns; the next start's filters replace
them."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from connectors.postgres import PostgresSourceConfig
from tests.integration.pg_source_kit import PIPELINE, harness, sql

_PUB = f"{PIPELINE}_pub"


@pytest.fixture
def orders(pg_db: str) -> str:
    with psycopg.connect(pg_db) as conn:
        if conn.info.server_version < 150000:
            pytest.skip("publication row filters and column lists need PostgreSQL 15")
    # The filter's and the list's columns must be in the replica identity (the primary key),
    # or the server refuses UPDATE and DELETE on the table.
    sql(
        pg_db,
        "CREATE TABLE orders (id int, region text, amount int, note text,"
        " PRIMARY KEY (id, region))",
    )
    return pg_db


def test_a_filtered_publication_streams_only_the_matching_rows(orders: str, tmp_path: Path) -> None:
    eu = {"name": "public.orders", "where": "region = 'eu'"}
    with harness(orders, tmp_path / "log", [eu]) as h:
        h.open()
        sql(
            orders,
            "INSERT INTO orders VALUES (1, 'eu', 10, 'a'), (2, 'us', 20, 'b'), (3, 'eu', 30, 'c')",
            "UPDATE orders SET amount = amount + 1",
            "DELETE FROM orders WHERE id IN (2, 3)",
        )
        events = h.collect(5)
        assert [(e.op.value, e.key["id"]) for e in events] == [
            ("c", 1),
            ("c", 3),
            ("u", 1),
            ("u", 3),
            ("d", 3),
        ]
        assert events[0].after == {"id": 1, "region": "eu", "amount": 10, "note": "a"}
        h.close()
        # The next start's filters replace the publication's: a column list and a new filter
        # (on key columns: the replica identity).
        us = {"name": "public.orders", "columns": {"include": ["id", "region", "amount"]}}
        us["where"] = "region = 'us'"
        h.config = PostgresSourceConfig.model_validate(
            {"type": "postgres", "dsn": orders, "tables": [us]}
        )
        h.events.clear()
        h.open()
        assert _held(orders) == (["id", "region", "amount"], "(region = 'us'::text)")
        sql(orders, "INSERT INTO orders VALUES (4, 'us', 500, 'd'), (5, 'eu', 5, 'e')")
        [event] = h.collect(1)
        assert event.after == {"id": 4, "region": "us", "amount": 500}


def _held(dsn: str) -> tuple[list[str] | None, str | None]:
    """The pipeline's publication's column list and row filter of ``orders``."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT ARRAY(SELECT a.attname::text FROM pg_attribute a WHERE a.attrelid = r.prrelid"
            " AND a.attnum = ANY(r.prattrs) ORDER BY a.attnum), pg_get_expr(r.prqual, r.prrelid)"
            " FROM pg_publication_rel r JOIN pg_publication p ON p.oid = r.prpubid"
            " WHERE p.pubname = %s",
            (_PUB,),
        ).fetchone()
    assert row is not None
    return row[0], row[1]
