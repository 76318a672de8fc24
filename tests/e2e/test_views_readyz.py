"""A live join view in ``/readyz`` and the stall alarm, through ``cdc run`` on PostgreSQL.

The pipeline runs the view alone (no sink), with ``metrics.listen`` and ``stall_after_s: 5``.
Once the view caught up, ``/readyz`` is 200. Then another process (this test) holds the view's
local store (``views/order_docs.sqlite``) locked in an open write transaction, as an operator's
``sqlite3`` shell or a backup can, and orders are inserted: the source appends them, the view
cannot apply them (SQLite's "database is locked": its session is retried), and while they wait it
is stalled: ``cdc_task_stalled{task="view:order_docs"}`` is 1, ``/readyz`` is 503 naming it,
and one ``task.stalled`` error is logged; the source is not stalled. Once the lock is released
the view writes the orders' documents and all of it clears. Every wait is on a condition.
"""

from __future__ import annotations

import signal
import sqlite3
import uuid
from contextlib import closing
from pathlib import Path
from typing import Any

import orjson
import psycopg

from tests.e2e.cli_helpers import http_get, start_run, stop, wait_for
from tests.e2e.views_kit import VIEW, ViewReader, setup, source_join
from tests.services.ports import LOOPBACK, free_port

TASK = "view:order_docs"
STALLED = f"{TASK}: stalled (no progress while work waits)"


def _pipeline(tmp_path: Path, dsn: str, listen: str) -> Path:
    path = tmp_path / "views.yaml"
    path.write_text(
        f"version: 1\nname: vr_{uuid.uuid4().hex[:8]}\nsource:\n  type: postgres\n"
        f"  dsn: '{dsn}'\n"
        "  tables: [public.customers, public.orders, public.order_items]\n"
        "  status_interval_s: 1\n"  # the idle slot follows the server's WAL each second
        f"log: {{type: embedded, path: '{tmp_path / 'log'}'}}\n"
        f"{VIEW}"
        f"metrics: {{listen: '{listen}', stall_after_s: 5}}\n"
    )
    return path


class Endpoint:
    """The run's ``/readyz`` and ``/metrics``."""

    def __init__(self, listen: str) -> None:
        self.base = f"http://{listen}"

    def ready(self) -> tuple[int, dict[str, Any]]:
        status, body = http_get(f"{self.base}/readyz")
        return status, (orjson.loads(body) if body else {})

    def value(self, name: str, label: str) -> float | None:
        """The series ``name`` whose labels hold ``label`` (``task="source"``), if exported."""
        status, body = http_get(f"{self.base}/metrics")
        if status != 200:
            return None
        for line in body.decode().splitlines():
            series, _, number = line.rpartition(" ")
            if series.startswith(name + "{") and label in series:
                return float(number)
        return None


def _stalled(endpoint: Endpoint) -> float | None:
    return endpoint.value("cdc_task_stalled", f'task="{TASK}"')


def test_a_view_that_cannot_write_is_stalled_on_readyz_and_clears(
    pg_db: str, tmp_path: Path
) -> None:
    setup(pg_db, customers=2, orders=3, items=2)
    listen = f"{LOOPBACK}:{free_port()}"
    pipeline = _pipeline(tmp_path, pg_db, listen)
    reader = ViewReader(pipeline)
    view = reader.config.views[0]
    endpoint = Endpoint(listen)
    log = tmp_path / "run.log"
    process = start_run(pipeline, tmp_path)
    try:
        wait_for(lambda: reader.documents() == source_join(pg_db, view), 120, 0.1, process, log)
        seen: dict[str, Any] = {}

        def ready() -> bool:
            seen["ready"] = endpoint.ready()
            return seen["ready"][0] == 200

        wait_for(ready, 60, 0.2, process, log, seen)
        assert _stalled(endpoint) == 0
        assert endpoint.value("cdc_last_progress_timestamp_seconds", f'task="{TASK}"')
        _locked_store_stalls_the_view(pg_db, tmp_path, endpoint, process, log)
        wait_for(lambda: reader.documents() == source_join(pg_db, view), 120, 0.1, process, log)
        assert len(reader.documents()) == 5
        # The sessions retried under the lock wrote nothing twice: one document each.
        waited = [orjson.loads(r.key) for r in reader.records()]
        assert sum(k in ({"id": 101}, {"id": 102}) for k in waited) == 2, waited
        wait_for(lambda: _stalled(endpoint) == 0, 60, 0.2, process, log)
        wait_for(ready, 60, 0.2, process, log, seen)
        assert "task.stall_cleared" in log.read_text()
    finally:
        code, _ = stop(process, signal.SIGTERM, timeout=30)
    assert code == 0, log.read_text()[-4000:]


def _locked_store_stalls_the_view(
    dsn: str, tmp_path: Path, endpoint: Endpoint, process: Any, log: Path
) -> None:
    """While the view's store is locked and orders wait for it: stalled, 503 naming it; then
    the lock is released."""
    seen_lines = len(log.read_text().splitlines())
    store = tmp_path / "log" / "views" / "order_docs.sqlite"
    assert store.exists()
    with closing(sqlite3.connect(store)) as holder:
        holder.execute("BEGIN IMMEDIATE")  # a writer's lock, held until the rollback below
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO orders VALUES (101, 1, 'waits'), (102, 2, 'waits')")
        seen: dict[str, Any] = {}

        def stalled() -> bool:
            seen["stalled"] = _stalled(endpoint)
            seen["ready"] = endpoint.ready()
            return seen["stalled"] == 1 and STALLED in seen["ready"][1].get("reasons", [])

        wait_for(stalled, 90, 0.2, process, log, seen)
        status, body = endpoint.ready()
        assert status == 503 and body["status"] == "not ready", body
        lag = endpoint.value("cdc_view_lag_records", 'view="order_docs"')
        assert lag is not None and lag >= 2  # the two orders wait for it

        # The view retries its session: its state says why.
        def retrying() -> bool:
            return any(r.startswith(f"{TASK}: retrying:") for r in endpoint.ready()[1]["reasons"])

        wait_for(retrying, 60, 0.2, process, log)
        assert endpoint.value("cdc_task_stalled", 'task="source"') == 0
        lines = log.read_text().splitlines()[seen_lines:]
        alarms = [line for line in lines if "task.stalled" in line]
        assert len(alarms) == 1 and TASK in alarms[0], alarms
        assert any("view.retrying" in line and "locked" in line for line in lines)
        assert process.poll() is None  # a locked store stops nothing
        holder.rollback()
