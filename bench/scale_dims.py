"""The dimensions of ``bench/scale.py``: each builds its tables for one size, runs one pipeline
on them (:func:`bench.scale_kit.measure`) and returns the row of its table."""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from bench.report import Figures
from bench.scale_kit import PIPELINE, Pipe, measure, slope

#: Each dimension's columns: the row's key (a name ending in ``/s`` is a rate) -> its metric.
COLUMNS: dict[str, dict[str, str]] = {
    "tables": {
        "start-up s": "startup_s",
        "snapshot s": "snapshot_s",
        "snap only s": "snapshot_only_s",
        "statements": "statements",
        "schema recs": "schema_records",
        "restart s": "restart_s",
        "stream us/row": "stream_cpu_us_per_row",
        "peak MB": "peak_rss_mb",
    },
    "table_size": {
        "snapshot rows/s": "snapshot_rows_per_s",
        "CPU s": "snapshot_cpu_s",
        "peak MB": "peak_rss_mb",
    },
    "width": {
        "snap us/row": "snapshot_cpu_us_per_row",
        "stream us/row": "stream_cpu_us_per_row",
        "peak MB": "peak_rss_mb",
        "stream peak MB": "stream_peak_rss_mb",
    },
    "value": {
        "rows": "rows",
        "snap us/row": "snapshot_cpu_us_per_row",
        "stream us/row": "stream_cpu_us_per_row",
        "peak MB": "peak_rss_mb",
        "stream peak MB": "stream_peak_rss_mb",
    },
    "tx_size": {
        "stream rows/s": "stream_rows_per_s",
        "CPU s": "stream_cpu_s",
        "peak MB": "stream_peak_rss_mb",
    },
    "sinks": {
        "applied s": "applied_s",
        "CPU s": "cpu_s",
        "peak MB": "peak_rss_mb",
        "idle MB": "idle_rss_mb",
    },
}
TX_ROWS = 10_000  # rows per transaction of the streamed backlogs


def execute(dsn: str, statement: Any, params: tuple[Any, ...] = ()) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(statement, params)


def reset(dsn: str) -> None:
    """No table, slot or publication of an earlier size left."""
    from tests.services.postgres import drop_replication_slots

    drop_replication_slots(dsn, str(psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]))
    execute(dsn, sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(f"{PIPELINE}_pub")))
    execute(dsn, "DROP SCHEMA public CASCADE")
    execute(dsn, "CREATE SCHEMA public")


# -- tables ------------------------------------------------------------------------------------


def tables(dsn: str, workdir: Path, size: int, args: argparse.Namespace) -> dict[str, Any]:
    names = [f"t_{i:04d}" for i in range(size)]
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name in names:
            t = sql.Identifier(name)
            conn.execute(sql.SQL("CREATE TABLE {} (id int8 PRIMARY KEY, v text)").format(t))
            conn.execute(
                sql.SQL("INSERT INTO {} SELECT g, 'v' || g FROM generate_series(1, %s) g").format(
                    t
                ),
                (args.table_rows,),
            )
    out = measure(
        workdir,
        dsn,
        [f"public.{n}" for n in names],
        size * args.table_rows,
        lambda: _spread(dsn, names, args.table_rows, args.stream_rows),
    )
    return {
        "start-up s": out["startup_s"],
        "snapshot s": out["snapshot_s"],
        "snap only s": out["snapshot_s"] - out["startup_s"],
        "statements": out["statements"],
        "schema recs": out["schema_records"],
        "restart s": out["restart_s"],
        "stream us/row": _per_row(out["stream_cpu_s"], out["stream_rows"]),
        "peak MB": max(out["peak_mb"], out["stream_peak_mb"]),
    }


def _per_row(cpu_s: float, rows: float) -> float:
    return cpu_s / rows * 1e6


