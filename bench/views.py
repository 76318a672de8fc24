"""Live join views: how long after a customer's rename commits every one of their orders'
documents is in the view topic.

Starts a throwaway PostgreSQL 15 and ``cdc run`` (a process of its own, as a user runs it) on
the embedded log, with the view ``order_docs`` (orders with their customer and items embedded)
and no sink. Then, one rename at a time, it commits ``UPDATE customers SET name = ...`` and
polls the log (read-only, from this process) until

- **row** (the baseline: the pipeline's own latency into the log): the customer's change is in
  ``<pipeline>.public.customers``;
- **view**: the view topic holds a new document for each of that customer's orders.

Both are timed from the same commit, so they see the same load; the first 20 renames (the log's
start-up after the initial load) are not measured. Prints p50 and p99 of each in ms, the CPU
of ``cdc run`` during the renames, its peak RSS (VmHWM: the source, the log and the view task
together; the view's state used to be most of it), then the bench JSON lines
(:mod:`bench.report`).
Run: ``.venv/bin/python -m bench.views [--customers 200 --orders-per 50 --renames 200]``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

# Run as a script (python bench/NAME.py, as the README gives it), the repository root goes first
# on sys.path so that bench, cdc and tests import.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.report import Figures
from cdc.log.base import TopicPartition
from cdc.log.embedded.log import EmbeddedLog
from cdc.support.wait import wait_until

NAME = "viewbench"
POLL_S = 0.0005  # between two reads of the log: fine enough for ms figures, light on 2 cores
WARMUP = 20  # renames before the measured ones


def pipeline_file(directory: Path, dsn: str) -> Path:
    path = directory / "views.yaml"
    path.write_text(
        f"""version: 1
name: {NAME}
source:
  type: postgres
  dsn: '{dsn}'
  tables: [public.customers, public.orders, public.order_items]
log: {{type: embedded, path: '{directory / "log"}'}}
views:
  - name: order_docs
    root: public.orders
    embed:
      - {{field: customer, from: public.customers, on: {{customer_id: id}}}}
      - {{field: items, from: public.order_items, on: {{id: order_id}}, many: true}}
