"""Debezium side by side: its embedded engine and ours streaming the same WAL of one server.

A throwaway PostgreSQL 15 (``LocalPostgres``) holds ``pg_stream``'s bench table. For each
workload, two slots are created at the same point (``bench_slot`` for ours, ``dbz_slot`` for
Debezium, each with its own publication of the table), the workload is committed, and then each
side streams that backlog in turn, alternating who goes first from round to round:

- an INSERT of ``--rows`` rows in one transaction;
- UPDATEs of ``--rows`` rows in transactions of 10,000;
- an INSERT of ``--big`` rows in one transaction.

Ours is ``python -m bench.pg_stream child``: :class:`PostgresSource` into the embedded log
(durable SQLite commits, offsets stored in the same transaction), as ``cdc run``'s source task
drives it. Debezium is 3.6.1's embedded engine with its PostgreSQL connector, run by the JSON-lines
runner ``tests/debezium`` builds (``make jars``): each record through Kafka's ``JsonConverter``
into stdout, which goes to a file (the runner flushes once a record; its file argument would cost
six unbuffered writes a record instead). Both write the same readable envelope (string decimals,
ISO times, no Connect schemas) and Debezium's ``snapshot.mode=no_data`` starts it at its slot.

Measured from outside, the same way for both (``bench/procstat.py``): rows/s over the streaming
time (ours: its poll-to-commit loop; Debezium: from its slot going active to its last record
written), CPU per row of the process over that time (``/proc/<pid>/stat``; the start-up's
imports, class loading and connections left out, reported apart as start-up seconds), and peak
RSS (``wait4``'s ``ru_maxrss``). The JVM gets ``-Xmx512m`` by default (``--xmx``; the tests run
it so; Kafka Connect's scripts default to 2 GB) and the JVM's default collector.

Usage: ``python bench/peer_debezium.py [--rows 500000] [--big 1000000] [--rounds 1]
[--xmx 512m]``. The figures end with one JSON line a metric (:mod:`bench.report`): ``ours`` is
ours, ``baseline`` Debezium's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script

from bench.pg_stream import DDL, INSERT
from bench.procstat import ProcStats, load
from bench.report import Figures

ROOT = Path(__file__).resolve().parents[1]
OURS_SLOT, DBZ_SLOT = "bench_slot", "dbz_slot"
UPDATE = "UPDATE bench SET amount = amount + 1, flag = NOT flag WHERE id BETWEEN %s AND %s"
UPDATE_TX_ROWS = 10_000
#: Debezium's readable settings, as ours writes by default (tests/debezium/workload.py).
DBZ_SETTINGS = {
    "slot.name": DBZ_SLOT,
    "publication.name": "dbz_pub",
    "publication.autocreate.mode": "disabled",
    "snapshot.mode": "no_data",
    "table.include.list": "public.bench",
}


@dataclass
class Side:
    """One side's figures for one run."""

    rows: int
    stream_s: float
    cpu_s: float  # over the streaming time
    startup_s: float
    peak_mb: float
    #: Debezium's second half alone (rows, seconds, CPU seconds): its JIT warmed up.
    warm: tuple[int, float, float] | None = None

    @property
    def rate(self) -> float:
        return self.rows / self.stream_s

    @property
    def cpu_us(self) -> float:
        return self.cpu_s / self.rows * 1e6


def _reap(proc: subprocess.Popen[Any]) -> tuple[float, float]:
    """Wait for ``proc``; its total CPU seconds and peak RSS in MB (``wait4``)."""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{proc.args!r} exited {proc.returncode}")
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def run_ours(dsn: str, workdir: Path, rows: int) -> Side:
    """``bench.pg_stream``'s child over the backlog of ``bench_slot``."""
    argv = [sys.executable, "-m", "bench.pg_stream", "child", "--dsn", dsn]
    argv += ["--log", str(workdir / "log"), "--rows", str(rows), "--timeout", "1800"]
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout is not None
    ready = proc.stdout.readline()
    startup = time.perf_counter() - started
    cpu_ready = ProcStats(proc.pid).cpu_s()
    if ready.strip() != "ready":
        raise RuntimeError(f"bench.pg_stream child: {ready!r}")
    result = json.loads(proc.stdout.read().strip().splitlines()[-1])
    proc.stdout.close()
    cpu, peak = _reap(proc)
    # The loop's own wall time: poll to the last commit, without the close after it.
    stream_s = sum(result["spent_s"].values())
    return Side(result["rows"], stream_s, cpu - cpu_ready, startup, peak)