def _spread(dsn: str, names: list[str], first: int, rows: int) -> int:
    """``rows`` rows round-robin over the tables, in 100-row transactions (the same
    transactions whatever the count: one table's 100 rows, or one row in each of 100)."""
    taken = dict.fromkeys(names, first)  # the highest id in each table
    insert = sql.SQL("INSERT INTO {} SELECT g, 'w' FROM generate_series(%s::int8, %s) g")
    with psycopg.connect(dsn) as conn:
        for start in range(0, rows, 100):
            counts = Counter(names[i % len(names)] for i in range(start, min(rows, start + 100)))
            for name, n in counts.items():
                conn.execute(
                    insert.format(sql.Identifier(name)), (taken[name] + 1, taken[name] + n)
                )
                taken[name] += n
            conn.commit()
    return rows


# -- table size ---------------------------------------------------------------------------------

#: pg_snapshot's table: an int key and six mixed columns.
SNAPSHOT_TABLE = """CREATE TABLE t (id int8 PRIMARY KEY, name text NOT NULL, amount numeric(12, 2),
    created timestamptz, doc jsonb, active bool, qty int)"""
SNAPSHOT_FILL = """INSERT INTO t SELECT g, 'customer ' || g, (g %% 100000) / 7.0,
    '2024-01-01'::timestamptz + g * interval '1 s', jsonb_build_object('k', g %% 10), g %% 2 = 0,
    g %% 1000 FROM generate_series(%s::int8, %s) g"""


def table_size(dsn: str, workdir: Path, size: int, args: argparse.Namespace) -> dict[str, Any]:
    execute(dsn, SNAPSHOT_TABLE)
    _in_txs(dsn, SNAPSHOT_FILL, 1, size, 1_000_000)
    execute(dsn, "VACUUM ANALYZE t")
    out = measure(workdir, dsn, ["public.t"], size)
    return {
        "snapshot rows/s": size / (out["snapshot_s"] - out["startup_s"]),
        "CPU s": out["snapshot_cpu_s"],
        "peak MB": out["peak_mb"],
    }


