"""Live join views through ``cdc run`` on PostgreSQL: orders with their customer and their
items embedded, in the view topic, Redis and DuckDB.

A random workload over the three tables with two SIGKILLs of ``cdc run``, each once the view
is provably mid-work, must end with the view equal to the same join run on the source (and
``cdc verify`` saying so); a customer's rename updates every one of their orders; an item's and
an order's delete update and delete their documents. Every wait is on a condition.
"""

from __future__ import annotations

import random
import signal
import threading
import uuid
from pathlib import Path
from typing import Any

import duckdb
import orjson
import psycopg
from psycopg.rows import dict_row

from cdc.config.pipeline import load
from cdc.config.views import ViewConfig
from cdc.log.factory import open_log
from cdc.views.join import Key, canonical_key, join_rows
from sinks.redis import RedisSinkConfig, RedisSinkPlugin
from sinks.search import SearchSinkConfig, SearchSinkPlugin
from tests.e2e.cli_helpers import cdc, start_run, stop, wait_for

DDL = """
CREATE TABLE public.customers (id int PRIMARY KEY, name text NOT NULL);
CREATE TABLE public.orders (id int PRIMARY KEY, customer_id int, note text);
CREATE TABLE public.order_items (id int PRIMARY KEY, order_id int, sku text, qty int);
"""
VIEW = """
views:
  - name: order_docs
    root: public.orders
    embed:
      - {field: customer, from: public.customers, on: {customer_id: id}}
      - {field: items, from: public.order_items, on: {id: order_id}, many: true}
"""


