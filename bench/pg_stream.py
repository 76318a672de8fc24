"""Benchmark: stream PostgreSQL changes through PostgresSource into the embedded log.

Starts a throwaway PostgreSQL 15 (``LocalPostgres``), then for each workload prints our rows/s
and ``pg_recvlogical``'s over the same changes with the same plugin options (a second slot
created at the same point; the server's own decoding limit), and their ratio:

- first, a steady 5,000 rows/s (100-row transactions every 20 ms) for commit-to-log latency,
  measured from the server's commit timestamp to the log commit, per transaction;
- a 500,000-row INSERT in one transaction committed while the source streams, for the latency
  of one big transaction: from its commit to the log commit of its last row;
- a 500,000-row INSERT in one transaction, committed before the stream starts;
- a 500,000-row UPDATE workload (50 transactions of 10,000 rows);
- a 1,000,000-row transaction, for the streaming process's peak RSS.

The last three read a backlog committed before the stream starts, the same WAL for us and for
``pg_recvlogical``: they measure throughput, and no commit-to-log latency applies to them (it
would be the time the backlog waited for the stream to start).

Each streaming run is a child process (``python -m bench.pg_stream child ...``), so its peak
RSS is its own. The child drives the source like the runtime's source task: poll ->
``to_records`` -> append -> store offsets -> commit -> ack.

The figures end with one JSON line a metric (:mod:`bench.report`).

Usage: ``python -m bench.pg_stream [--rows 500000] [--big 1000000] [--steady-s 20] [--schemas]
[--metrics] [--filters]`` (``--metrics``: the source task's metrics observer on, as with
``metrics.listen``; ``--filters``: the backlogs with a hashed and an excluded column against
none, :mod:`bench.pg_filters`).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import structlog

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script

from bench.report import Figures

PIPELINE = "bench"
SCHEMAS_ENV = "CDC_BENCH_SCHEMAS"
METRICS_ENV = "CDC_BENCH_METRICS"
TABLE = "public.bench"
DDL = (
    "CREATE TABLE bench (id int8 PRIMARY KEY, name text, amount numeric(12,2),"
    " created timestamptz, flag bool, tags text[])"
)
INSERT = (
    "INSERT INTO bench SELECT g, 'name-' || g, g * 1.25, now(), g %% 2 = 0, ARRAY['a', 'b']"
    " FROM generate_series(%s::int8, %s::int8) g"
)
#: The column list of ``--filters``' publications: every column but the excluded ``tags``.
FILTER_COLUMNS = "(id, name, amount, created, flag)"


# -- child: one streaming run ------------------------------------------------------------------


def child(args: argparse.Namespace) -> None:
    """Stream until ``args.rows`` events are committed to the log; print JSON figures."""
    from cdc.runtime.pipeline import GC_THRESHOLDS

    gc.set_threshold(*GC_THRESHOLDS)  # as `cdc run` does
    structlog.configure(  # warnings and up, on stderr: stdout carries the figures
        wrapper_class=structlog.make_filtering_bound_logger(30),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
    )
    log = open_bench_log(args.log)
    variant = VARIANTS[args.variant]
    source = _bench_source(args.dsn, log, variant)
    run = _Run(time.perf_counter(), time.process_time())
    log.claim_source()  # as the runtime's source task does, before the offsets
    source.open(log.source_offsets())
    log.ensure_topics([f"{variant.pipeline}.{TABLE}"])
    print("ready", flush=True)
    run.ready_ms = time.time() * 1000
    _stream(source, log, run, args.rows, time.monotonic() + args.timeout, variant.pipeline)
    seconds, cpu_seconds = time.perf_counter() - run.start, time.process_time() - run.cpu_start
    source.close()
    log.close()
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps(run.figures(seconds, cpu_seconds, peak_kb)))


@dataclass(frozen=True)
class Variant:
    """What a child captures of the bench table: its pipeline (slot and publication
    ``<pipeline>_slot``, ``<pipeline>_pub``) and its ``source.tables`` entry."""

    pipeline: str
    entry: Any = TABLE
    columns: str = ""  # the publication's column list, as the entry pushes it down


#: ``--filters`` (bench/pg_filters.py): every table entry on the same WAL, each its own slot.
VARIANTS = {
    "plain": Variant(PIPELINE),
    "excluded": Variant(
        f"{PIPELINE}x", {"name": TABLE, "columns": {"exclude": ["tags"]}}, FILTER_COLUMNS
    ),
    "masked": Variant(
        f"{PIPELINE}m",
        {"name": TABLE, "columns": {"exclude": ["tags"]}, "mask": {"name": "hash"}},
        FILTER_COLUMNS,
    ),
}
MASK_KEY = "bench-mask-key-0123456789abcdef"


def _bench_source(dsn: str, log: Any, variant: Variant) -> Any:
    """A PostgresSource of the bench table with ``cdc run``'s defaults."""
    from cdc.contracts.source import SourceContext
    from connectors.postgres import PostgresSource, PostgresSourceConfig

    config = PostgresSourceConfig.model_validate(
        # cdc run's defaults; the key only where a column is hashed
        {"type": "postgres", "dsn": dsn, "tables": [variant.entry]}
        | ({"mask_key": MASK_KEY} if variant.pipeline != PIPELINE else {})
    )
    context = SourceContext(
        pipeline=variant.pipeline,
        log=log,
        logger=structlog.get_logger(),
        envelope=_options(),
        write_records=True,  # as cdc run has it
    )
    return PostgresSource(config, context)