"""
    )
    return path


def load(conn: psycopg.Connection[Any], customers: int, orders_per: int) -> None:
    conn.execute(
        "CREATE TABLE customers (id int PRIMARY KEY, name text);"
        "CREATE TABLE orders (id int PRIMARY KEY, customer_id int, note text);"
        "CREATE TABLE order_items (id int PRIMARY KEY, order_id int, sku text, qty int);"
    )
    conn.execute(
        "INSERT INTO customers SELECT g, 'c' || g FROM generate_series(1, %s) g", (customers,)
    )
    orders = customers * orders_per
    conn.execute(
        "INSERT INTO orders SELECT g, 1 + g %% %s, 'o' FROM generate_series(1, %s) g",
        (customers, orders),
    )
    conn.execute(
        "INSERT INTO order_items SELECT g, 1 + g %% %s, 's', 1 FROM generate_series(1, %s) g",
        (orders, 2 * orders),
    )


def end(log: EmbeddedLog, topic: str) -> int:
    return sum(log.end_offsets(topic).values())


def caught_up(log: EmbeddedLog) -> bool:
    """The view has read every record of its tables."""
    committed = log.committed_offsets(f"{NAME}.view.order_docs")
    for table in ("customers", "orders", "order_items"):
        topic = f"{NAME}.public.{table}"
        names = {t.name for t in log.topics()}
        if topic not in names:
            return False
        for partition, at in log.end_offsets(topic).items():
            if committed.get(TopicPartition(topic, partition), 0) < at:
                return False
    return True


def rename(
    conn: psycopg.Connection[Any], log: EmbeddedLog, customer: int, orders: int
) -> tuple[float, float]:
    """ms from the rename's commit to its row in the log, and to its orders' documents."""
    rows, docs = end(log, f"{NAME}.public.customers"), end(log, f"{NAME}.views.order_docs")
    conn.execute("UPDATE customers SET name = name || 'x' WHERE id = %s", (customer,))
    started = time.perf_counter()
    row_at = None
    while True:
        if row_at is None and end(log, f"{NAME}.public.customers") > rows:
            row_at = time.perf_counter()
        if end(log, f"{NAME}.views.order_docs") >= docs + orders:
            view_at = time.perf_counter()
            break
        time.sleep(POLL_S)
    row_at = row_at if row_at is not None else view_at
    return (row_at - started) * 1000, (view_at - started) * 1000


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def run(
    customers: int, orders_per: int, renames: int
) -> tuple[list[float], list[float], float, int]:
    from tests.services.postgres import LocalPostgres

    with contextlib.ExitStack() as stack:
        pg = stack.enter_context(LocalPostgres())
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="cdc-views-")))
        dsn = pg.dsn_for(dbname=pg.create_database("bench"))
        conn = stack.enter_context(psycopg.connect(dsn, autocommit=True))
        load(conn, customers, orders_per)
        path = pipeline_file(tmp, dsn)
        output = (tmp / "run.log").open("w")
        proc = subprocess.Popen(
            [sys.executable, "-m", "cdc.cli.main", "run", str(path)],
            stdout=output,
            stderr=subprocess.STDOUT,
        )
        stack.callback(proc.wait, 15)
        stack.callback(proc.terminate)
        wait_until(lambda: (tmp / "log").exists(), 60, 0.1, describe="the log created")
        log = stack.enter_context(EmbeddedLog(tmp / "log"))
        # The snapshot's end first: between two of its chunks the view can have read every
        # record written so far, and renames measured then waited behind the rest of the
        # snapshot (at 50k orders that made the p99 ~0.6-1 s and the CPU a document 2.7 ms).
        finished = (tmp / "run.log").read_text
        wait_until(lambda: '"snapshot.finished"' in finished(), 600, 0.2, describe="snapshot")
        wait_until(lambda: caught_up(log), 300, 0.2, describe="the view caught up")
        # The first commits after the initial load checkpoint its WAL (hundreds of ms, in the
        # source's commits as in the view's): a start-up cost, not a rename's, so not measured.
        for n in range(WARMUP):
            rename(conn, log, 1 + n % customers, orders_per)
        cpu_before = _cpu(proc.pid)
        row_ms, view_ms = [], []
        for n in range(WARMUP, WARMUP + renames):
            row, view = rename(conn, log, 1 + n % customers, orders_per)
            row_ms.append(row)
            view_ms.append(view)
        return row_ms, view_ms, _cpu(proc.pid) - cpu_before, _peak_rss_kb(proc.pid)


def _cpu(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid`` so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def _peak_rss_kb(pid: int) -> int:
    """Peak resident set (VmHWM, kB) of process ``pid`` so far, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--customers", type=int, default=200)
    parser.add_argument("--orders-per", type=int, default=50, help="orders of each customer")
    parser.add_argument("--renames", type=int, default=200)
    args = parser.parse_args()
    row_ms, view_ms, cpu, rss_kb = run(args.customers, args.orders_per, args.renames)
    figures = Figures("views")
    for label, values in (("row in the log", row_ms), ("view documents", view_ms)):
        print(
            f"{label:15} p50 {percentile(values, 50):7.2f} ms  p99 {percentile(values, 99):7.2f} ms"
        )
    docs = args.renames * args.orders_per
    each = cpu / docs * 1e6
    print(f"cdc run CPU during the renames: {cpu:.2f} s for {docs} documents ({each:.0f} us each)")
    print(f"cdc run peak RSS (source, log and view task): {rss_kb / 1024:.0f} MB")
    for p in (50, 99):
        figures.add(f"rename_to_documents_p{p}_ms", percentile(view_ms, p), percentile(row_ms, p))
    figures.emit()


if __name__ == "__main__":
    main()