def run_debezium(dsn: str, workdir: Path, rows: int, xmx: str) -> Side:
    """Debezium's embedded engine over the backlog of ``dbz_slot``, to ``rows`` records."""
    argv = _debezium_argv(dsn, workdir, rows, xmx)
    out_path = workdir / "records.jsonl"
    with out_path.open("wb") as out, (workdir / "debezium.log").open("wb") as err:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, cwd=workdir)
    stats = ProcStats(proc.pid)
    with psycopg.connect(dsn, autocommit=True) as conn:
        _wait(lambda: _slot_active(conn, DBZ_SLOT), proc, workdir)
    active, cpu_active = time.perf_counter(), stats.cpu_s()
    lines = _LineCounter(out_path)
    _wait(lambda: lines.count() >= rows // 2, proc, workdir, interval=0.01)
    half, cpu_half, at_half = time.perf_counter(), stats.cpu_s(), lines.count()
    _wait(lambda: lines.count() >= rows, proc, workdir, interval=0.01)
    done = time.perf_counter()
    lines.close()
    try:
        cpu_done: float | None = stats.cpu_s()  # before the engine's close
    except (FileNotFoundError, ProcessLookupError):
        cpu_done = None  # it closed and exited already
    total, peak = _reap(proc)
    cpu_end = total if cpu_done is None else cpu_done
    warm = (rows - at_half, done - half, cpu_end - cpu_half)
    return Side(rows, done - active, cpu_end - cpu_active, active - started, peak, warm)


def _debezium_argv(dsn: str, workdir: Path, rows: int, xmx: str) -> list[str]:
    """The runner's command line; its properties file (with the password) written 0600."""
    from tests.debezium.workload import SETTINGS
    from tests.services.debezium import DEBEZIUM_DIR, ENV_LIB, MAIN_CLASS, connector_properties
    from tests.services.jvm import ensure_jars, find_java

    lib = ensure_jars("debezium", "debezium-embedded-*.jar", ENV_LIB)
    props = connector_properties(dsn, {**SETTINGS["readable"], **DBZ_SETTINGS}, workdir)
    props_file = workdir / "debezium.properties"
    fd = os.open(props_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.writelines(f"{k}={_escape(v)}\n" for k, v in sorted(props.items()))
    classpath = f"{lib}/*{os.pathsep}{DEBEZIUM_DIR / 'target' / 'classes'}"
    java = find_java()
    assert java is not None  # ensure_jars raised otherwise
    return [java, f"-Xmx{xmx}", "-cp", classpath, MAIN_CLASS, str(props_file), "-", str(rows)]


def _escape(value: str) -> str:
    """A value as java.util.Properties reads it back (backslashes and line ends escaped)."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


class _LineCounter:
    """Counts the lines of a growing file, reading only what was appended since last time."""

    def __init__(self, path: Path):
        self._file = path.open("rb")
        self._lines = 0

    def count(self) -> int:
        while chunk := self._file.read(1 << 20):
            self._lines += chunk.count(b"\n")
        return self._lines

    def close(self) -> None:
        self._file.close()


def _slot_active(conn: psycopg.Connection[Any], slot: str) -> bool:
    row = conn.execute(
        "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,)
    ).fetchone()
    return bool(row and row[0])


def _wait(
    done: Callable[[], bool], proc: subprocess.Popen[Any], workdir: Path, interval: float = 0.02
) -> None:
    deadline = time.monotonic() + 1800
    while not done():
        # The runner exits by itself after its last record: seen done after it exited is done.
        if (proc.poll() is not None and not done()) or time.monotonic() > deadline:
            proc.kill()
            tail = (workdir / "debezium.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"debezium runner stopped or timed out:\n{tail}")
        time.sleep(interval)


# -- workloads ---------------------------------------------------------------------------------


def execute(dsn: str, statement: str, params: tuple[Any, ...] = ()) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(statement, params)


def insert(dsn: str, rows: int) -> None:
    execute(dsn, INSERT, (1, rows))


def update(dsn: str, rows: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for low in range(1, rows + 1, UPDATE_TX_ROWS):
            conn.execute(UPDATE, (low, min(rows, low + UPDATE_TX_ROWS - 1)))


@contextlib.contextmanager
def slots(dsn: str, admin_dsn: str) -> Iterator[None]:
    """Both slots created at the same point; dropped after (their walsenders ended)."""
    from tests.services.postgres import drop_replication_slots

    for slot in (OURS_SLOT, DBZ_SLOT):
        execute(dsn, "SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    try:
        yield
    finally:
        drop_replication_slots(admin_dsn, "bench")


def workload(
    name: str, dsn: str, admin_dsn: str, rows: int, args: argparse.Namespace, first: str
) -> dict[str, Side]:
    """One workload's backlog, streamed by each side in turn (``first`` goes first)."""
    execute(dsn, "TRUNCATE bench")
    if name == "update_10k_tx":
        insert(dsn, rows)  # before the slots: only the updates are streamed
    with slots(dsn, admin_dsn):
        (update if name == "update_10k_tx" else insert)(dsn, rows)
        sides: dict[str, Side] = {}
        for who in (first, "debezium" if first == "ours" else "ours"):
            with tempfile.TemporaryDirectory(prefix=f"peer-{who}-") as tmp:
                if who == "ours":
                    sides[who] = run_ours(dsn, Path(tmp), rows)
                else:
                    sides[who] = run_debezium(dsn, Path(tmp), rows, args.xmx)
            _print_side(name, who, sides[who])
    return sides


def _print_side(name: str, who: str, side: Side) -> None:
    warm = ""
    if side.warm:
        rows, seconds, cpu = side.warm
        warm = f"; second half {rows / seconds:,.0f} rows/s, {cpu / rows * 1e6:.1f} us CPU/row"
    print(
        f"  {name:<18} {who:<9} {side.rate:>9,.0f} rows/s  {side.cpu_us:>6.1f} us CPU/row  "
        f"peak RSS {side.peak_mb:>5.0f} MB  start-up {side.startup_s:.1f} s{warm}  ({load()})",
        flush=True,
    )


def report(results: dict[str, list[dict[str, Side]]], xmx: str) -> None:
    """The medians of the rounds, ours against Debezium's, as a table and as JSON lines."""
    figures = Figures("peer_debezium")
    print(f"\nmedians; Debezium 3.6.1 embedded, -Xmx{xmx}; {load()}")
    print(f"{'workload':<18}{'':>5}{'rows/s':>10}{'us CPU/row':>12}{'peak MB':>9}{'start s':>9}")
    for name, rounds in results.items():
        o, d = _median([r["ours"] for r in rounds]), _median([r["debezium"] for r in rounds])
        w = _median_warm([r["debezium"] for r in rounds])
        for who, m in (("ours", o), ("dbz", d), ("dbz/2", w)):
            print(f"{name:<18}{who:>5}{m[0]:>10,.0f}{m[1]:>12.1f}{m[2]:>9.0f}{m[3]:>9.1f}")
        print(f"{'':<18}{'x':>5}{o[0] / d[0]:>10.2f}{d[1] / o[1]:>12.2f}{d[2] / o[2]:>9.2f}")
        print(f"{'':<18}{'x/2':>5}{o[0] / w[0]:>10.2f}{w[1] / o[1]:>12.2f}")
        figures.add(f"{name}_rows_per_s", o[0], d[0])
        figures.add(f"{name}_rows_per_cpu_s", 1e6 / o[1], 1e6 / d[1])
        figures.add(f"{name}_rows_per_s_vs_warm", o[0], w[0])
        figures.add(f"{name}_rows_per_cpu_s_vs_warm", 1e6 / o[1], 1e6 / w[1])
        figures.add(f"{name}_peak_rss_mb", o[2], d[2])
        figures.add(f"{name}_startup_s", o[3], d[3])
    print(
        "dbz/2: Debezium's second half alone (its JIT warmed up); x: ours over Debezium for "
        "rows/s, Debezium over ours for CPU a row and peak RSS"
    )
    figures.emit()


def _median(sides: list[Side]) -> tuple[float, float, float, float]:
    return (
        statistics.median(s.rate for s in sides),
        statistics.median(s.cpu_us for s in sides),
        statistics.median(s.peak_mb for s in sides),
        statistics.median(s.startup_s for s in sides),
    )


def _median_warm(sides: list[Side]) -> tuple[float, float, float, float]:
    warm = [s.warm for s in sides if s.warm]
    return (
        statistics.median(rows / seconds for rows, seconds, _ in warm),
        statistics.median(cpu / rows * 1e6 for rows, _, cpu in warm),
        statistics.median(s.peak_mb for s in sides),
        statistics.median(s.startup_s for s in sides),
    )


def main(args: argparse.Namespace) -> None:
    from tests.services.postgres import LocalPostgres

    with LocalPostgres(settings={"synchronous_commit": "on"}) as pg:
        dsn = pg.dsn_for(dbname=pg.create_database("bench"))
        execute(dsn, DDL)
        execute(dsn, "CREATE PUBLICATION bench_pub FOR TABLE bench")
        execute(dsn, "CREATE PUBLICATION dbz_pub FOR TABLE bench")
        sizes = {
            "insert_one_tx": args.rows,
            "update_10k_tx": args.rows,
            "insert_big_one_tx": args.big,
        }
        print(f"PostgreSQL at {pg.port}; {args.rounds} round(s); {load()}")
        results: dict[str, list[dict[str, Side]]] = {name: [] for name in sizes}
        for round_ in range(args.rounds):
            first = "ours" if round_ % 2 == 0 else "debezium"
            for name, rows in sizes.items():
                results[name].append(workload(name, dsn, pg.dsn_for(), rows, args, first))
    report(results, args.xmx)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rows", type=int, default=500_000, help="insert and update workloads")
    parser.add_argument("--big", type=int, default=1_000_000, help="the big transaction")
    parser.add_argument("--rounds", type=int, default=1, help="alternating who goes first")
    parser.add_argument("--xmx", default="512m", help="the JVM's -Xmx")
    return parser.parse_args(argv)


if __name__ == "__main__":
    main(parse())