def _options() -> Any:
    """The envelope options of the run: the readable defaults, with ``schemas.enable: true``
    under ``--schemas`` (handed to the children through the environment)."""
    from cdc.envelope.options import READABLE

    return READABLE.model_copy(update={"schemas_enable": os.environ.get(SCHEMAS_ENV) == "1"})


def _observer() -> Any:
    """Under ``--metrics``: the source task's metrics observer, served on a loopback port (a
    scrape is not part of the cost measured), as ``cdc run`` with ``metrics.listen`` has it."""
    if os.environ.get(METRICS_ENV) != "1":
        return None
    from cdc.metrics import Telemetry
    from cdc.metrics.lag import LagClock

    telemetry = Telemetry(PIPELINE, "127.0.0.1:0", 300.0, structlog.get_logger(), list)
    return telemetry.source(LagClock())


def _stream(
    source: Any, log: Any, run: _Run, rows: int, deadline: float, pipeline: str = PIPELINE
) -> None:
    """Poll -> records -> append -> store offsets -> commit -> ack, as the source task does,
    until ``rows`` events are committed (or the deadline)."""
    from cdc.envelope import encode as envelope
    from cdc.metrics.lag import LagClock

    options = _options()
    observer = _observer()
    lag = LagClock()  # the source task feeds it once per batch, metrics or not
    tx = None
    while (run.rows < rows or tx is not None) and time.monotonic() < deadline:
        t0 = time.perf_counter()
        batch = source.poll(5000, 0.2)
        t1 = time.perf_counter()
        run.spent["source"] += t1 - t0
        if batch.events or batch.records:
            run.polled(batch)
        if batch.empty:
            lag.idle()
            continue
        tx = tx or log.begin()
        now_ms = int(time.time() * 1000)
        records = envelope.batch_records(batch.events, pipeline, now_ms, options)
        records += batch.records
        t2 = time.perf_counter()
        run.spent["encode"] += t2 - t1
        if records:
            tx.append(records)
        ts_ms = batch.events[-1].source.ts_ms if batch.events else batch.ts_ms
        if ts_ms is not None:
            lag.appended(ts_ms)
        if observer is not None:
            observer.appended(batch.events, batch.records, records, batch.record_ops)
        run.rows += len(batch.events) + len(batch.records)
        if batch.commit_offsets is not None:
            tx.store_offsets(batch.commit_offsets)
            run.commit(tx)
            tx = None
            if observer is not None:
                observer.committed(batch.commit_offsets, time.perf_counter() - t1)
            source.ack(batch.commit_offsets)
            run.acked()
        run.spent["log"] += time.perf_counter() - t2


