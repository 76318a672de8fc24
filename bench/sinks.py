"""Every sink applying the same changes from the embedded log, each beside its store's bulk path.

Runs each sink's benchmark one after another (``bench/sinks_<name>.py`` holds its details and
runs alone too) and prints one table: rows/s through the real sink task, the baseline's rows/s
(the store's own bulk path for the same rows), the ratio, rows per CPU-second and its ratio to
the baseline's (the steadier figure on a busy machine), and the target where the issue set one.
Usage: ``python bench/sinks.py [--changes N] [--sinks duckdb,redis,...]``.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.report import Figures, add_sink
from bench.sinks_duckdb import bench_duckdb
from bench.sinks_http import bench_http
from bench.sinks_iceberg import bench_iceberg
from bench.sinks_opensearch import bench_opensearch
from bench.sinks_postgres import bench_postgres
from bench.sinks_redis_search import bench_redis, bench_search
from cdc.runtime.pipeline import GC_THRESHOLDS
from cdc.support.logging import configure

BATCH = 5000  # the sink task's max_records, as each bench's default

#: Each sink's bench and its baseline, in the order printed.
BENCHES: dict[str, tuple[Callable[[int], dict[str, Any]], str]] = {
    "duckdb": (lambda n: bench_duckdb(n, BATCH), "DuckDB bulk insert of the same rows"),
    "postgres": (lambda n: bench_postgres(n, BATCH), "COPY of the same rows, same table"),
    "redis": (lambda n: bench_redis(n, BATCH), "pipelined SETs of the same keys and values"),
    "search": (lambda n: bench_search(n, BATCH), "Tantivy bulk add, one commit"),
    "opensearch": (lambda n: bench_opensearch(n, BATCH), "helpers.bulk of the same documents"),
    "http": (lambda n: bench_http(n, BATCH, 500), "the same signed bodies POSTed in a loop"),
    "iceberg": (lambda n: bench_iceberg(n, BATCH), "one Table.append of the same rows"),
}


def row(result: dict[str, Any], baseline: str) -> str:
    target = result.get("target_rows_per_s")
    goal = "" if target is None else f">= {target:,}/s {'ok' if result['target_met'] else 'MISSED'}"
    return (
        f"{result['sink']:<10} {result['sink_rows_per_s']:>10,}"
        f" {result['baseline_rows_per_s']:>12,}"
        f"  {result['ratio_to_baseline']:>6.3f}x  {result['sink_rows_per_cpu_s']:>10,}"
        f"  {result['cpu_ratio_to_baseline']:>6.3f}x  {goal:<22}  ({baseline})"
    )


def main() -> None:
    gc.set_threshold(*GC_THRESHOLDS)  # as `cdc run` does
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--changes", type=int, default=200_000)
    parser.add_argument("--sinks", default=",".join(BENCHES), help="comma-separated sink names")
    args = parser.parse_args()
    names = [name for name in args.sinks.split(",") if name]
    unknown = sorted(set(names) - set(BENCHES))
    if unknown:
        parser.error(f"unknown sinks {unknown}; known: {', '.join(BENCHES)}")
    configure(level="warning")
    results = []
    for name in names:
        bench, baseline = BENCHES[name]
        results.append((bench(args.changes), baseline))
        gc.collect()
    print(
        f"\n{args.changes:,} changes per sink, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    print(
        f"{'sink':<10} {'rows/s':>10} {'baseline/s':>12}  {'ratio':>7}  {'rows/cpu-s':>10}"
        f"  {'ratio':>7}  {'target':<22}  baseline"
    )
    figures = Figures("sinks")
    for result, baseline in results:
        print(row(result, baseline))
        add_sink(figures, result)
    figures.emit()


if __name__ == "__main__":
    main()