def setup(dsn: str, customers: int, orders: int, items: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(DDL)
        for n in range(1, customers + 1):
            conn.execute("INSERT INTO customers VALUES (%s, %s)", (n, f"c{n}"))
        for n in range(1, orders + 1):
            conn.execute("INSERT INTO orders VALUES (%s, %s, 'x')", (n, 1 + n % customers))
        for n in range(1, items + 1):
            conn.execute("INSERT INTO order_items VALUES (%s, %s, 's', 1)", (n, 1 + n % orders))


def write_pipeline(tmp_path: Path, dsn: str, redis_url: str, name: str) -> Path:
    path = tmp_path / "views.yaml"
    path.write_text(
        f"version: 1\nname: {name}\nsource:\n  type: postgres\n  dsn: '{dsn}'\n"
        "  tables: [public.customers, public.orders, public.order_items]\n"
        "  status_interval_s: 1\n"
        f"log: {{type: embedded, path: '{tmp_path / 'log'}'}}\n"  # this test reads it too
        f"{VIEW}"
        "sinks:\n"
        f"  - {{name: cache, type: redis, url: '{redis_url}', key_prefix: {name},"
        " tables: [views.order_docs]}\n"
        "  - {name: warehouse, type: duckdb, path: out/w.duckdb, tables: [views.order_docs]}\n"
        "  - {name: search, type: search, path: out/search, tables: [views.order_docs]}\n"
    )
    return path


def source_join(dsn: str, view: ViewConfig) -> dict[Key, dict[str, Any]]:
    tables = {}
    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        for table in view.inputs():
            rows = conn.execute(f"SELECT * FROM {table}").fetchall()
            tables[table] = [({"id": r["id"]}, dict(r)) for r in rows]
    return join_rows(view, tables)


class ViewReader:
    """The view topic's current documents, read from the embedded log beside ``cdc run``."""

    def __init__(self, pipeline: Path) -> None:
        self.config = load(pipeline)
        self.topic = f"{self.config.name}.views.order_docs"
        self.log = open_log(self.config)

    def records(self) -> list[Any]:
        if self.topic not in {t.name for t in self.log.topics()}:
            return []
        end = self.log.end_offsets(self.topic)[0]
        return self.log.read(self.topic, 0, 0, end + 1)

    def documents(self, positions: bool = False) -> dict[Key, dict[str, Any]]:
        docs: dict[Key, dict[str, Any]] = {}
        for record in self.records():
            key = canonical_key(orjson.loads(record.key))
            after = None if record.value is None else orjson.loads(record.value)["after"]
            if after is None:
                docs.pop(key, None)
            else:
                if not positions:
                    after.pop("_positions")
                docs[key] = after
        return docs


def cached(pipeline: Path, redis_url: str, name: str) -> dict[Key, dict[str, Any]]:
    config = RedisSinkConfig(name="cache", type="redis", url=redis_url, key_prefix=name)
    rows = RedisSinkPlugin.read_rows(config, "views", "order_docs", key_columns=["id"])
    out = {}
    for key, row in rows:
        row.pop("_positions", None)
        out[canonical_key(key)] = row
    return out


class Workload(threading.Thread):
    """Random small transactions over the three tables until stopped."""

    def __init__(self, dsn: str, seed: int) -> None:
        super().__init__(daemon=True)
        self.dsn, self.rng = dsn, random.Random(seed)
        self.stop_event = threading.Event()
        self.count = 0
        self.next_id = 10_000

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stop_event.is_set():
                with conn.transaction():
                    for _ in range(self.rng.randrange(1, 4)):
                        self._change(conn)
                self.count += 1
                self.stop_event.wait(0.004)  # a steady trickle, not a burst the kill misses

    def _change(self, conn: psycopg.Connection[Any]) -> None:
        rng, roll = self.rng, self.rng.random()
        customer = rng.randrange(1, 30)
        order = rng.randrange(1, self.next_id - 9_900)
        self.next_id += 1
        if roll < 0.2:
            conn.execute(
                "UPDATE customers SET name = %s WHERE id = %s", (f"n{rng.random()}", customer)
            )
        elif roll < 0.3:
            conn.execute(
                "INSERT INTO customers VALUES (%s, 'new')"
                " ON CONFLICT (id) DO UPDATE SET name = 'again'",
                (customer,),
            )
        elif roll < 0.45:
            conn.execute(
                "INSERT INTO orders VALUES (%s, %s, 'o')", (self.next_id - 9_900, customer)
            )
        elif roll < 0.55:
            conn.execute("UPDATE orders SET customer_id = %s WHERE id = %s", (customer, order))
        elif roll < 0.62:
            conn.execute("DELETE FROM orders WHERE id = %s", (order,))
        elif roll < 0.8:
            conn.execute("INSERT INTO order_items VALUES (%s, %s, 'i', 1)", (self.next_id, order))
        elif roll < 0.9:
            conn.execute(
                "UPDATE order_items SET order_id = %s, qty = qty + 1 WHERE id IN "
                "(SELECT id FROM order_items ORDER BY random() LIMIT 1)",
                (order,),
            )
        else:
            conn.execute(
                "DELETE FROM order_items WHERE id IN "
                "(SELECT id FROM order_items ORDER BY random() LIMIT 1)"
            )


def kill_mid_work(process: Any, workload: Workload, reader: ViewReader, tmp_path: Path) -> None:
    """SIGKILL once the view wrote more documents during this run, the workload still going."""
    target = len(reader.records()) + random.Random(workload.count).randint(50, 200)
    wait_for(lambda: len(reader.records()) >= target, 120, 0.05, process, tmp_path / "run.log")
    assert process.poll() is None and workload.is_alive(), "the kill would test nothing"
    stop(process, signal.SIGKILL)


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


def duckdb_documents(path: Path) -> dict[Key, dict[str, Any]]:
    with duckdb.connect(str(path), read_only=True) as conn:
        cursor = conn.execute('SELECT * FROM "views"."order_docs"')
        names = [d[0] for d in cursor.description]
        out = {}
        for values in cursor.fetchall():
            row = dict(zip(names, values, strict=True))
            for column in ("_positions", "__cdc_position", "__cdc_sequence"):
                row.pop(column)
            for field in ("customer", "items"):
                row[field] = None if row[field] is None else orjson.loads(row[field])
            out[canonical_key({"id": row["id"]})] = row
        return out


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
    reader = ViewReader(pipeline)
    process = start_run(pipeline, tmp_path)
    log = tmp_path / "run.log"
    try:
        wait_for(lambda: len(reader.documents()) == 4, 120, 0.05, process, log)
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
        view = reader.config.views[0]
        wait_for(
            lambda: cached(pipeline, redis_server.url, name) == source_join(pg_db, view),
            60,
            0.1,
            process,
            log,
        )
    finally:
        code, _ = stop(process)
    assert code == 0, log.read_text()[-3000:]
    assert indexed(tmp_path / "out/search") == source_join(pg_db, view)


def indexed(path: Path) -> dict[Key, dict[str, Any]]:
    config = SearchSinkConfig(name="search", type="search", path=str(path))
    out = {}
    for _, row in SearchSinkPlugin.read_rows(config, "views", "order_docs"):
        row.pop("_positions", None)
        out[canonical_key({"id": row["id"]})] = row
    return out