@dataclass
class _Run:
    """What one streaming run measures (``start``: perf_counter, ``ready_ms``: wall clock)."""

    start: float
    cpu_start: float
    ready_ms: float = 0.0
    rows: int = 0
    # Commit timestamp of every transaction polled since the last log commit: a big transaction
    # spans many polls, and the poll that ends it may carry its commit alone, without events.
    pending: dict[Any, int] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)
    after_warmup: list[float] = field(default_factory=list)  # those WARMUP_S after ready
    commit_ms: list[float] = field(default_factory=list)  # the log's commit (fsync) alone
    slowest: list[tuple[float, float]] = field(default_factory=list)  # (ms, s after start)
    delivered: list[float] = field(default_factory=list)
    spent: dict[str, float] = field(  # where the time goes
        default_factory=lambda: {"source": 0.0, "encode": 0.0, "log": 0.0}
    )

    def polled(self, batch: Any) -> None:
        """Commit -> out of poll: the source's share of the latency. A batch of records tells
        its last transaction's commit time alone (``ts_ms``): one a batch, as the steady
        workload's transactions are."""
        out_ms = time.time() * 1000
        if batch.events:
            commits = {e.source.position: e.source.ts_ms for e in batch.events}
        else:
            commits = {} if batch.ts_ms is None else {batch.ts_ms: batch.ts_ms}
        self.delivered.extend(out_ms - t for p, t in commits.items() if p not in self.pending)
        self.pending.update(commits)

    def commit(self, tx: Any) -> None:
        t3 = time.perf_counter()
        tx.commit()
        self.commit_ms.append((time.perf_counter() - t3) * 1000)
        self.slowest.append((self.commit_ms[-1], t3 - self.start))

    def acked(self) -> None:
        """The pending transactions are in the log: their commit-to-log latencies."""
        done_ms = time.time() * 1000
        self.latencies.extend(done_ms - t for t in self.pending.values())
        self.after_warmup.extend(
            done_ms - t for t in self.pending.values() if t - self.ready_ms > WARMUP_S * 1000
        )
        self.pending.clear()

    def figures(self, seconds: float, cpu_seconds: float, peak_kb: int) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "seconds": seconds,
            "cpu_seconds": cpu_seconds,
            "peak_rss_mb": peak_kb / 1024,
            "latencies_ms": sorted(self.latencies),
            "after_warmup_ms": sorted(self.after_warmup),
            "spent_s": self.spent,
            "commit_ms": sorted(self.commit_ms),
            "delivered_ms": sorted(self.delivered),
            "slowest_commits": sorted(self.slowest, reverse=True)[:5],
        }


KAFKA_SCHEME = "kafka://"
BASELINE_SLOT = "baseline"
LIVE_FIRST_ID = 100_000_000  # the live big transaction's keys: apart from every other phase's
WARMUP_S = 3  # the steady phase's figures are printed with and without its first seconds


def open_bench_log(target: str) -> Any:
    """The log a child appends to: an embedded log directory, or ``kafka://host:port`` with
    ``?state=DIR``, the pipeline's state directory (the latest-image store)."""
    if target.startswith(KAFKA_SCHEME):
        from cdc.config.models import KafkaLogConfig
        from cdc.log.kafka import KafkaLog

        address, _, state = target[len(KAFKA_SCHEME) :].partition("?state=")
        config = KafkaLogConfig(type="kafka", bootstrap_servers=address)
        # The latest-image store a real pipeline keeps (its cost is part of the figure). Every
        # child is the same pipeline with the same store, as a restarted one is: a new store
        # is first rebuilt from the topics, which is no part of streaming.
        images = Path(state) if state else Path(tempfile.mkdtemp(prefix="bench-images-"))
        return KafkaLog(PIPELINE if state else f"{PIPELINE}_{os.getpid()}", config, images)
    from cdc.log.embedded import EmbeddedLog

    return EmbeddedLog(Path(target))


