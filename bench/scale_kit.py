"""The parts of ``bench/scale.py``: one ``cdc run`` watched from outside, and growth verdicts.

:class:`Pipe` writes a pipeline file (PostgreSQL source, embedded log, the given sinks, metrics
on a loopback port), starts ``cdc run`` on it as a child process and reads it without touching
its work: the log's record counts from its SQLite file (a reader beside the writer, WAL mode),
readiness and the sinks' applied counts from its ``/metrics`` endpoint, CPU and memory from
``/proc`` (:mod:`bench.procstat`), and the statements it ran on the server from
``pg_stat_statements`` (the catalog queries of a start).
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from bench.procstat import ProcStats

PIPELINE = "scale"
DATA_TOPICS = f"{PIPELINE}.public.%"
#: pg_stat_statements' totals, without the bench's own reads and resets of it.
STATEMENTS = (
    "SELECT coalesce(sum(calls), 0)::int8 FROM stats.pg_stat_statements"
    " WHERE query NOT LIKE '%pg_stat_statements%'"
)
_METRIC = re.compile(r"^([a-z_]+)(?:\{(.*)\})? ([-+.eE0-9naNInf]+)$")


class Pipe:
    """One ``cdc run`` of a pipeline file written into ``workdir``."""

    def __init__(self, workdir: Path, dsn: str, tables: list[str], sinks: list[dict[str, Any]]):
        from tests.services.ports import free_port

        self.workdir = workdir
        self.log_db = workdir / "log" / "log.sqlite3"
        self.port = free_port()
        self.file = workdir / "pipeline.yaml"
        spec = {
            "version": 1,
            "name": PIPELINE,
            "source": {"type": "postgres", "dsn": dsn, "tables": tables},
            "log": {"type": "embedded", "path": str(workdir / "log")},
            "sinks": sinks,
            "metrics": {"listen": f"127.0.0.1:{self.port}"},
        }
        self.file.write_text(json.dumps(spec, indent=1))  # JSON is YAML
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = 0.0

    def start(self) -> ProcStats:
        """Start ``cdc run``; under ``CDC_SCALE_PROFILE=DIR``, py-spy samples it into ``DIR``."""
        cdc = Path(sys.executable).with_name("cdc")
        argv = (
            [str(cdc), "run", str(self.file)]
            if cdc.exists()
            else [sys.executable, "-m", "cdc.cli.main", "run", str(self.file)]
        )
        err = (self.workdir / "cdc.log").open("ab")
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(argv, stdout=err, stderr=err, cwd=self.workdir)
        _profile(self.proc.pid)
        return ProcStats(self.proc.pid)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(30)

    def wait(self, what: str, done: Callable[[], bool], timeout_s: float = 3600) -> float:
        """Seconds since the start when ``done()`` first held (checked every 50 ms)."""
        deadline = time.monotonic() + timeout_s
        while not done():
            assert self.proc is not None
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                tail = (self.workdir / "cdc.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"cdc run stopped or timed out before {what}:\n{tail}")
            time.sleep(0.05)
        return time.perf_counter() - self.started

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=2) as r:
                return bool(r.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def metric(self, name: str, **labels: str) -> float:
        """The sum of a metric's series whose labels include ``labels`` (0 before any)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
                text = r.read().decode()
        except (urllib.error.URLError, OSError):
            return 0.0
        total = 0.0
        for line in text.splitlines():
            m = _METRIC.match(line)
            if (
                m
                and m.group(1) == name
                and all(f'{k}="{v}"' in (m.group(2) or "") for k, v in labels.items())
            ):
                total += float(m.group(3))
        return total

    def records(self, pattern: str = DATA_TOPICS) -> int:
        """Records ever appended to the topics named like ``pattern`` (the high-water marks)."""
        return self._log_sum("p.next_offset", pattern)

    def counts(self, pattern: str = DATA_TOPICS) -> tuple[int, int]:
        """Records the topics hold now (what compaction left), and ever appended."""
        return self._log_sum("p.record_count", pattern), self._log_sum("p.next_offset", pattern)

    def _log_sum(self, column: str, pattern: str) -> int:
        if not self.log_db.exists():
            return 0
        query = (
            f"SELECT coalesce(sum({column}), 0) FROM partitions p"
            " JOIN topics t ON t.id = p.topic_id WHERE t.name LIKE ?"
        )
        try:
            conn = sqlite3.connect(f"file:{self.log_db}?mode=ro", uri=True, timeout=5)
            try:
                return int(conn.execute(query, (pattern,)).fetchone()[0])
            finally:
                conn.close()
        except sqlite3.OperationalError:  # the schema is not created yet
            return 0

    def log_mb(self) -> float:
        """The log directory's size on disk (database, WAL and shared memory files)."""
        return sum(p.stat().st_size for p in (self.workdir / "log").glob("*")) / 1e6


PROFILE_ENV = "CDC_SCALE_PROFILE"


