"""How cost grows: one table per dimension, each grown with the others fixed.

Every measurement is a real ``cdc run`` (PostgreSQL source, embedded log) in a child process on
a throwaway PostgreSQL 15 (``LocalPostgres``, with ``pg_stat_statements``), read from outside
(``bench/scale_kit.py``): start-up (spawn to ``/readyz``), the snapshot, then a backlog committed
while the pipeline is stopped and streamed by a fresh process (its own start-up, CPU per row and
peak RSS). Each cost is printed with its growth from the first size: ``flat`` (within x1.3, the
noise of a shared machine), ``sublinear``, ``linear`` or ``WORSE`` than linear (a bug).

Dimensions (``--dimension``, repeatable; ``--sizes`` overrides the sizes of a single one):

- ``tables``: captured tables, 1, 100, 1,000 (``--table-rows`` each, a backlog of
  ``--stream-rows`` spread over them in 100-row transactions): start-up, snapshot, statements
  run on the server (the catalog queries), the schemas topic, the restart, CPU per streamed row;
- ``table_size``: a snapshot of 1M, 5M, 20M rows (rate and RSS should be flat);
- ``width``: 6, 50, 200 columns, ``--rows`` rows snapshotted then streamed;
- ``value``: one text value of 100 B, 10 kB, 1 MB (incompressible: TOASTed out of line), as many
  rows as fit ``--value-mb`` (at most ``--rows``); streamed as inserts, then updates that leave
  the value unchanged (the source fills it in);
- ``tx_size``: one transaction of 1k, 1M, 5M rows streamed (RSS should be flat);
- ``sinks``: 1, 4, 8 sinks (``--sink-type``) on one pipeline applying a ``--rows`` snapshot;
- ``soak``: ``--soak-minutes`` (30) of updates at ``--soak-rate`` (5,000) rows/s over 10,000 keys,
  RSS and the log's size sampled every ``--sample-s`` (60): the RSS slope is flat and the log's
  size stays bounded by compaction.

Usage: ``python bench/scale.py --dimension tables --sizes 1,100,1000``; ``--small`` takes the
reduced sizes of a shared machine. The figures end with one JSON line a metric
(:mod:`bench.report`).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script

from bench.procstat import load
from bench.report import Figures
from bench.scale_kit import table

#: Full sizes (the issue's) and the reduced ones of ``--small``.
SIZES: dict[str, tuple[list[int], list[int]]] = {
    "tables": ([1, 100, 1000], [1, 100, 1000]),
    "table_size": ([1_000_000, 5_000_000, 20_000_000], [100_000, 400_000, 1_600_000]),
    "width": ([6, 50, 200], [6, 50, 200]),
    "value": ([100, 10_000, 1_000_000], [100, 10_000, 1_000_000]),
    "tx_size": ([1_000, 1_000_000, 5_000_000], [1_000, 100_000, 1_000_000]),
    "sinks": ([1, 4, 8], [1, 4, 8]),
}
DIMENSIONS = [*SIZES, "soak"]


def run_dimension(
    name: str, dsn: str, sizes: list[int], args: argparse.Namespace
) -> list[dict[str, Any]]:
    """Every size of one dimension, each on fresh tables and a fresh log."""
    from bench import scale_dims

    one: Callable[[str, Path, int, argparse.Namespace], dict[str, Any]] = getattr(scale_dims, name)
    rows = []
    for size in sizes:
        scale_dims.reset(dsn)
        with tempfile.TemporaryDirectory(prefix=f"cdc-scale-{name}-") as tmp:
            row = {"size": size} | one(dsn, Path(tmp), size, args)
        print(
            f"  {name} {size:,}: "
            + ", ".join(f"{k} {v:,.2f}" for k, v in row.items() if k != "size")
            + f"  ({load()})",
            flush=True,
        )
        rows.append(row)
    return rows


def main(args: argparse.Namespace) -> None:
    from bench import scale_dims
    from tests.services.postgres import LocalPostgres

    figures = Figures("scale")
    settings = {"shared_preload_libraries": "pg_stat_statements", "shared_buffers": "256MB"}
    with LocalPostgres(settings=settings) as pg:
        dsn = pg.dsn_for(dbname=pg.create_database("scale"))
        # In a schema of its own: every size drops and makes the public schema again.
        scale_dims.execute(dsn, "CREATE SCHEMA stats")
        scale_dims.execute(dsn, "CREATE EXTENSION pg_stat_statements SCHEMA stats")
        print(f"PostgreSQL at {pg.port}; {load()}")
        for name in args.dimension:
            if name == "soak":
                scale_dims.soak(dsn, args, figures)
                continue
            sizes = args.sizes or SIZES[name][1 if args.small else 0]
            rows = run_dimension(name, dsn, sizes, args)
            columns = scale_dims.COLUMNS[name]
            table(f"{name} ({load()})", name, rows, list(columns))
            for row in rows:
                for column, metric in columns.items():
                    figures.add(f"{name}_{row['size']}_{metric}", row[column])
    figures.emit()


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--dimension", action="append", choices=DIMENSIONS, help="default: all")
    parser.add_argument("--sizes", type=_sizes, help="comma-separated, for one --dimension")
    parser.add_argument("--small", action="store_true", help="the reduced sizes")
    parser.add_argument("--rows", type=int, default=100_000, help="width, value, sinks")
    parser.add_argument("--table-rows", type=int, default=10, help="tables: rows per table")
    parser.add_argument("--stream-rows", type=int, default=20_000, help="tables: the backlog")
    parser.add_argument("--value-mb", type=int, default=200, help="value: bytes per size")
    parser.add_argument("--sink-type", choices=["duckdb", "jsonl"], default="duckdb")
    parser.add_argument("--soak-minutes", type=float, default=30.0)
    parser.add_argument("--soak-rate", type=int, default=5_000, help="rows/s")
    parser.add_argument("--sample-s", type=float, default=60.0, help="soak: RSS every ...")
    args = parser.parse_args(argv)
    args.dimension = args.dimension or DIMENSIONS
    if args.sizes and len(args.dimension) != 1:
        parser.error("--sizes needs exactly one --dimension")
    return args


def _sizes(text: str) -> list[int]:
    sizes = [int(s.replace("_", "")) for s in text.split(",") if s]
    if not sizes or sizes != sorted(sizes) or sizes[0] <= 0:
        raise argparse.ArgumentTypeError("positive sizes, smallest first: 1,100,1000")
    return sizes


if __name__ == "__main__":
    main(parse())
