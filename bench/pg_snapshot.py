"""Initial snapshot throughput: a 1,000,000-row table into the embedded log, against COPY.

A throwaway PostgreSQL 15 cluster (``tests.services.postgres.LocalPostgres``) gets a table with an
int key and six mixed columns (text, numeric, timestamptz, jsonb, bool, int). The snapshot runs
through the real runtime: :class:`cdc.runtime.source_task.SourceTask` polls the snapshotting
PostgreSQL source and appends to :class:`cdc.log.embedded.EmbeddedLog`, committing each piece
with its progress. The clock runs from the task's start until every chunk is stored.

Baseline, in the same run: ``psql -c "COPY t TO STDOUT" > /dev/null``, the server's own limit for
reading the table out. Peak RSS is this process's (``resource.getrusage``), which holds the
source, the runtime and the log.

With ``--online`` it measures the watermark path instead: the pipeline starts streaming with
``snapshot: never``, then a ``cdc snapshot``-style request re-reads the table chunk by chunk
between watermarks (what an online re-snapshot, and the rest of a snapshot resumed after a
crash, run); the clock runs from the request until the source stores it as finished.

The figures end with one JSON line a metric (:mod:`bench.report`).

Usage: ``python bench/pg_snapshot.py [--rows N] [--workers W] [--chunk-rows C] [--online]``.
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import structlog

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script

from bench.report import Figures
from cdc.contracts.snapshot_offsets import progress
from cdc.contracts.source import SourceContext
from cdc.envelope.options import READABLE
from cdc.log.embedded import EmbeddedLog
from cdc.metrics.snapshot_report import request_finished
from cdc.runtime.pipeline import GC_THRESHOLDS
from cdc.runtime.source_task import SourceTask
from cdc.support.logging import configure
from connectors.postgres import PostgresSourceConfig, drop_replication_objects
from connectors.postgres.snapshot.signal import request_snapshot
from connectors.postgres.snapshot.source import SnapshottingPostgresSource
from tests.services.postgres import LocalPostgres

PIPELINE = "bench"
RELEASE_TIMEOUT_S = 30.0
TARGET_RATE = 150_000
TARGET_RSS_MB = 400

SCHEMA = """
CREATE TABLE t (
    id int PRIMARY KEY,
    name text NOT NULL,
    amount numeric(12, 2),
    created timestamptz,
    doc jsonb,
    active bool,
    qty int
)
"""
FILL = """
INSERT INTO t
SELECT g, 'customer ' || g, (g %% 100000) / 7.0, '2024-01-01'::timestamptz + g * interval '1 s',
       jsonb_build_object('k', g %% 10, 'tag', 't' || (g %% 7)), g %% 2 = 0, g %% 1000