def _profile(pid: int) -> None:
    """py-spy attached to ``pid`` until it exits, its folded stacks written to
    ``$CDC_SCALE_PROFILE/<pid>.txt`` (its own CPU is not the measured process's)."""
    folder = os.environ.get(PROFILE_ENV)
    if not folder:
        return
    spy = Path(sys.executable).with_name("py-spy")
    out = Path(folder) / f"{pid}.txt"
    argv = [
        str(spy),
        "record",
        "--pid",
        str(pid),
        "--format",
        "raw",
        "--rate",
        "50",
        "-o",
        str(out),
    ]
    subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def statements(dsn: str, reset: bool = False) -> int:
    """Statements the server ran since the last reset (``pg_stat_statements``)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        if reset:
            conn.execute("SELECT stats.pg_stat_statements_reset()")
            return 0
        row = conn.execute(STATEMENTS).fetchone()
        return int(row[0]) if row else 0


# -- verdicts ----------------------------------------------------------------------------------

#: Below this growth a cost is flat: the noise of one run on a shared 2-core machine.
FLAT = 1.3
#: Growth exponents: up to SUBLINEAR the cost grows slower than the dimension, up to LINEAR
#: as fast (with the noise); past it, worse than linear: a bug.
SUBLINEAR, LINEAR = 0.8, 1.25


def growth(base: float, cost: float, base_size: float, size: float) -> str:
    """How ``cost`` grew from ``base`` while the dimension grew from ``base_size`` to ``size``:
    ``flat``, ``sublinear``, ``linear`` or ``WORSE`` (than linear), with the factor."""
    if base <= 0 or size <= base_size:
        return "-"
    ratio = cost / base
    if ratio <= FLAT:
        return f"x{ratio:.2f} flat"
    exponent = math.log(ratio) / math.log(size / base_size)
    verdict = "sublinear" if exponent < SUBLINEAR else "linear" if exponent <= LINEAR else "WORSE"
    return f"x{ratio:.2f} {verdict}"


def table(title: str, dimension: str, rows: list[dict[str, Any]], columns: list[str]) -> None:
    """One dimension's rows, each cost with its growth from the row before.

    ``columns`` name the costs (keys of each row); a name ending in ``/s`` is a rate, whose
    cost is its inverse (a rate that halves is a cost that doubled).
    """
    print(f"\n{title}: growth from the size before")
    head = f"{dimension:>10}" + "".join(f"{c:>14}{'growth':>17}" for c in columns)
    print(head)
    for before, row in zip([rows[0], *rows], rows, strict=False):
        cells = f"{row['size']:>10,}"
        for c in columns:
            base, cost = before[c], row[c]
            if c.endswith("/s"):
                base, cost = 1 / base if base else 0.0, 1 / cost if cost else 0.0
            verdict = "" if c == "rows" else growth(base, cost, before["size"], row["size"])
            cells += f"{_fmt(row[c]):>14}{verdict:>17}"
        print(cells)


def _fmt(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.2f}"


def slope(samples: list[tuple[float, float]]) -> float:
    """Least-squares slope of ``(x, y)`` samples (0 with fewer than two)."""
    if len(samples) < 2:
        return 0.0
    n = len(samples)
    mx = sum(x for x, _ in samples) / n
    my = sum(y for _, y in samples) / n
    var = sum((x - mx) ** 2 for x, _ in samples)
    return sum((x - mx) * (y - my) for x, y in samples) / var if var else 0.0


# -- one measurement ---------------------------------------------------------------------------

IDLE_S = 3.0  # after the work: the idle RSS is read this long after the last record


def measure(
    workdir: Path,
    dsn: str,
    tables: list[str],
    snapshot_rows: int,
    backlog: Callable[[], int] | None = None,
    sinks: list[dict[str, Any]] | None = None,
) -> dict[str, float]:
    """One pipeline: start it and let it snapshot ``snapshot_rows`` rows; then, with
    ``backlog``, stop it, commit the backlog (``backlog()`` returns its rows), start it again
    and let it stream that backlog. Each process's own start-up, CPU and peak RSS."""
    pipe = Pipe(workdir, dsn, tables, sinks or [])
    statements(dsn, reset=True)
    stats = pipe.start()
    try:
        out = {"startup_s": pipe.wait("ready", pipe.ready), "startup_cpu_s": stats.cpu_s()}
        out["snapshot_s"] = pipe.wait("the snapshot", lambda: pipe.records() >= snapshot_rows)
        out["snapshot_cpu_s"] = stats.cpu_s() - out["startup_cpu_s"]  # after the start-up
        out["statements"] = statements(dsn)
        out["schema_records"] = pipe.records(f"{PIPELINE}.__schemas")
        for sink in sinks or []:
            name = sink["name"]
            done = lambda n=name: pipe.metric("cdc_sink_applied_total", sink=n) >= snapshot_rows  # noqa: E731
            out["sinks_s"] = pipe.wait(f"sink {name}", done)
        out["sinks_cpu_s"] = stats.cpu_s()
        out["peak_mb"] = stats.peak_mb()
        time.sleep(IDLE_S)
        out["idle_mb"] = stats.rss_mb()
    finally:
        pipe.stop()
    if backlog is not None:
        out |= _stream_backlog(pipe, snapshot_rows, backlog)
    return out


def _stream_backlog(pipe: Pipe, before: int, backlog: Callable[[], int]) -> dict[str, float]:
    """The backlog committed while the pipeline is stopped, streamed by a fresh process."""
    rows = backlog()
    stats = pipe.start()
    try:
        restart = pipe.wait("ready again", pipe.ready)
        cpu0 = stats.cpu_s()
        end = pipe.wait("the backlog", lambda: pipe.records() >= before + rows)
        return {
            "restart_s": restart,
            "stream_rows": rows,
            "stream_s": end - restart,
            "stream_cpu_s": stats.cpu_s() - cpu0,
            "stream_peak_mb": stats.peak_mb(),
        }
    finally:
        pipe.stop()
