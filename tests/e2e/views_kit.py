"""What the live join view tests share: the three tables, the pipeline file, the source's
join, the view's documents as the log, Redis, DuckDB and the search index hold them, and a
random workload over the three tables."""

from __future__ import annotations

import random
import signal
import threading
from pathlib import Path
from typing import Any

import duckdb
import orjson
import psycopg
from psycopg.rows import dict_row

from cdc.config.pipeline import load
from cdc.config.views import ViewConfig
from cdc.log.factory import open_log
from cdc.views.join import Key, canonical_key
from cdc.views.store import join_rows
from sinks.redis import RedisSinkConfig, RedisSinkPlugin
from sinks.search import SearchSinkConfig, SearchSinkPlugin
from tests.e2e.cli_helpers import status_json, stop, wait_for

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


def write_pipeline(
    tmp_path: Path,
    dsn: str,
    redis_url: str,
    name: str,
    log: str | None = None,
    local_sinks: bool = True,
) -> Path:
    """The pipeline file; ``log`` its ``log:`` section (default: embedded, at a path this
    process reads too); ``local_sinks``: the DuckDB and search sinks beside Redis's."""
    path = tmp_path / "views.yaml"
    log = log or f"{{type: embedded, path: '{tmp_path / 'log'}'}}"
    local = (
        "  - {name: warehouse, type: duckdb, path: out/w.duckdb, tables: [views.order_docs]}\n"
        "  - {name: search, type: search, path: out/search, tables: [views.order_docs]}\n"
    )
    path.write_text(
        f"version: 1\nname: {name}\nsource:\n  type: postgres\n  dsn: '{dsn}'\n"
        "  tables: [public.customers, public.orders, public.order_items]\n"
        "  status_interval_s: 1\n"
        f"log: {log}\n"
        f"{VIEW}"
        "sinks:\n"
        f"  - {{name: cache, type: redis, url: '{redis_url}', key_prefix: {name},"
        " tables: [views.order_docs]}\n"
        f"{local if local_sinks else ''}"
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
    """The view topic's records and current documents, read from the log beside ``cdc run``."""

    def __init__(self, pipeline: Path) -> None:
        self.config = load(pipeline)
        self.topic = f"{self.config.name}.views.order_docs"
        self.log = open_log(self.config)

    def records(self) -> list[Any]:
        """Every record, partition by partition (a key's records are in one, in order)."""
        if self.topic not in {t.name for t in self.log.topics()}:
            return []
        out: list[Any] = []
        for partition, end in self.log.end_offsets(self.topic).items():
            offset = 0
            while offset < end:
                chunk = self.log.read(self.topic, partition, offset, 5000)
                if not chunk:
                    break  # only transaction markers left (Kafka)
                out += chunk
                offset = chunk[-1].offset + 1
        return out

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
        self.paused = threading.Event()  # set: no transaction until it is cleared
        self.count = 0
        self.next_id = 10_000

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stop_event.is_set():
                if self.paused.is_set():
                    self.stop_event.wait(0.05)
                    continue
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


def indexed(path: Path) -> dict[Key, dict[str, Any]]:
    config = SearchSinkConfig(name="search", type="search", path=str(path))
    out = {}
    for _, row in SearchSinkPlugin.read_rows(config, "views", "order_docs"):
        row.pop("_positions", None)
        out[canonical_key({"id": row["id"]})] = row
    return out


def sinks_caught_up(pipeline: Path, cwd: Path) -> bool:
    """Every sink has consumed the view topic to its end (``cdc status --json``'s report)."""
    return all(s["lag"] == 0 for s in status_json(pipeline, cwd)["sinks"])
