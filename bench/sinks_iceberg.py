"""Iceberg sink throughput and commit latency against pyiceberg's own bulk path.

The workload is the DuckDB bench's (:mod:`bench.sinks_duckdb`, so the sinks are compared on the
same data): N changes of a 6-column table, about 80% inserts, 15% updates and 5% deletes (each
delete followed by its tombstone), appended to a real :class:`~cdc.log.embedded.EmbeddedLog`
with the table's schema on the schema topic. The real :class:`~cdc.runtime.sink_task.SinkTask`
then applies them through the sink, ``current`` mode, into a SQLite catalog and a local
warehouse, one Iceberg commit per batch (``commit_interval_s: 0``): the position guard's scan
of the batch's keys, pyiceberg's ``upsert`` (copy-on-write) and the offsets in the snapshot
summary. Timed from start to the last committed offset; each commit's latency is timed too.

The baseline, in the same run and on the same disk: every change's row (a delete's key) as one
pyarrow table appended to a fresh table of the same typed columns by one ``Table.append``: no
guard, no upsert, no offsets: pyiceberg's own bulk path (building the pyarrow table from typed
Python rows is counted; decoding the envelope is not).

CPU per row is this process's. Usage: ``python bench/sinks_iceberg.py [--changes N] [--batch B]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import statistics
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

# Run as a script, this folder comes first on sys.path, and bench/sinks.py would shadow the
# sinks package: the repository root goes first.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa

from bench.report import Figures, add_sink, sink_result
from bench.sinks_duckdb import SCHEMA, changes, fill_log, run_sink
from cdc.contracts.events import ChangeEvent
from cdc.contracts.sink import SinkContext
from cdc.log.embedded import EmbeddedLog
from cdc.support.logging import configure
from sinks.iceberg import IcebergSink, IcebergSinkConfig
from sinks.iceberg.sink import open_catalog
from sinks.iceberg.tables import create


class TimedSink(IcebergSink):
    """The sink, with the seconds each of its commits took."""

    latencies: list[float] = []

    def commit(self) -> None:
        started = time.perf_counter()
        super().commit()
        TimedSink.latencies.append(time.perf_counter() - started)


def lake(root: Path, name: str) -> IcebergSinkConfig:
    catalog = {"type": "sql", "uri": f"sqlite:///{root}/catalog.db"}
    return IcebergSinkConfig(
        name=name, catalog=catalog, warehouse=str(root / "wh"), commit_interval_s=0
    )


def baseline(events: list[ChangeEvent], root: Path) -> tuple[float, float]:
    """Wall and CPU seconds of one ``append`` of every change's row into a fresh table."""
    config = lake(root, "baseline")
    catalog = open_catalog(config)
    catalog.create_namespace_if_not_exists("baseline")
    table = create(catalog, ("baseline", "orders"), SCHEMA, "append")
    arrow = pa.schema([f for f in table.schema().as_arrow() if not f.name.startswith("_cdc_")])
    rows = [_typed(e.after or e.key) for e in events]
    cpu, started = time.process_time(), time.perf_counter()
    # The hidden _cdc_ columns are optional: an append may leave them out.
    table.append(pa.Table.from_pylist(rows, schema=arrow))
    return time.perf_counter() - started, time.process_time() - cpu


def _typed(row: dict[str, Any]) -> dict[str, Any]:
    out = dict(row)
    if out.get("amount") is not None:
        out["amount"] = Decimal(out["amount"])
    if out.get("updated_at") is not None:
        out["updated_at"] = dt.datetime.fromisoformat(out["updated_at"])
    return out


def bench_iceberg(n: int, batch: int) -> dict[str, Any]:
    """Apply ``n`` changes through the sink task and the baseline; returns the figures."""
    events = changes(n)
    with tempfile.TemporaryDirectory(prefix="bench-iceberg-") as tmp:
        root = Path(tmp)
        log = EmbeddedLog(root / "log", durability="normal")
        records = fill_log(log, events)
        base_s, base_cpu = baseline(events, root / "base")
        del events  # a sink runner's heap holds one batch, not the workload
        gc.collect()
        config = lake(root / "lake", "lake")
        TimedSink.latencies = []

        def make(context: SinkContext) -> TimedSink:
            return TimedSink(config, context)

        sink_s, sink_cpu = run_sink(log, "lake", make, records, batch)
        log.close()
    latencies = sorted(TimedSink.latencies)
    return sink_result(
        "iceberg",
        n,
        (base_s, base_cpu),
        (sink_s, sink_cpu),
        records=records,
        batch=batch,
        commits=len(latencies),
        commit_p50_ms=round(statistics.median(latencies) * 1000, 1),
        commit_p99_ms=round(_percentile(latencies, 0.99) * 1000, 1),
    )


def _percentile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=5000, help="sink task max_records")
    args = parser.parse_args()
    configure(level="warning")
    r = bench_iceberg(args.changes, args.batch)
    print(
        f"Iceberg sink: {r['changes']:,} changes ({r['records']:,} records) in {r['sink_s']} s "
        f"through the sink task, one commit a batch of {r['batch']}: {r['sink_rows_per_s']:,} "
        f"rows/s, {r['sink_rows_per_cpu_s']:,} rows per CPU-second of this process"
    )
    print(
        f"commit latency over {r['commits']} commits: p50 {r['commit_p50_ms']} ms, "
        f"p99 {r['commit_p99_ms']} ms"
    )
    print(
        f"baseline, one Table.append of the same rows: {r['baseline_rows_per_s']:,} rows/s, "
        f"{r['baseline_rows_per_cpu_s']:,} rows per CPU-second"
    )
    print(
        f"ratio sink/baseline: {r['ratio_to_baseline']}; machine: {r['cpus']} CPUs, "
        f"load average {r['load_average_1m']} at the end"
    )
    figures = Figures("sinks_iceberg")
    add_sink(figures, r)
    figures.add("iceberg_commit_p50_ms", r["commit_p50_ms"])
    figures.add("iceberg_commit_p99_ms", r["commit_p99_ms"])
    figures.emit()


if __name__ == "__main__":
    main()