def run_child(
    dsn: str,
    log_dir: Path | str,
    rows: int,
    timeout: float = 600,
    on_ready: Any = None,
    variant: str = "plain",
) -> dict[str, Any]:
    """Run one streaming child; ``on_ready()`` runs once the child is streaming."""
    argv = [sys.executable, "-m", "bench.pg_stream", "child", "--dsn", dsn]
    argv += ["--log", str(log_dir), "--rows", str(rows), "--timeout", str(timeout)]
    argv += ["--variant", variant]
    # From the checkout's root: ``-m bench.pg_stream`` finds the package whatever the cwd.
    root = Path(__file__).resolve().parents[1]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=root) as child_process:
        assert child_process.stdout is not None
        ready = child_process.stdout.readline()
        assert ready.strip() == "ready", ready
        if on_ready is not None:
            on_ready()
        out = child_process.stdout.read()
    if child_process.returncode != 0:
        raise RuntimeError(f"bench child failed with exit code {child_process.returncode}")
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


# -- parent: server, workloads, baseline -------------------------------------------------------


def recvlogical(bin_dir: Path, dsn: str, slot: str, end_lsn: str) -> float:
    """Seconds ``pg_recvlogical`` takes to decode the slot up to ``end_lsn``."""
    start = time.perf_counter()
    subprocess.run(
        [
            str(bin_dir / "pg_recvlogical"),
            "-d",
            dsn,
            "--slot",
            slot,
            "--start",
            "--endpos",
            end_lsn,
            "-o",
            "proto_version=1",
            "-o",
            f"publication_names={PIPELINE}_pub",
            "-o",
            "messages=true",
            "-f",
            "/dev/null",
            "--no-loop",
        ],
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - start


def current_lsn(dsn: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        assert row is not None
        return str(row[0])


def execute(dsn: str, statement: str, params: tuple[Any, ...] = ()) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(statement, params)


def compare(
    name: str,
    metric: str,
    pg: Any,
    dsn: str,
    log_dir: Path | str,
    rows: int,
    figures: Figures,
) -> dict[str, Any]:
    """Our rate and pg_recvlogical's over the changes just written (a backlog: no latency)."""
    end = current_lsn(dsn)
    base_s = recvlogical(pg.bin_dir, dsn, BASELINE_SLOT, end)
    ours = run_child(dsn, log_dir, rows)
    ours_rate, base_rate = ours["rows"] / ours["seconds"], rows / base_s
    # Rows per CPU-second of the streaming process: what it would reach with a core of its own
    # (the wall-clock rate suffers when other work shares the machine's cores).
    cpu_rate = ours["rows"] / ours["cpu_seconds"]
    print(
        f"{name:<28} ours {ours_rate:>8,.0f} rows/s ({ours['seconds']:.2f} s, "
        f"{cpu_rate:,.0f} rows per CPU-s)   "
        f"pg_recvlogical {base_rate:>8,.0f} rows/s ({base_s:.2f} s)   "
        f"ratio {ours_rate / base_rate:.2f}x   peak RSS {ours['peak_rss_mb']:.0f} MB   "
        + " ".join(f"{k} {v:.1f}s" for k, v in ours["spent_s"].items())
    )
    figures.add(f"{metric}_rows_per_s", ours_rate, base_rate)
    figures.add(f"{metric}_rows_per_cpu_s", cpu_rate)
    figures.add(f"{metric}_peak_rss_mb", ours["peak_rss_mb"])
    return ours


def live_big(dsn: str, log_dir: Path | str, rows: int, first_id: int, figures: Figures) -> None:
    """The latency of one big transaction committed while the source streams: from its commit
    to the log commit of its last row (the server sends it only once it committed)."""
    result = run_child(
        dsn, log_dir, rows, on_ready=lambda: execute(dsn, INSERT, (first_id, first_id + rows - 1))
    )
    lat = result["latencies_ms"]
    assert len(lat) == 1, f"one transaction expected, the log committed {len(lat)}"
    print(
        f"{'insert, one live tx':<28} commit-to-log latency {lat[0]:,.0f} ms for {rows:,} rows "
        f"({result['rows'] / (lat[0] / 1000):,.0f} rows/s from the commit on)"
    )
    figures.add("live_insert_one_tx_commit_to_log_ms", lat[0])


def steady(
    dsn: str,
    log_dir: Path | str,
    seconds: float,
    figures: Figures,
    rate: int = 5000,
    per_tx: int = 100,
) -> None:
    """Latency at a steady write rate while the source streams live."""
    total = int(seconds * rate)
    writer = threading.Thread(target=_steady_writes, args=(dsn, total, rate, per_tx))
    # The writer starts once the child streams: startup is not commit-to-log latency.
    result = run_child(dsn, log_dir, total, timeout=seconds + 60, on_ready=writer.start)
    writer.join()
    lat, commits, out = result["latencies_ms"], result["commit_ms"], result["delivered_ms"]
    print(
        f"{'steady 5,000 rows/s':<28} commit-to-log latency p50 {_pct(lat, 0.5):.1f} ms  "
        f"p99 {_pct(lat, 0.99):.1f} ms  max {lat[-1]:.1f} ms over {len(lat)} transactions; "
        f"commit-to-poll p50 {_pct(out, 0.5):.1f} ms  p99 {_pct(out, 0.99):.1f} ms; "
        f"log commit alone p50 {_pct(commits, 0.5):.1f} ms  p99 {_pct(commits, 0.99):.1f} ms; "
        "slowest commits (ms @ s after start) "
        + ", ".join(f"{ms:.0f} @ {at:.1f}" for ms, at in result["slowest_commits"])
    )
    figures.add("steady_commit_to_log_p50_ms", _pct(lat, 0.5))
    figures.add("steady_commit_to_log_p99_ms", _pct(lat, 0.99))
    figures.add("steady_commit_to_poll_p50_ms", _pct(out, 0.5))
    figures.add("steady_log_commit_p50_ms", _pct(commits, 0.5))
    _after_warmup(result["after_warmup_ms"], figures)


def _steady_writes(dsn: str, total: int, rate: int, per_tx: int) -> None:
    """``total`` rows in transactions of ``per_tx``, paced to ``rate`` rows/s."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        base = 10_000_000
        interval = per_tx / rate
        next_at = time.monotonic()
        for start in range(base, base + total, per_tx):
            conn.execute(INSERT, (start, start + per_tx - 1))
            next_at += interval
            time.sleep(max(0.0, next_at - time.monotonic()))


def _after_warmup(warm: list[float], figures: Figures) -> None:
    if not warm:  # a run no longer than the warm-up
        return
    print(
        f"{'  after the first ' + str(WARMUP_S) + ' s':<28} commit-to-log latency p50 "
        f"{_pct(warm, 0.5):.1f} ms  p99 {_pct(warm, 0.99):.1f} ms  max {warm[-1]:.1f} ms over "
        f"{len(warm)} transactions (a cold broker's first transactions left out)"
    )
    figures.add("steady_after_warmup_commit_to_log_p99_ms", _pct(warm, 0.99))


def _pct(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(len(values) * q))] if values else float("nan")


def main(args: argparse.Namespace) -> None:
    from tests.services.postgres import LocalPostgres

    with contextlib.ExitStack() as stack:
        pg = stack.enter_context(LocalPostgres(settings={"synchronous_commit": "on"}))
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="cdc-bench-"))
        dsn = pg.dsn_for(dbname=pg.create_database("bench"))
        log_dir: Path | str = Path(tmp) / "log"
        if args.log == "kafka":
            from tests.services.kafka import LocalKafka

            kafka = stack.enter_context(LocalKafka())
            log_dir = f"{KAFKA_SCHEME}{kafka.bootstrap_servers}?state={Path(tmp) / 'state'}"
        print(f"log: {args.log}")
        _prepare(dsn)
        rows = args.rows
        figures = Figures("pg_stream")
        figures.variant = ("_schemas" if args.schemas else "") + (
            "_metrics" if args.metrics else ""
        )
        print(f"PostgreSQL at {pg.port}; {rows:,} rows per workload")
        # First, on a quiet database: after the bulk phases, autovacuum of the big table writes
        # WAL that the server must decode past, which would show as the source's latency.
        steady(dsn, log_dir, args.steady_s, figures)
        live_big(dsn, log_dir, rows, LIVE_FIRST_ID, figures)
        _backlogs(pg, dsn, log_dir, args, figures)
    figures.emit()


def _prepare(dsn: str) -> None:
    """The bench table, its publication and the slot the children stream from."""
    execute(dsn, DDL)
    execute(dsn, f"CREATE PUBLICATION {PIPELINE}_pub FOR TABLE bench")
    execute(dsn, f"SELECT pg_create_logical_replication_slot('{PIPELINE}_slot', 'pgoutput')")


def _backlogs(
    pg: Any, dsn: str, log_dir: Path | str, args: argparse.Namespace, figures: Figures
) -> None:
    """The phases that read a backlog, ours beside pg_recvlogical's over the same WAL."""
    rows = args.rows
    print(
        "(the phases below read a backlog committed before the stream started: throughput; "
        "no commit-to-log latency applies)"
    )
    # The baseline's slot starts where ours stands now (the log holds everything before).
    execute(dsn, "SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (BASELINE_SLOT,))
    execute(dsn, INSERT, (1, rows))
    compare("insert, one transaction", "insert_one_tx", pg, dsn, log_dir, rows, figures)
    with psycopg.connect(dsn, autocommit=True) as conn:
        step = 10_000
        for low in range(1, rows + 1, step):
            conn.execute(
                "UPDATE bench SET amount = amount + 1, flag = NOT flag WHERE id BETWEEN %s AND %s",
                (low, low + step - 1),
            )
    compare("update, 10k-row transactions", "update_10k_tx", pg, dsn, log_dir, rows, figures)
    execute(dsn, INSERT, (rows + 1, rows + args.big))
    big = f"insert {args.big:,} one tx"
    compare(big, "insert_big_one_tx", pg, dsn, log_dir, args.big, figures)
    execute(dsn, "SELECT pg_drop_replication_slot(%s)", (BASELINE_SLOT,))


def _positive(kind: Any) -> Any:
    """An argparse type: a number above zero (a zero-row workload or a zero-second steady phase
    has no rate to print)."""

    def parsed(text: str) -> Any:
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be above 0, not {text}")
        return value

    return parsed


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command")
    c = sub.add_parser("child")
    c.add_argument("--dsn", required=True)
    c.add_argument("--log", required=True)
    c.add_argument("--rows", type=int, required=True)
    c.add_argument("--timeout", type=float, default=600)
    c.add_argument("--variant", choices=sorted(VARIANTS), default="plain")
    parser.add_argument("--log", choices=["embedded", "kafka"], default="embedded")
    parser.add_argument("--rows", type=_positive(int), default=500_000)
    parser.add_argument("--big", type=_positive(int), default=1_000_000)
    parser.add_argument("--steady-s", type=_positive(float), default=20.0)
    parser.add_argument("--schemas", action="store_true", help="envelope schemas.enable: true")
    parser.add_argument("--metrics", action="store_true", help="with the source's metrics on")
    parser.add_argument(
        "--rounds", type=_positive(int), default=3, help="--filters: runs per workload"
    )
    parser.add_argument(
        "--filters",
        action="store_true",
        help="only the backlogs, with a masked and an excluded column against none "
        "(bench/pg_filters.py)",
    )
    return parser.parse_args()


if __name__ == "__main__":
    arguments = parse()
    if getattr(arguments, "schemas", False):
        os.environ[SCHEMAS_ENV] = "1"  # the children read it
    if getattr(arguments, "metrics", False):
        os.environ[METRICS_ENV] = "1"
    if arguments.command == "child":
        child(arguments)
    elif arguments.filters:
        from bench.pg_filters import main as filters_main

        filters_main(arguments)
    else:
        main(arguments)