FROM generate_series(1, %s) AS g
"""


def copy_baseline(pg: LocalPostgres, dsn: str) -> float:
    """Seconds ``psql -c "COPY t TO STDOUT" > /dev/null`` takes."""
    psql = shutil.which("psql") or str(pg.bin_dir / "psql")
    started = time.perf_counter()
    subprocess.run(
        [psql, dsn, "-X", "-q", "-c", "COPY t TO STDOUT"],
        stdout=subprocess.DEVNULL,
        check=True,
    )
    return time.perf_counter() - started


def snapshot(
    dsn: str, workers: int, chunk_rows: int, online: bool, schemas: bool = False
) -> tuple[float, float, int, dict[str, float]]:
    """Seconds the snapshot takes through the runtime, the CPU seconds this process spent on
    it (all threads), the rows it stored, and the CPU seconds by thread group (the log's writer,
    the snapshot readers, the rest); ``schemas``: under ``schemas.enable: true``."""
    directory = Path(tempfile.mkdtemp(prefix="cdc-bench-snapshot-"))
    log = EmbeddedLog(directory / "log")
    config = _config(dsn, workers, chunk_rows, online)
    stop = threading.Event()
    thread = threading.Thread(target=_task(config, log, schemas, stop).run, daemon=True)
    done: Callable[[], bool] = lambda: _done(log)  # noqa: E731
    if online:
        done = _start_online(config, log, thread)
    started = time.perf_counter()
    cpu_started = time.process_time()
    if not online:
        thread.start()
    split = ThreadCpu(thread)
    try:
        _wait_until(done, thread, split)
        took = time.perf_counter() - started
        cpu = time.process_time() - cpu_started
        rows = int((progress(log.source_offsets()) or {})["tables"]["public.t"]["rows"])
    finally:
        stop.set()
        thread.join(30)
        drop_when_released(config, dsn)
        log.close()
        shutil.rmtree(directory, ignore_errors=True)
    return took, cpu, rows, split.groups()


def _task(
    config: PostgresSourceConfig, log: EmbeddedLog, schemas: bool, stop: threading.Event
) -> SourceTask:
    """The runtime's source task of the snapshotting source, appending to ``log``."""
    logger = structlog.get_logger()
    options = READABLE.model_copy(update={"schemas_enable": schemas})
    context = SourceContext(pipeline=PIPELINE, log=log, logger=logger, envelope=options)
    return SourceTask(
        PIPELINE,
        log,
        lambda: SnapshottingPostgresSource(config, context),
        stop,
        logger,
        envelope_options=options,
    )


def _start_online(
    config: PostgresSourceConfig, log: EmbeddedLog, thread: threading.Thread
) -> Callable[[], bool]:
    """Start the task streaming, then request the re-snapshot; returns whether it finished."""
    thread.start()
    while not log.source_offsets():  # streaming: the slot exists and a position is stored
        time.sleep(0.05)
    request = request_snapshot(config, PIPELINE, "public.t", None)
    return lambda: request_finished(log.source_offsets(), request["id"])


def _config(dsn: str, workers: int, chunk_rows: int, online: bool) -> PostgresSourceConfig:
    return PostgresSourceConfig.model_validate(
        {
            "type": "postgres",
            "dsn": dsn,
            "tables": ["public.t"],
            "snapshot": "never" if online else "initial",
            "snapshot_workers": workers,
            "snapshot_chunk_rows": chunk_rows,
        }
    )


class ThreadCpu:
    """CPU seconds of this process's threads since it was made, by group: the source task's
    thread (``writer``: polls, appends, commits), the snapshot readers (``readers``), the
    rest (``other``). Sampled while the snapshot runs, as a reader's figures vanish with it."""

    def __init__(self, writer: threading.Thread) -> None:
        self._writer = writer
        self._start = self._read()
        self._last = dict(self._start)

    def sample(self) -> None:
        self._last.update(self._read())

    def groups(self) -> dict[str, float]:
        out = {"writer": 0.0, "readers": 0.0, "other": 0.0}
        for (tid, name), cpu in self._last.items():
            group = "readers" if name.startswith("snapshot-") else "other"
            if tid == self._writer.native_id:
                group = "writer"
            out[group] += cpu - self._start.get((tid, name), 0.0)
        return out

    @staticmethod
    def _read() -> dict[tuple[int | None, str], float]:
        tick = os.sysconf("SC_CLK_TCK")
        cpu = {}
        for t in threading.enumerate():
            try:
                fields = Path(f"/proc/self/task/{t.native_id}/stat").read_text().rsplit(")")[-1]
            except OSError:
                continue  # ended between the listing and the read
            utime, stime = fields.split()[11:13]
            cpu[(t.native_id, t.name)] = (int(utime) + int(stime)) / tick
        return cpu


def _wait_until(
    done: Callable[[], bool], thread: threading.Thread, split: ThreadCpu | None = None
) -> None:
    while not done():
        if split is not None:
            split.sample()
        if not thread.is_alive():
            raise SystemExit("the source task stopped before the snapshot finished")
        # The check is one small read of the log (microseconds); every 20 ms keeps the figure's
        # resolution at 0.5% of a 4 s run without taking CPU from it.
        time.sleep(0.02)


