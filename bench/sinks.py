"""Every sink applying the same changes from the embedded log, each beside its own baseline.

Runs the DuckDB, Redis and search benchmarks one after another (``bench/sinks_duckdb.py`` and
``bench/sinks_redis_search.py`` hold the details) and prints one table: rows/s through the real
sink task, the baseline's rows/s (DuckDB's own bulk insert, pipelined Redis SETs, Tantivy's own
bulk add), the ratio, rows per CPU-second and its ratio to the baseline's (the steadier figure
on a busy machine), and the target. Usage: ``python bench/sinks.py [--changes N]``.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.report import Figures, add_sink
from bench.sinks_duckdb import bench_duckdb
from bench.sinks_redis_search import bench_redis, bench_search
from cdc.runtime.pipeline import GC_THRESHOLDS


def row(result: dict[str, Any], baseline: str) -> str:
    return (
        f"{result['sink']:<8} {result['sink_rows_per_s']:>12,} {result['baseline_rows_per_s']:>12,}"
        f"  {result['ratio_to_baseline']:>6.2f}x  {result.get('sink_rows_per_cpu_s', 0):>10,}"
        f"  {result['cpu_ratio_to_baseline']:>6.2f}x"
        f"  >= {result['target_rows_per_s']:,}/s {'ok' if result['target_met'] else 'MISSED'}"
        f"  (baseline: {baseline})"
    )


def main() -> None:
    gc.set_threshold(*GC_THRESHOLDS)  # as `cdc run` does
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--changes", type=int, default=500_000)
    args = parser.parse_args()
    results = [
        (bench_duckdb(args.changes), "DuckDB bulk insert of the same rows"),
        (bench_redis(args.changes), "pipelined SETs of the same keys and values"),
        (bench_search(args.changes), "Tantivy bulk add, one commit"),
    ]
    print(
        f"\n{args.changes:,} changes per sink, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    print(
        f"{'sink':<8} {'rows/s':>12} {'baseline/s':>12}  {'ratio':>7}  {'rows/cpu-s':>10}"
        f"  {'ratio':>7}  target"
    )
    figures = Figures("sinks")
    for result, baseline in results:
        print(row(result, baseline))
        add_sink(figures, result)
    figures.emit()


if __name__ == "__main__":
    main()
