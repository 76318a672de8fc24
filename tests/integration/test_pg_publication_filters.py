"""PostgreSQL 15+ publication row filters and column lists (the internal API the filters issue
builds on): a filtered publication streams only the rows its filter accepts, and only its
listed columns."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
import structlog

from connectors.postgres.catalog import Catalog
from connectors.postgres.publication import TableSpec, ensure_publication, set_publication_tables
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
    logger = structlog.get_logger()
    catalog = Catalog(orders, "test", 5)
    try:
        role = catalog.check_role()
        info = catalog.table("public", "orders", role)
        eu = TableSpec("public", "orders", where="region = 'eu'")
        ensure_publication(catalog, _PUB, [info], role, logger, {"public.orders": eu})
    finally:
        catalog.close()
    with harness(orders, tmp_path / "log", ["public.orders"]) as h:
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
        catalog = Catalog(orders, "test", 5)
        try:
            listed = TableSpec("public", "orders", ("id", "region", "amount"), "amount > 100")
            set_publication_tables(catalog, _PUB, [listed], catalog.check_role(), logger)
        finally:
            catalog.close()
        h.events.clear()
        h.open()
        sql(orders, "INSERT INTO orders VALUES (4, 'us', 500, 'd'), (5, 'eu', 5, 'e')")
        [event] = h.collect(1)
        assert event.after == {"id": 4, "region": "us", "amount": 500}
