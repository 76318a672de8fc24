"""A TRUNCATE of a live join view's tables through ``cdc run`` on the Kafka log (three
partitions: a truncate's record and its table's rows are in different partitions, read in no
set order): of an embedded table (its rows leave every document), then, after a restart on
another state directory (the view's store rebuilt from its state topic, the truncate's floor
with it), of the root (every document deleted), each with rows inserted after it in the same
transaction; the view topic and Redis then equal the source's join, and ``cdc verify`` says so.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import orjson

from cdc.views.join import canonical_key
from tests.e2e.cli_helpers import cdc, start_run, stop, wait_for
from tests.e2e.test_views_truncate import _truncate_then_insert
from tests.e2e.views_kit import ViewReader, cached, setup, source_join, write_pipeline


def test_truncates_through_a_view_on_kafka_leave_it_equal_to_the_join(
    pg_db: str, redis_server: Any, kafka_server: Any, tmp_path: Path
) -> None:
    name = f"kvt_{uuid.uuid4().hex[:8]}"
    setup(pg_db, customers=3, orders=12, items=30)
    log = f"{{type: kafka, bootstrap_servers: '{kafka_server.bootstrap_servers}', partitions: 3}}"
    pipeline = write_pipeline(tmp_path, pg_db, redis_server.url, name, log, local_sinks=False)
    reader = ViewReader(pipeline)
    view = reader.config.views[0]
    seen: dict[str, Any] = {}

    def equal() -> bool:
        expected = source_join(pg_db, view)
        docs = reader.documents()
        seen.update(expected=len(expected), topic=len(docs))
        return docs == expected and cached(pipeline, redis_server.url, name) == expected

    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    process = start_run(pipeline, first)
    try:
        wait_for(equal, 120, 0.2, process, first / "run.log", seen)
        _truncate_then_insert(pg_db, "order_items", [(100, 2, "new", 1)])
        wait_for(equal, 60, 0.2, process, first / "run.log", seen)
        items = {orjson.loads(k)["id"]: d["items"] for k, d in reader.documents().items()}
        assert len(items) == 12 and items.pop(2) == [
            {"id": 100, "order_id": 2, "sku": "new", "qty": 1}
        ]
        assert all(i == [] for i in items.values())
    finally:
        code, _ = stop(process, timeout=30)
    assert code == 0, (first / "run.log").read_text()[-3000:]

    # Another state directory: the view's store is rebuilt from its state topic.
    process = start_run(pipeline, second)
    try:
        _truncate_then_insert(pg_db, "orders", [(50, 1, "after"), (100, 3, "after")])
        wait_for(equal, 120, 0.2, process, second / "run.log", seen)
        docs = reader.documents()
        assert set(docs) == {canonical_key({"id": 50}), canonical_key({"id": 100})}
        assert docs[canonical_key({"id": 100})]["customer"] == {"id": 3, "name": "c3"}
        assert docs[canonical_key({"id": 50})]["items"] == []
        verified = cdc("verify", str(pipeline), "--json", "--table", "views.order_docs", cwd=second)
    finally:
        code, _ = stop(process, timeout=30)
    log_text = (second / "run.log").read_text()
    assert code == 0, log_text[-3000:]
    assert '"view.store_rebuilding"' in log_text
    assert verified.returncode == 0, verified.stdout + verified.stderr
    (report,) = orjson.loads(verified.stdout)
    assert report["state"] == "ok" and report["source"]["count"] == 2
    cdc("drop", str(pipeline), "--yes", cwd=second)
