"""Rebuild throughput: a sink built from the log (``cdc sink --rebuild --into``) against the
store's own bulk path for the same rows.

The workload and the baselines are the sink benches' (:mod:`sinks_duckdb`,
:mod:`sinks_redis_search`): N changes of a 6-column table (about 80% inserts, 15% updates, 5%
deletes with their tombstones) in a real :class:`~cdc.log.embedded.EmbeddedLog`. The rebuild is
the command's own path: the sink's :class:`~cdc.runtime.sink_task.SinkTask` over
:class:`~cdc.runtime.log_replay.ReplayLog` (every partition read from offset 0 to its end as of
the start, no consumer group), into a new DuckDB file and a new Redis key prefix, timed from the
start to the last batch flushed. The log is compacted first unless ``--no-compact``: a rebuild
reads a compacted log in practice (each key's latest record and the tombstones still kept).

Baselines, in the same run, over every change (as the sink benches): DuckDB's bulk insert of
the rows (``read_json`` / ``from_json``, the better of the two), redis-py pipelines of 100
``SET``/``DEL``. Rows/s are records read from the log per second for the rebuild, and rows per
second for the baselines. Also the same sink streaming the same compacted log through a
consumer group (the sink benches' ``run_sink``): the rebuild's reader against the consumer's.

Usage: ``python bench/rebuild.py [--changes N] [--batch B] [--only duckdb|redis]``.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Run as a script, this folder comes first on sys.path, and bench/sinks.py would shadow the
# sinks package: the repository root goes first.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.report import Figures
from bench.sinks_duckdb import PIPELINE, TABLE, TOPIC, baseline, changes, fill_log, run_sink
from bench.sinks_redis_search import redis_baseline, redis_cpu, redis_url
from cdc.contracts.sink import Sink, SinkContext
from cdc.log.embedded import EmbeddedLog
from cdc.runtime.log_replay import ReplayLog
from cdc.runtime.schemas import SchemaCatalog
from cdc.runtime.sink_task import SinkTask
from cdc.support.logging import configure, get_logger
from sinks.duckdb import DuckDBSink, DuckDBSinkConfig
from sinks.redis import RedisSink, RedisSinkConfig


def rebuild(
    log: EmbeddedLog,
    make: Callable[[SinkContext], Sink],
    batch: int,
    cpu: Callable[[], float] = time.process_time,
) -> tuple[float, float, int]:
    """Wall and CPU seconds of a rebuild into ``make``'s new store, and the records read."""
    stop = threading.Event()
    context = SinkContext(PIPELINE, "copy", [TABLE], SchemaCatalog(log, PIPELINE), get_logger())
    task = SinkTask(
        PIPELINE,
        "copy",
        ReplayLog(log, stop).as_log(),
        lambda: make(context),
        [TOPIC],
        stop,
        get_logger(),
        max_records=batch,
        poll_timeout_s=0.05,
    )
    started, cpu_started = time.perf_counter(), cpu()
    task.run()  # ends once every partition was read to its end and applied
    return time.perf_counter() - started, cpu() - cpu_started, task.records_applied


def filled(directory: Path, n: int, compact: bool) -> tuple[EmbeddedLog, int]:
    """The log of ``n`` changes, compacted if asked; returns it and the records it holds."""
    log = EmbeddedLog(directory / "log", durability="normal")
    fill_log(log, changes(n))
    if compact:
        log.compact()
    held = sum(t.record_count for t in log.topics() if t.name == TOPIC)
    return log, held


def bench_duckdb(n: int, batch: int, compact: bool, figures: Figures) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-rebuild-") as tmp:
        directory = Path(tmp)
        base = baseline(changes(n), directory)
        log, held = filled(directory, n, compact)
        config = DuckDBSinkConfig(name="copy", path=str(directory / "copy.duckdb"))
        wall, cpu, records = rebuild(log, lambda c: DuckDBSink(config, c), batch)
        other = DuckDBSinkConfig(name="stream", path=str(directory / "stream.duckdb"))
        stream = streamed(log, lambda c: DuckDBSink(other, c), batch)
        log.close()
    best = min(base["read_json_s"], base["from_json_s"])
    best_cpu = min(base["read_json_cpu_s"], base["from_json_cpu_s"])
    _report(figures, "duckdb", n, held, records, (wall, cpu), (best, best_cpu), stream)


def bench_redis(n: int, batch: int, compact: bool, figures: Figures) -> None:
    with redis_url() as url, tempfile.TemporaryDirectory(prefix="bench-rebuild-") as tmp:
        log, held = filled(Path(tmp), n, compact)
        config = RedisSinkConfig.model_validate(
            {"name": "copy", "type": "redis", "url": url, "key_prefix": "rebuild"}
        )
        measured = rebuild(log, functools.partial(RedisSink, config), batch, redis_cpu(url))
        other = config.model_copy(update={"key_prefix": "stream"})
        stream = streamed(log, functools.partial(RedisSink, other), batch, redis_cpu(url))
        log.close()
        base = redis_baseline(url, changes(n))
    wall, cpu, records = measured
    _report(figures, "redis", n, held, records, (wall, cpu), base, stream)


def streamed(
    log: EmbeddedLog,
    make: Callable[[SinkContext], Sink],
    batch: int,
    cpu: Callable[[], float] = time.process_time,
) -> tuple[float, float]:
    """Wall and CPU seconds of the same sink streaming the same log through a consumer group
    (:func:`bench.sinks_duckdb.run_sink`): what the rebuild's reader is compared with."""
    ends = sum(log.end_offsets(TOPIC).values())
    return run_sink(log, "stream", make, ends, batch, cpu)


def _report(
    figures: Figures,
    sink: str,
    n: int,
    held: int,
    records: int,
    measured: tuple[float, float],
    base: tuple[float, float],
    stream: tuple[float, float],
) -> None:
    (wall, cpu), (base_s, base_cpu), (stream_s, stream_cpu) = measured, base, stream
    print(
        f"{sink}: rebuilt from {held:,} records of the log ({n:,} changes before compaction) "
        f"in {wall:.2f} s: {records / wall:,.0f} records/s, {records / cpu:,.0f} per CPU-s; "
        f"bulk path over every change: {n / base_s:,.0f} rows/s, {n / base_cpu:,.0f} per CPU-s; "
        f"the sink streaming the same log: {records / stream_s:,.0f} records/s, "
        f"{records / stream_cpu:,.0f} per CPU-s"
    )
    figures.add(f"{sink}_rebuild_records_per_s", records / wall, n / base_s)
    figures.add(f"{sink}_rebuild_records_per_cpu_s", records / cpu, n / base_cpu)
    figures.add(f"{sink}_rebuild_vs_stream_records_per_cpu_s", records / cpu, records / stream_cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=300_000)
    parser.add_argument("--batch", type=int, default=5000, help="sink task max_records")
    parser.add_argument("--only", choices=["duckdb", "redis"])
    parser.add_argument("--no-compact", action="store_true", help="rebuild every change")
    args = parser.parse_args()
    configure(level="warning")
    figures = Figures("rebuild")
    runs: dict[str, Any] = {"duckdb": bench_duckdb, "redis": bench_redis}
    for name, run in runs.items():
        if args.only in (None, name):
            run(args.changes, args.batch, not args.no_compact, figures)
    print(f"(machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at the end)")
    figures.emit()


if __name__ == "__main__":
    main()
