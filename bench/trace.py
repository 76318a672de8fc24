"""``cdc trace``'s source side: one row by its key against reading the table whole.

Starts a throwaway PostgreSQL 15 with one table of ``--rows`` rows (a masked column and a row
filter, as a trace applies them), then reads one key's row ``--keys`` times each way, alternating:

- **lookup** (ours): the PostgreSQL source's ``read_key`` (``connectors/postgres/snapshot/
  key_row.py``): the table's filters and masks, the key as a literal of its column's type, so
  the primary key's index serves it;
- **table read** (the baseline: what a trace without a key lookup does, as ``cdc verify``
  reads a source): the plugin's ``read_rows`` over the whole table, the key's row picked out.

Prints the median wall time of each in ms, and this process's CPU time per read (the server's
own CPU is not counted), then the bench JSON lines (:mod:`bench.report`). Run:
``.venv/bin/python -m bench.trace [--rows 200000] [--keys 5]``.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

# Run as a script (python bench/NAME.py, as the README gives it), the repository root goes first
# on sys.path so that bench, cdc and tests import.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.report import Figures
from connectors.postgres.config import PostgresSourceConfig
from connectors.postgres.plugin import PostgresSourcePlugin


def timed(read: Callable[[], Any]) -> tuple[float, float, Any]:
    """``(wall ms, CPU ms, result)`` of one read."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = read()
    return (time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000, result


def table_read(config: PostgresSourceConfig, key: int) -> Any:
    """The key's row picked out of the whole table (read to its end, as cdc trace reads it)."""
    match = None
    for found, row in PostgresSourcePlugin.read_rows(config, "public", "items"):
        if found["id"] == key:
            match = row
    return match


def run(rows: int, keys: int) -> dict[str, list[tuple[float, float]]]:
    from tests.services.postgres import LocalPostgres

    with contextlib.ExitStack() as stack:
        pg = stack.enter_context(LocalPostgres())
        dsn = pg.dsn_for(dbname=pg.create_database("bench"))
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE items (id int PRIMARY KEY, label text, secret text)")
            conn.execute(
                "INSERT INTO items SELECT g, 'label ' || g, md5(g::text)"
                " FROM generate_series(1, %s) g",
                (rows,),
            )
            conn.execute("VACUUM ANALYZE items")
        entry = {"name": "public.items", "mask": {"secret": "redact"}, "where": "id > 0"}
        config = PostgresSourceConfig.model_validate(
            {"type": "postgres", "dsn": dsn, "tables": [entry]}
        )
        took: dict[str, list[tuple[float, float]]] = {"lookup": [], "table_read": []}
        for n in range(keys):
            key = rows // 2 + n
            wall, cpu, found = timed(
                lambda k=key: PostgresSourcePlugin.read_key(config, "public", "items", {"id": k})
            )
            assert found[0] is not None and found[0]["secret"] == "***"
            took["lookup"].append((wall, cpu))
            wall, cpu, row = timed(lambda k=key: table_read(config, k))
            assert row == found[0]
            took["table_read"].append((wall, cpu))
        return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rows", type=int, default=200_000, help="rows in the table")
    parser.add_argument("--keys", type=int, default=5, help="keys read each way")
    args = parser.parse_args()
    took = run(args.rows, args.keys)
    figures = Figures("trace")
    medians = {}
    for mode, samples in took.items():
        wall = statistics.median(w for w, _ in samples)
        cpu = statistics.median(c for _, c in samples)
        medians[mode] = (wall, cpu)
        print(f"{mode}: median {wall:.1f} ms wall, {cpu:.1f} ms CPU (this process) a read")
    (ours, ours_cpu), (base, base_cpu) = medians["lookup"], medians["table_read"]
    figures.add(f"source_row_{args.rows}_rows_ms", round(ours, 2), round(base, 2))
    figures.add(f"source_row_{args.rows}_rows_cpu_ms", round(ours_cpu, 2), round(base_cpu, 2))
    figures.emit()


if __name__ == "__main__":
    main()