def _in_txs(dsn: str, insert: Any, first: int, last: int, per_tx: int) -> int:
    """``insert`` (``%s``: first and last id) over ``first..last``, ``per_tx`` rows a commit."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for low in range(first, last + 1, per_tx):
            conn.execute(insert, (low, min(last, low + per_tx - 1)))
    return last - first + 1


# -- row width, value size ----------------------------------------------------------------------

#: The column types a wide row cycles through, with the value each row gets (``g``: its id).
WIDE_TYPES = (
    ("int8", "g"),
    ("text", "'value ' || g"),
    ("numeric(12,2)", "g * 1.25"),
    ("timestamptz", "'2024-01-01'::timestamptz + g * interval '1 s'"),
    ("bool", "g %% 2 = 0"),
)


def width(dsn: str, workdir: Path, size: int, args: argparse.Namespace) -> dict[str, Any]:
    cols = [(f"c{i}", *WIDE_TYPES[i % len(WIDE_TYPES)]) for i in range(1, size)]
    columns = sql.SQL(", ").join(
        sql.SQL("{} {}").format(sql.Identifier(n), sql.SQL(kind)) for n, kind, _ in cols
    )
    execute(dsn, sql.SQL("CREATE TABLE w (id int8 PRIMARY KEY, {})").format(columns))
    values = sql.SQL(", ").join(sql.SQL(expr) for _, _, expr in cols)
    fill = sql.SQL("INSERT INTO w SELECT g, {} FROM generate_series(%s::int8, %s) g").format(values)
    _in_txs(dsn, fill, 1, args.rows, TX_ROWS)
    backlog = lambda: _in_txs(dsn, fill, args.rows + 1, 2 * args.rows, TX_ROWS)  # noqa: E731
    return _snapshot_and_stream(workdir, dsn, "public.w", args.rows, backlog)


def _snapshot_and_stream(
    workdir: Path, dsn: str, name: str, rows: int, backlog: Any
) -> dict[str, Any]:
    out = measure(workdir, dsn, [name], rows, backlog)
    return {
        "rows": rows,
        "snap us/row": _per_row(out["snapshot_cpu_s"], rows),
        "stream us/row": _per_row(out["stream_cpu_s"], out["stream_rows"]),
        "peak MB": out["peak_mb"],
        "stream peak MB": out["stream_peak_mb"],
    }


#: Incompressible text of %s bytes a row (md5s of the id: pglz gains too little to keep it
#: compressed, so every value over 2 kB is stored out of line, TOASTed).
VALUE_FILL = """INSERT INTO v SELECT g, 0,
    (SELECT left(string_agg(md5(g::text || '.' || i), ''), {size})
     FROM generate_series(1, {size} / 32 + 1) i)
    FROM generate_series(%s::int8, %s) g"""
VALUE_TOUCH = "UPDATE v SET n = n + 1 WHERE id BETWEEN %s AND %s"


def value(dsn: str, workdir: Path, size: int, args: argparse.Namespace) -> dict[str, Any]:
    execute(dsn, "CREATE TABLE v (id int8 PRIMARY KEY, n int8, payload text)")
    rows: int = max(20, min(args.rows, args.value_mb * 1_000_000 // size))
    per_tx = max(1, min(TX_ROWS, 50_000_000 // size))  # at most 50 MB a transaction
    fill = sql.SQL(VALUE_FILL).format(size=sql.Literal(size))
    _in_txs(dsn, fill, 1, rows, per_tx)

    def backlog() -> int:  # inserts, then updates that leave the TOASTed value unchanged
        _in_txs(dsn, fill, rows + 1, 2 * rows, per_tx)
        return rows + _in_txs(dsn, VALUE_TOUCH, 1, rows, per_tx)

    return _snapshot_and_stream(workdir, dsn, "public.v", rows, backlog)


# -- transaction size, sinks --------------------------------------------------------------------


def tx_size(dsn: str, workdir: Path, size: int, args: argparse.Namespace) -> dict[str, Any]:
    execute(dsn, SNAPSHOT_TABLE)
    # One row to snapshot: once it is in the log, the snapshot is over and the slot streams.
    _in_txs(dsn, SNAPSHOT_FILL, 1, 1, 1)
    backlog = lambda: _in_txs(dsn, SNAPSHOT_FILL, 2, size + 1, size)  # noqa: E731
    out = measure(workdir, dsn, ["public.t"], 1, backlog)
    return {
        "stream rows/s": size / out["stream_s"],
        "CPU s": out["stream_cpu_s"],
        "peak MB": out["stream_peak_mb"],
    }


def sinks(dsn: str, workdir: Path, size: int, args: argparse.Namespace) -> dict[str, Any]:
    execute(dsn, SNAPSHOT_TABLE)
    _in_txs(dsn, SNAPSHOT_FILL, 1, args.rows, 1_000_000)
    specs = [_sink(args.sink_type, i, workdir) for i in range(size)]
    out = measure(workdir, dsn, ["public.t"], args.rows, sinks=specs)
    return {
        "applied s": out["sinks_s"] - out["startup_s"],
        "CPU s": out["sinks_cpu_s"],
        "peak MB": out["peak_mb"],
        "idle MB": out["idle_mb"],
    }


def _sink(kind: str, i: int, workdir: Path) -> dict[str, Any]:
    if kind == "duckdb":
        return {"name": f"s{i}", "type": "duckdb", "path": str(workdir / f"s{i}.duckdb")}
    return {"name": f"s{i}", "type": "jsonl", "path": str(workdir / f"s{i}.jsonl")}


# -- soak ---------------------------------------------------------------------------------------

SOAK_KEYS = 10_000
SOAK_TX_PER_S = 50


def soak(dsn: str, args: argparse.Namespace, figures: Figures) -> None:
    """Updates at ``args.soak_rate`` rows/s over :data:`SOAK_KEYS` keys for
    ``args.soak_minutes``; RSS, the log's size and its live records sampled."""
    reset(dsn)
    execute(dsn, "CREATE TABLE s (id int8 PRIMARY KEY, n int8, payload text)")
    fill = "INSERT INTO s SELECT g, 0, repeat('x', 100) FROM generate_series(%s::int8, %s) g"
    _in_txs(dsn, fill, 1, SOAK_KEYS, SOAK_KEYS)
    stop, writes = threading.Event(), [0]
    samples: list[tuple[float, float, float, int, int]] = []
    with tempfile.TemporaryDirectory(prefix="cdc-scale-soak-") as tmp:
        pipe = Pipe(Path(tmp), dsn, ["public.s"], [])
        stats = pipe.start()
        writer = threading.Thread(target=_soak_writes, args=(dsn, args.soak_rate, stop, writes))
        try:
            pipe.wait("ready", pipe.ready)
            pipe.wait("the snapshot", lambda: pipe.records() >= SOAK_KEYS)
            writer.start()
            started = time.monotonic()
            for k in range(int(args.soak_minutes * 60 / args.sample_s) + 1):
                time.sleep(max(0.0, started + k * args.sample_s - time.monotonic()))
                minute = (time.monotonic() - started) / 60
                sample = (minute, stats.rss_mb(), pipe.log_mb(), *pipe.counts())
                samples.append(sample)
                print(f"  soak {_sample_line(sample)} written {writes[0]:,}", flush=True)
        finally:
            stop.set()
            pipe.stop()
    if writer.is_alive():
        writer.join()
    _soak_report(samples, writes[0], args, figures)


