"""PostgreSQL sink throughput against ``COPY`` of the same rows into the same table.

The workload is the DuckDB bench's (:mod:`bench.sinks_duckdb`, so the sinks are compared on the
same data): N changes of a 6-column table, about 80% inserts, 15% updates and 5% deletes (each
delete followed by its tombstone), appended to a real :class:`~cdc.log.embedded.EmbeddedLog`
with the table's schema on the schema topic. The real :class:`~cdc.runtime.sink_task.SinkTask`
then applies them to a PostgreSQL database (poll, decode, write, flush: ``COPY`` into a staging
table, ``INSERT ... ON CONFLICT`` guarded by source position, deletes remembered, the offsets in
the same transaction; then the consumer offsets), timed from start to the last committed offset.

The baseline, in the same run and on the same server: every change's row (a delete's key)
written by one text ``COPY`` into a fresh table of the same typed columns and key, one
transaction, no guard and no offsets: the store's own bulk path.

CPU per row is this process's (the server's backends are not counted, on either side).
The server is ``$CDC_BENCH_PG_DSN`` or a throwaway local cluster (``LocalPostgres``).

Usage: ``python bench/sinks_postgres.py [--changes N] [--batch B]``.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

# Run as a script, this folder comes first on sys.path, and bench/sinks.py would shadow the
# sinks package: the repository root goes first.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.report import Figures, add_sink, sink_result
from bench.sinks_duckdb import changes, fill_log, run_sink
from cdc.contracts.events import ChangeEvent
from cdc.log.embedded import EmbeddedLog
from cdc.support.logging import configure
from sinks.postgres import PostgresSink, PostgresSinkConfig

TARGET = 50_000
BASELINE_DDL = (
    "CREATE TABLE baseline.orders (id bigint PRIMARY KEY, customer text, qty integer, "
    "amount numeric(12,2), updated_at timestamp with time zone, paid boolean)"
)
COLUMNS = ("id", "customer", "qty", "amount", "updated_at", "paid")


@contextmanager
def server() -> Iterator[str]:
    """A database for one run: on ``$CDC_BENCH_PG_DSN``'s server, or a throwaway cluster."""
    given = os.environ.get("CDC_BENCH_PG_DSN")
    if given:
        yield given
        return
    from tests.services.postgres import LocalPostgres

    with LocalPostgres() as pg:
        yield pg.dsn_for(dbname=pg.create_database(f"bench_{uuid.uuid4().hex[:8]}"))


def baseline(events: list[ChangeEvent], dsn: str) -> tuple[float, float]:
    """Wall and CPU seconds one ``COPY`` into a fresh typed table takes for as many rows as
    there are changes (measured on the newest row of each key: the key allows one)."""
    rows = [e.after or e.key for e in events]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA baseline")
        conn.execute(BASELINE_DDL)
        # Rows of a key after its first would break the key: the last of each, as the sink keeps.
        latest = list({r["id"]: tuple(r.get(c) for c in COLUMNS) for r in rows}.values())
        cpu, started = time.process_time(), time.perf_counter()
        with (
            conn.transaction(),
            conn.cursor() as cur,
            cur.copy("COPY baseline.orders FROM STDIN") as copy,
        ):
            for row in latest:
                copy.write_row(row)
        # Per row copied (the newest of each key): the rate the same table takes rows at.
        scale = len(rows) / len(latest)
        return (time.perf_counter() - started) * scale, (time.process_time() - cpu) * scale


def bench_postgres(n: int = 500_000, batch: int = 5000) -> dict[str, Any]:
    """Apply ``n`` changes through the sink task and the baseline; returns the figures."""
    events = changes(n)
    with tempfile.TemporaryDirectory(prefix="bench-pg-") as tmp, server() as dsn:
        log = EmbeddedLog(Path(tmp) / "log", durability="normal")
        records = fill_log(log, events)
        base_s, base_cpu = baseline(events, dsn)
        del events  # a sink runner's heap holds one batch, not the workload
        gc.collect()
        config = PostgresSinkConfig(name="replica", dsn=dsn, schema="replica")
        sink_s, sink_cpu = run_sink(
            log, "replica", lambda context: PostgresSink(config, context), records, batch
        )
        log.close()
    return sink_result(
        "postgres", n, (base_s, base_cpu), (sink_s, sink_cpu), TARGET, records=records, batch=batch
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=500_000)
    parser.add_argument("--batch", type=int, default=5000, help="sink task max_records")
    args = parser.parse_args()
    configure(level="warning")
    r = bench_postgres(args.changes, args.batch)
    print(
        f"PostgreSQL sink: {r['changes']:,} changes ({r['records']:,} records) in {r['sink_s']} s "
        f"through the sink task, batches of {r['batch']}: {r['sink_rows_per_s']:,} rows/s, "
        f"{r['sink_rows_per_cpu_s']:,} rows per CPU-second of this process"
    )
    print(
        f"baseline, one COPY of the same rows: {r['baseline_rows_per_s']:,} rows/s, "
        f"{r['baseline_rows_per_cpu_s']:,} rows per CPU-second"
    )
    print(
        f"ratio sink/baseline: {r['ratio_to_baseline']} "
        f"(per CPU-second {r['cpu_ratio_to_baseline']}); machine: {r['cpus']} CPUs, "
        f"load average {r['load_average_1m']} at the end"
    )
    figures = Figures("sinks_postgres")
    add_sink(figures, r)
    figures.emit()


if __name__ == "__main__":
    main()
