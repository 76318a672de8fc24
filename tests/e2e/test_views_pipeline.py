"""Live join views through ``cdc run`` on PostgreSQL: orders with their customer and their
items embedded, in the view topic, Redis, DuckDB and the search index.

A random workload over the three tables with two SIGKILLs of ``cdc run``, each once the view
is provably mid-work, must end with the view equal to the same join run on the source (and
``cdc verify`` saying so); a customer's rename updates every one of their orders; an item's and
an order's delete update and delete their documents, and then the view's metrics count what
it read and wrote and ``cdc status`` lists it caught up. Every wait is on a condition.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import orjson
import psycopg

from cdc.views.join import canonical_key
from tests.e2e.cli_helpers import cdc, http_get, start_run, stop, wait_for
from tests.e2e.views_kit import (
    ViewReader,
    Workload,
    cached,
    duckdb_documents,
    indexed,
    kill_mid_work,
    setup,
    sinks_caught_up,
    source_join,
    write_pipeline,
)
from tests.services.ports import LOOPBACK, free_port

VIEW_LABELS = re.compile(r'\{pipeline="[^"]+",view="order_docs"\}')


def _metrics(url: str) -> dict[str, float]:
    """The view's series of the metrics endpoint, by name (none while it does not answer)."""
    status, body = http_get(url)
    if status != 200:
        return {}
    found = {}
    for line in body.decode().splitlines():
        name, _, rest = line.partition("{")
        if name.startswith("cdc_view_") and VIEW_LABELS.match("{" + rest.rsplit(" ", 1)[0]):
            found[name] = float(rest.rsplit(" ", 1)[1])
    return found


def test_view_equals_the_source_join_after_a_workload_and_two_sigkills(
    pg_db: str, redis_server: Any, tmp_path: Path
) -> None:
    name = f"views_{uuid.uuid4().hex[:8]}"
    setup(pg_db, customers=30, orders=80, items=200)
    pipeline = write_pipeline(tmp_path, pg_db, redis_server.url, name)
    reader = ViewReader(pipeline)
    view = reader.config.views[0]
    workload = Workload(pg_db, seed=7)
    process = start_run(pipeline, tmp_path)
    workload.start()
    try:
        for _ in range(2):
            kill_mid_work(process, workload, reader, tmp_path)
            process = start_run(pipeline, tmp_path)
        wait_for(lambda: workload.count > 300, 120, 0.1, process, tmp_path / "run.log")
    finally:
        workload.stop_event.set()
        workload.join(30)
    seen: dict[str, Any] = {}

    def converged() -> bool:
        expected = source_join(pg_db, view)
        seen.update(expected=len(expected), topic=len(reader.documents()))
        return (
            reader.documents() == expected and cached(pipeline, redis_server.url, name) == expected
        )

    wait_for(converged, 180, 0.5, process, tmp_path / "run.log", seen)
    # DuckDB is read once the run stopped (it holds the file): every sink consumed it all first.
    wait_for(lambda: sinks_caught_up(pipeline, tmp_path), 60, 0.5, process, tmp_path / "run.log")
    code, _ = stop(process)
    assert code == 0, (tmp_path / "run.log").read_text()[-3000:]
    expected = source_join(pg_db, view)
    assert len(expected) > 50
    assert duckdb_documents(tmp_path / "out/w.duckdb") == expected
    verified = cdc("verify", str(pipeline), "--json", cwd=tmp_path)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    (report,) = orjson.loads(verified.stdout)
    assert report["table"] == "views.order_docs" and report["state"] == "ok"
    assert report["source"]["count"] == len(expected)