def _sample_line(sample: tuple[float, float, float, int, int]) -> str:
    minute, rss, log_mb, live, appended = sample
    return f"{minute:>8.1f}{rss:>10.0f}{log_mb:>10.0f}{live:>12,}{appended:>12,}"


def _soak_writes(dsn: str, rate: int, stop: threading.Event, writes: list[int]) -> None:
    """``rate`` rows/s of updates, :data:`SOAK_TX_PER_S` transactions a second, round the keys."""
    per_tx = max(1, rate // SOAK_TX_PER_S)
    touch = "UPDATE s SET n = n + 1 WHERE id BETWEEN %s AND %s"
    with psycopg.connect(dsn, autocommit=True) as conn:
        next_at, low = time.monotonic(), 1
        while not stop.is_set():
            conn.execute(touch, (low, low + per_tx - 1))
            writes[0] += per_tx
            low = low + per_tx if low + per_tx <= SOAK_KEYS else 1
            next_at += 1 / SOAK_TX_PER_S
            time.sleep(max(0.0, next_at - time.monotonic()))


def _soak_report(
    samples: list[tuple[float, float, float, int, int]],
    writes: int,
    args: argparse.Namespace,
    figures: Figures,
) -> None:
    """The slopes of RSS and of the log's size over the second half of the run (the first
    fills caches and the log up to its first compactions), against the log's first growth."""
    half = samples[len(samples) // 2 :]
    rss_slope = slope([(s[0], s[1]) for s in half])
    log_early = slope([(s[0], s[2]) for s in samples[:3]])
    log_late = slope([(s[0], s[2]) for s in half])
    minutes = half[-1][0] - half[0][0]
    mean_rss = sum(s[1] for s in half) / len(half)
    rss_verdict = "flat" if rss_slope * minutes <= max(5.0, 0.05 * mean_rss) else "GROWING"
    log_verdict = "bounded" if log_late <= 0.1 * max(log_early, 1e-9) else "GROWING"
    rate = writes / max(samples[-1][0] * 60, 1)
    print(
        f"\nsoak: {samples[-1][0]:.1f} min, {rate:,.0f} rows/s written (target {args.soak_rate:,})"
    )
    print(f"{'minute':>8}{'RSS MB':>10}{'log MB':>10}{'live recs':>12}{'appended':>12}")
    for sample in samples:
        print(_sample_line(sample))
    print(
        f"second half: RSS slope {rss_slope:+.2f} MB/min: {rss_verdict}; the log grew "
        f"{log_early:+.1f} MB/min in the first samples, "
        f"{log_late:+.1f} MB/min in the second half: {log_verdict}"
    )
    figures.add("soak_rss_slope_mb_per_min", rss_slope)
    figures.add("soak_rss_mean_mb", mean_rss)
    figures.add("soak_log_late_slope_mb_per_min", log_late)
    figures.add("soak_log_end_mb", samples[-1][2])