def drop_when_released(config: PostgresSourceConfig, dsn: str) -> None:
    """Drop the slot and publication once the slot is no longer in use.

    The walsender ends a moment after the source closes its connection, and the server refuses
    to drop a slot it still holds; ``drop_replication_objects`` waits for it, bounded. Still held
    after the wait: the drop raises that error, naming the pid.
    """
    drop_replication_objects(config, PIPELINE, release_wait_s=RELEASE_TIMEOUT_S)


def _done(log: EmbeddedLog) -> bool:
    entry = (progress(log.source_offsets()) or {}).get("tables", {}).get("public.t")
    if not entry:
        return False
    return sum(b - a + 1 for a, b in entry["done"]) == entry["chunks_total"]


def main() -> None:
    gc.set_threshold(*GC_THRESHOLDS)  # as `cdc run` does
    args = _arguments()
    configure("warning", json=True)
    with LocalPostgres(settings={"shared_buffers": "256MB"}) as pg:
        dsn = pg.dsn_for(dbname=pg.create_database("bench"))
        fill_table(dsn, args.rows)
        copy_s = min(copy_baseline(pg, dsn) for _ in range(2))
        took, cpu, rows, split = snapshot(
            dsn, args.workers, args.chunk_rows, args.online, args.schemas
        )
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    _report(args, rows, took, cpu, copy_s, rss_mb)
    by_thread = ", ".join(f"{k} {v / rows * 1e6:.1f}" for k, v in split.items())
    print(f"CPU by thread, us per row: {by_thread}")


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--chunk-rows", type=int, default=50_000)
    parser.add_argument("--online", action="store_true", help="the watermark path instead")
    parser.add_argument("--schemas", action="store_true", help="envelope schemas.enable: true")
    return parser.parse_args()


def fill_table(dsn: str, rows: int) -> None:
    """Table ``t`` of ``rows`` rows, vacuumed and analyzed."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
        conn.execute(FILL, (rows,))  # type: ignore[arg-type]
        conn.execute("VACUUM ANALYZE t")


def _report(
    args: argparse.Namespace, rows: int, took: float, cpu: float, copy_s: float, rss_mb: float
) -> None:
    """The figures as a table against the targets, then as JSON lines."""
    rate, copy_rate = rows / took, args.rows / copy_s
    print(
        f"{rows:,} rows, {args.workers} workers, {args.chunk_rows:,} rows per chunk, "
        f"cpus={os.cpu_count()}"
    )
    print(f"{'':<28}{'rows/s':>12}{'seconds':>10}")
    label = "online (watermarks)" if args.online else "snapshot into embedded log"
    print(f"{label:<28}{rate:>12,.0f}{took:>10.2f}")
    print(f"{'psql COPY t TO STDOUT':<28}{copy_rate:>12,.0f}{copy_s:>10.2f}")
    print(f"ratio to COPY: {rate / copy_rate:.2f}x")
    load = os.getloadavg()[0]
    print(f"CPU of this process: {cpu:.2f} s, {cpu / rows * 1e6:.1f} us per row; load {load:.1f}")
    verdict = "ok" if rate >= TARGET_RATE else "MISSED"
    print(f"target >= {TARGET_RATE:,} rows/s: {verdict}")
    verdict = "ok" if rss_mb < TARGET_RSS_MB else "MISSED"
    print(f"peak RSS {rss_mb:,.0f} MB (target < {TARGET_RSS_MB} MB): {verdict}")
    figures = Figures("pg_snapshot")
    kind = ("online_snapshot" if args.online else "snapshot") + ("_schemas" if args.schemas else "")
    figures.add(f"{kind}_rows_per_s", rate, copy_rate)  # baseline: psql COPY TO STDOUT
    figures.add(f"{kind}_cpu_us_per_row", cpu / rows * 1e6)
    figures.add(f"{kind}_peak_rss_mb", rss_mb)
    figures.emit()


if __name__ == "__main__":
    main()