def test_a_rename_updates_every_order_and_deletes_update_and_remove_documents(
    pg_db: str, redis_server: Any, tmp_path: Path
) -> None:
    name = f"views_{uuid.uuid4().hex[:8]}"
    setup(pg_db, customers=2, orders=0, items=0)
    with psycopg.connect(pg_db, autocommit=True) as conn:
        for order, customer in ((10, 1), (11, 1), (12, 1), (20, 2)):
            conn.execute("INSERT INTO orders VALUES (%s, %s, 'o')", (order, customer))
        for item, order in ((1, 10), (2, 10), (3, 11)):
            conn.execute("INSERT INTO order_items VALUES (%s, %s, 's', 1)", (item, order))
    pipeline = write_pipeline(tmp_path, pg_db, redis_server.url, name)
    listen = f"{LOOPBACK}:{free_port()}"
    pipeline.write_text(pipeline.read_text() + f"metrics: {{listen: '{listen}'}}\n")
    reader = ViewReader(pipeline)
    process = start_run(pipeline, tmp_path)
    log = tmp_path / "run.log"
    try:
        view = reader.config.views[0]
        # Every row applied (the snapshot's tables may be read in any order: an order read
        # before its customer is written again once the customer is read).
        joined = source_join(pg_db, view)
        wait_for(lambda: reader.documents() == joined, 120, 0.05, process, log)
        untouched = sum(1 for r in reader.records() if r.key == b'{"id":20}')

        def doc(order: int) -> dict[str, Any]:
            return reader.documents(positions=True).get(canonical_key({"id": order}), {})

        with psycopg.connect(pg_db, autocommit=True) as conn:
            conn.execute("UPDATE customers SET name = 'renamed' WHERE id = 1")
        renamed = [10, 11, 12]
        wait_for(
            lambda: all(doc(o)["customer"]["name"] == "renamed" for o in renamed),
            60,
            0.05,
            process,
            log,
        )
        assert doc(20)["customer"] == {"id": 2, "name": "c2"}
        assert sum(1 for r in reader.records() if r.key == b'{"id":20}') == untouched
        rename_pos = doc(10)["_positions"]["customer"]
        assert all(doc(o)["_positions"]["customer"] == rename_pos for o in renamed)

        with psycopg.connect(pg_db, autocommit=True) as conn:
            conn.execute("DELETE FROM order_items WHERE id = 2")
            conn.execute("DELETE FROM orders WHERE id = 11")
            conn.execute("INSERT INTO order_items VALUES (4, 12, 'new', 2)")
        wait_for(
            lambda: canonical_key({"id": 11}) not in reader.documents(), 60, 0.05, process, log
        )
        wait_for(lambda: [i["id"] for i in doc(12)["items"]] == [4], 60, 0.05, process, log)
        assert [i["id"] for i in doc(10)["items"]] == [1]
        last = [r for r in reader.records() if r.key == b'{"id":11}'][-2:]
        assert orjson.loads(last[0].value)["op"] == "d" and last[1].value is None
        wait_for(
            lambda: cached(pipeline, redis_server.url, name) == source_join(pg_db, view),
            60,
            0.1,
            process,
            log,
        )
        wait_for(lambda: sinks_caught_up(pipeline, tmp_path), 60, 0.5, process, log)
        url = f"http://{listen}/metrics"
        wait_for(lambda: _metrics(url).get("cdc_view_lag_records") == 0, 30, 0.2, process, log)
        _metrics_and_status_show_the_view_caught_up(pipeline, reader, _metrics(url))
    finally:
        code, _ = stop(process)
    assert code == 0, log.read_text()[-3000:]
    assert indexed(tmp_path / "out/search") == source_join(pg_db, view)
    (entry,) = orjson.loads(cdc("status", str(pipeline), "--json", cwd=tmp_path).stdout)["views"]
    assert (entry["state"], entry["reason"]) == (
        "not running",
        "no running process runs the source",
    )


def _metrics_and_status_show_the_view_caught_up(
    pipeline: Path, reader: ViewReader, found: dict[str, float]
) -> None:
    """Once the view has read every record of its tables (its lag metric 0, nothing written
    since), its counters equal what is in the log, and ``cdc status`` lists it caught up."""
    cwd = pipeline.parent
    report = orjson.loads(cdc("status", str(pipeline), "--json", cwd=cwd).stdout)
    name = report["pipeline"]
    ends = {t["topic"]: t["end_offsets"] for t in report["topics"]}
    inputs = [f"{name}.public.{t}" for t in ("orders", "customers", "order_items")]
    # One run, no compaction yet (a few records): every record was read once.
    assert found["cdc_view_records_total"] == sum(sum(ends[t].values()) for t in inputs)
    written = [r for r in reader.records() if r.value is not None]  # a delete's tombstone aside
    assert found["cdc_view_documents_total"] == len(written)
    read = [r for t in inputs for p in ends[t] for r in reader.log.read(t, int(p), 0, 10_000)]
    assert found["cdc_view_position"] == max(orjson.loads(r.pos)[0] for r in read if r.pos)
    (entry,) = report["views"]
    assert entry["view"] == "order_docs" and entry["topic"] == f"{name}.views.order_docs"
    assert (entry["documents"], entry["lag"], entry["behind"]) == (3, 0, {})  # 10, 12 and 20
    assert entry["position"] == found["cdc_view_position"]
    assert (entry["state"], entry["reason"]) == ("running", None)  # from the process's beat
    text = cdc("status", str(pipeline), cwd=cwd).stdout
    assert (
        f"view order_docs -> {name}.views.order_docs: running; 3 documents, 0 records behind "
        "its tables; "
        f"read up to source position {entry['position']}"
    ) in text, text


def test_an_on_column_the_table_lacks_stops_cdc_run_with_exit_2_and_its_path(
    pg_db: str, redis_server: Any, tmp_path: Path
) -> None:
    setup(pg_db, customers=1, orders=1, items=0)
    pipeline = write_pipeline(tmp_path, pg_db, redis_server.url, f"views_{uuid.uuid4().hex[:8]}")
    pipeline.write_text(pipeline.read_text().replace("{customer_id: id}", "{customer_no: id}"))
    assert cdc("validate", str(pipeline), cwd=tmp_path).returncode == 0  # no schemas known yet
    process = start_run(pipeline, tmp_path)
    assert process.wait(120) == 2
    assert (
        "views[0].embed[0].on.customer_no: public.orders has no column 'customer_no'"
        in (tmp_path / "run.log").read_text()
    )
