"""Benchmark: what filters cost the PostgreSQL stream (``python -m bench.pg_stream --filters``).

The same backlog (a ``--rows`` INSERT in one transaction, then as many rows updated in
10,000-row transactions) is streamed three times, each by its own child process from its own
slot created at the same point, into its own embedded log:

- ``plain``: the bench table as it is (the baseline);
- ``excluded``: ``columns: {exclude: [tags]}`` (the publication's column list leaves the array
  on the server);
- ``masked``: that, and ``mask: {name: hash}`` (HMAC-SHA256 of each row's ``name``).

It prints each run's rows/s and CPU µs per row, and the hash mask's own cost per row: the
masked run's CPU per row less the excluded run's. The JSON lines compare each filtered run with
the plain one.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from pathlib import Path
from typing import Any

import psycopg

from bench.pg_stream import DDL, INSERT, VARIANTS, execute, run_child
from bench.report import Figures

ORDER = ("plain", "excluded", "masked")


def prepare(dsn: str) -> None:
    """The bench table, and each variant's publication (its column list) and slot."""
    execute(dsn, DDL)
    for name in ORDER:
        variant = VARIANTS[name]
        execute(dsn, f"CREATE PUBLICATION {variant.pipeline}_pub FOR TABLE bench {variant.columns}")
        execute(
            dsn,
            "SELECT pg_create_logical_replication_slot(%s, 'pgoutput')",
            (f"{variant.pipeline}_slot",),
        )


def stream_all(dsn: str, tmp: Path, rows: int) -> dict[str, dict[str, Any]]:
    """Each variant's run over the backlog written since its last run."""
    return {name: run_child(dsn, tmp / name, rows, variant=name) for name in ORDER}


def report(phase: str, runs: dict[str, dict[str, Any]], figures: Figures) -> None:
    rate = {n: r["rows"] / r["seconds"] for n, r in runs.items()}
    cpu_us = {n: r["cpu_seconds"] / r["rows"] * 1e6 for n, r in runs.items()}
    for name in ORDER:
        print(
            f"{phase:<28} {name:<9} {rate[name]:>9,.0f} rows/s  "
            f"{cpu_us[name]:5.2f} µs CPU per row  ({rate[name] / rate['plain']:.2f}x plain)"
        )
    hash_us = cpu_us["masked"] - cpu_us["excluded"]
    print(f"{phase:<28} hash mask: {hash_us:+.2f} µs CPU per row (masked less excluded)")
    for name in ("excluded", "masked"):
        figures.add(f"{phase}_{name}_rows_per_s", rate[name], rate["plain"])
        figures.add(f"{phase}_{name}_cpu_us_per_row", cpu_us[name], cpu_us["plain"])
    figures.add(f"{phase}_hash_mask_cpu_us_per_row", hash_us)


def main(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.services.postgres import LocalPostgres

    rows = args.rows
    figures = Figures("pg_filters")
    with contextlib.ExitStack() as stack:
        pg = stack.enter_context(LocalPostgres(settings={"synchronous_commit": "on"}))
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="cdc-bench-")))
        dsn = pg.dsn_for(dbname=pg.create_database("bench"))
        prepare(dsn)
        print(f"PostgreSQL at {pg.port}; {rows:,} rows per workload; each variant its own slot")
        execute(dsn, INSERT, (1, rows))
        report("insert_one_tx", stream_all(dsn, tmp, rows), figures)
        with psycopg.connect(dsn, autocommit=True) as conn:
            for low in range(1, rows + 1, 10_000):
                conn.execute(
                    "UPDATE bench SET amount = amount + 1, name = name || 'x'"
                    " WHERE id BETWEEN %s AND %s",
                    (low, low + 9_999),
                )
        report("update_10k_tx", stream_all(dsn, tmp, rows), figures)
    figures.emit()
