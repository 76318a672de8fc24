"""A TRUNCATE of a live join view's tables through ``cdc run`` on PostgreSQL: of an embedded
table (its rows leave every document), then of the root (every document deleted), each with
rows inserted after it in the same transaction; the view topic and Redis then equal the
source's join, and ``cdc verify`` says so. One pipeline, every wait on a condition."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import orjson
import psycopg
from psycopg import sql

from cdc.views.join import canonical_key
from tests.e2e.cli_helpers import cdc, start_run, stop, wait_for
from tests.e2e.views_kit import ViewReader, cached, setup, source_join, write_pipeline


def _truncate_then_insert(dsn: str, table: str, rows: list[tuple[Any, ...]]) -> None:
    """``TRUNCATE table`` and ``rows`` inserted after it, in one transaction."""
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
        conn.execute(sql.SQL("TRUNCATE {}").format(sql.Identifier(table)))
        for row in rows:
            marks = sql.SQL(", ").join(sql.Placeholder() * len(row))
            conn.execute(
                sql.SQL("INSERT INTO {} VALUES ({})").format(sql.Identifier(table), marks), row
            )


def test_truncates_of_an_embedded_table_and_of_the_root_leave_the_view_equal_to_the_join(
    pg_db: str, redis_server: Any, tmp_path: Path
) -> None:
    name = f"vt_{uuid.uuid4().hex[:8]}"
    setup(pg_db, customers=3, orders=12, items=30)
    pipeline = write_pipeline(tmp_path, pg_db, redis_server.url, name)
    reader = ViewReader(pipeline)
    view = reader.config.views[0]
    log = tmp_path / "run.log"
    seen: dict[str, Any] = {}

    def equal() -> bool:
        expected = source_join(pg_db, view)
        docs = reader.documents()
        seen.update(expected=len(expected), topic=len(docs))
        return docs == expected and cached(pipeline, redis_server.url, name) == expected

    process = start_run(pipeline, tmp_path)
    try:
        wait_for(equal, 120, 0.1, process, log, seen)
        _truncate_then_insert(pg_db, "order_items", [(100, 2, "new", 1)])
        wait_for(equal, 60, 0.1, process, log, seen)
        items = {orjson.loads(k)["id"]: d["items"] for k, d in reader.documents().items()}
        assert len(items) == 12 and items.pop(2) == [
            {"id": 100, "order_id": 2, "sku": "new", "qty": 1}
        ]
        assert all(i == [] for i in items.values())
        _truncate_then_insert(pg_db, "orders", [(50, 1, "after"), (100, 3, "after")])
        wait_for(equal, 60, 0.1, process, log, seen)
        docs = reader.documents()
        assert set(docs) == {canonical_key({"id": 50}), canonical_key({"id": 100})}
        assert docs[canonical_key({"id": 100})]["customer"] == {"id": 3, "name": "c3"}
        verified = cdc(
            "verify", str(pipeline), "--json", "--table", "views.order_docs", cwd=tmp_path
        )
    finally:
        code, _ = stop(process, timeout=30)
    assert code == 0, log.read_text()[-3000:]
    assert verified.returncode == 0, verified.stdout + verified.stderr
    (report,) = orjson.loads(verified.stdout)
    assert report["state"] == "ok" and report["source"]["count"] == 2
