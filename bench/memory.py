"""Benchmark: the resident memory of ``cdc run`` with DuckDB, Redis and search sinks.

Starts a throwaway PostgreSQL 15 and Redis (``LocalPostgres``, ``LocalRedis``), seeds a table
of ``--seed`` rows, and runs a real pipeline on the embedded log as a user does (``python -m
cdc.cli.main run FILE`` in a subprocess). Its RSS is read from ``/proc/PID/status`` every
``--interval-s``:

- **idle**: once the snapshot is in every sink, over ``--idle-s`` seconds (the last sample);
- **peak during the transaction**: ``--rows`` rows (default 1,000,000) inserted in one
  transaction, until every sink has applied them; the peak is the kernel's high-water mark
  (``VmHWM``, reset with ``/proc/PID/clear_refs`` when the transaction starts), so nothing
  between two samples is missed;
- **idle after**: ``--idle-s`` seconds after the sinks caught up (what the process keeps).

Where it goes: ``/proc/PID/smaps`` at idle and at the largest sample of the transaction, grouped
by mapping (anonymous memory, the heap, each shared library, mapped data files such as the
search index's segments), so a store's code is told from its data. ``--probe`` runs the same
pipeline with a probe inside (:mod:`bench.memory_probe`: glibc's bytes in use and kept free,
SQLite's caches, DuckDB's buffer manager, Python's object arenas; ``--trace`` adds
:mod:`tracemalloc`'s allocation sites, slowly). ``--sinks`` runs a subset
(``duckdb,redis,search``; ``none`` for a jsonl sink alone) to give each sink's share, and
``--set warehouse.memory_limit=64MB`` changes a sink option.

The figures end with one JSON line a metric (:mod:`bench.report`).

Usage: ``python -m bench.memory [--rows 1000000] [--seed 1000] [--sinks duckdb,redis,search]
[--set SINK.KEY=VALUE ...] [--idle-s 10] [--interval-s 0.2] [--probe] [--trace] [--keep DIR]``
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script

from bench import memory_probe  # noqa: E402
from bench.pg_stream import DDL, INSERT  # noqa: E402  (its table and rows)
from bench.report import Figures  # noqa: E402

PIPELINE = "mem"
SINKS = {
    "duckdb": "  - name: warehouse\n    type: duckdb\n    path: out/mem.duckdb\n",
    "redis": "  - name: cache\n    type: redis\n    url: ${MEM_REDIS_URL}\n",
    "search": "  - name: search\n    type: search\n    path: out/search\n",
    # The sink every pipeline needs at least one of, with nearly no memory of its own.
    "jsonl": "  - name: files\n    type: jsonl\n    path: out/jsonl\n",
}
MB = 1024 * 1024


# -- the pipeline file -------------------------------------------------------------------------


def pipeline_yaml(sinks: list[str], settings: list[str]) -> str:
    """The bench pipeline with ``sinks``; each ``SINK.KEY=VALUE`` of ``settings`` appended to
    the sink whose name (``warehouse``, ``cache``, ``search``) or type it names."""
    blocks = {name: SINKS[name] for name in sinks}
    for setting in settings:
        target, _, value = setting.partition("=")
        sink, _, key = target.partition(".")
        match = next((n for n, b in blocks.items() if n == sink or f"name: {sink}\n" in b), None)
        if match is None or not key:
            raise SystemExit(f"--set {setting}: expected SINK.KEY=VALUE for one of {sinks}")
        blocks[match] += f"    {key}: {value}\n"
    return (
        f"version: 1\nname: {PIPELINE}\nsource:\n  type: postgres\n  dsn: ${{MEM_PG_DSN}}\n"
        "  tables: [public.bench]\n  snapshot: initial\n  status_interval_s: 1\n"
        f"log:\n  type: embedded\n  path: .cdc/{PIPELINE}\nsinks:\n" + "".join(blocks.values())
    )


# -- reading a process's memory ----------------------------------------------------------------


def status_kb(pid: int) -> dict[str, int]:
    """``VmRSS``, ``VmHWM`` and the rest of ``/proc/PID/status``'s kB figures."""
    figures = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if value.strip().endswith(" kB"):
            figures[name] = int(value.split()[0])
    return figures


def reset_peak(pid: int) -> None:
    """Start ``VmHWM`` again from the current RSS (Linux 4.0+: ``clear_refs`` 5)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def mapping_label(path: str) -> str:
    """What a mapping of ``/proc/PID/smaps`` is, for the breakdown: ``anon``, ``[heap]``, or
    the package (or file) it maps."""
    if not path:
        return "anon"
    if path.startswith("["):
        return "[stack]" if path.startswith("[stack") else path
    parts = Path(path).parts
    if "site-packages" in parts:
        below = parts[parts.index("site-packages") + 1 :]
        name = below[0] if len(below) > 1 else below[0].split(".")[0]
        return f"lib:{name.lstrip('_')}"
    name = Path(path).name
    if ".so" in name:
        return f"file:{name}"
    return f"data:{Path(path).parent.name}"  # e.g. the search index's mapped segment files


def smaps_breakdown(pid: int) -> dict[str, int]:
    """Resident kB by :func:`mapping_label`, biggest first."""
    totals: dict[str, int] = {}
    label = "anon"
    with open(f"/proc/{pid}/smaps") as smaps:
        for line in smaps:
            first = line.split(maxsplit=5)
            if "-" in first[0] and len(first) >= 5 and not first[0].endswith(":"):
                label = mapping_label(first[5].strip() if len(first) == 6 else "")
            elif first[0] == "Rss:":
                totals[label] = totals.get(label, 0) + int(first[1])
    return dict(sorted(totals.items(), key=lambda kv: -kv[1]))


@dataclass
class Sampler:
    """Samples a process's RSS in a thread; keeps the breakdown of the largest sample."""

    pid: int
    interval_s: float
    samples: list[tuple[float, int]] = field(default_factory=list)
    largest: tuple[int, dict[str, int]] = (0, {})
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _loop(self) -> None:
        last_breakdown = 0.0
        while not self._stop.wait(self.interval_s):
            with contextlib.suppress(OSError):  # the process ended
                rss = status_kb(self.pid)["VmRSS"]
                self.samples.append((time.monotonic(), rss))
                # smaps costs a few ms: at most once a second, and only for a new high.
                if rss > self.largest[0] and time.monotonic() - last_breakdown > 1:
                    self.largest = (rss, smaps_breakdown(self.pid))
                    last_breakdown = time.monotonic()


# -- driving the pipeline ----------------------------------------------------------------------


def cdc(work: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cdc.cli.main", *args],
        cwd=work,
        env=env,
        text=True,
        capture_output=True,
        timeout=120,
    )


def caught_up(work: Path, env: dict[str, str], records: int) -> bool:
    """The table's topic holds ``records`` and every sink has applied all of them."""
    result = cdc(work, env, "status", "mem.yaml", "--json")
    if result.returncode != 0:
        return False
    report = orjson.loads(result.stdout)
    topic = f"{PIPELINE}.public.bench"
    ends = [t for t in report["topics"] if t["topic"] == topic]
    held = sum(int(o) for t in ends for o in t["end_offsets"].values())
    return held >= records and all(s["lag"] == 0 for s in report["sinks"])


def wait(predicate: Callable[[], bool], run: subprocess.Popen[str], timeout_s: float) -> float:
    """Seconds until ``predicate`` holds; fails if ``cdc run`` exits or time runs out."""
    started = time.monotonic()
    while not predicate():
        if run.poll() is not None:
            raise SystemExit(f"cdc run exited with {run.returncode}; see its run.log")
        if time.monotonic() - started > timeout_s:
            raise SystemExit(f"the sinks did not catch up in {timeout_s:.0f} s")
        time.sleep(2)
    return time.monotonic() - started


def command(args: argparse.Namespace) -> list[str]:
    """``cdc run``, or with ``--probe`` the same with a probe inside (:mod:`bench.memory_probe`)."""
    if args.probe:
        trace = ["--trace"] if args.trace else []
        return [sys.executable, "-m", "bench.memory_probe", "mem.yaml", *trace]
    return [sys.executable, "-m", "cdc.cli.main", "run", "mem.yaml"]


def idle_rss(pid: int, seconds: float) -> int:
    """The RSS after ``seconds`` of nothing to do, in kB."""
    time.sleep(seconds)
    return status_kb(pid)["VmRSS"]


def measure(args: argparse.Namespace, work: Path, env: dict[str, str], dsn: str) -> dict[str, Any]:
    """Run the pipeline through start-up, idle, the big transaction and idle again."""
    (work / "mem.yaml").write_text(pipeline_yaml(args.sinks, args.set))
    with (work / "run.log").open("w") as log:
        run = subprocess.Popen(
            command(args), cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        started = time.monotonic()
        wait(lambda: caught_up(work, env, args.seed), run, 300)
        result: dict[str, Any] = {"startup_s": time.monotonic() - started}
        result["startup_peak_kb"] = status_kb(run.pid)["VmHWM"]
        result["idle_kb"] = idle_rss(run.pid, args.idle_s)
        result["idle_breakdown"] = smaps_breakdown(run.pid)
        _probe(args, run)
        reset_peak(run.pid)
        sampler = Sampler(run.pid, args.interval_s)
        sampler.start()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(INSERT, (args.seed + 1, args.seed + args.rows))
        result["catch_up_s"] = wait(lambda: caught_up(work, env, args.seed + args.rows), run, 3600)
        sampler.stop()
        result["peak_kb"] = max(status_kb(run.pid)["VmHWM"], *(s for _, s in sampler.samples))
        result["peak_breakdown"] = sampler.largest[1]
        _probe(args, run)
        result["idle_after_kb"] = idle_rss(run.pid, args.idle_s)
    finally:
        run.send_signal(signal.SIGTERM)
        result_code = run.wait(30)
    if result_code != 0:
        raise SystemExit(f"cdc run stopped with exit code {result_code}; see {work}/run.log")
    return result


def _probe(args: argparse.Namespace, run: subprocess.Popen[str]) -> None:
    """Under ``--probe``: ask the probe for its figures now."""
    if args.probe:
        run.send_signal(signal.SIGUSR1)
        time.sleep(2)


# -- reporting ---------------------------------------------------------------------------------


def print_breakdown(title: str, breakdown: dict[str, int], top: int = 8) -> None:
    total = sum(breakdown.values())
    parts = ", ".join(f"{name} {kb / 1024:.0f}" for name, kb in list(breakdown.items())[:top])
    print(f"  {title} ({total / 1024:.0f} MB): {parts}")


def report(args: argparse.Namespace, result: dict[str, Any], work: Path) -> None:
    sinks = ",".join(args.sinks) + "".join(f" {s}" for s in args.set)
    print(f"cdc run with {sinks}; {args.rows:,} rows in one transaction; load {_load()}")
    print(
        f"  start-up {result['startup_s']:.1f} s (peak {result['startup_peak_kb'] / 1024:.0f} MB)"
        f"; idle {result['idle_kb'] / 1024:.0f} MB; peak during the transaction "
        f"{result['peak_kb'] / 1024:.0f} MB (caught up in {result['catch_up_s']:.0f} s); "
        f"idle after {result['idle_after_kb'] / 1024:.0f} MB"
    )
    print_breakdown("idle by mapping, MB", result["idle_breakdown"])
    print_breakdown("largest sample by mapping, MB", result["peak_breakdown"])
    if args.probe and (work / memory_probe.OUT).exists():
        lines = (work / memory_probe.OUT).read_text().splitlines()
        for moment, line in zip(("idle", "end of the transaction"), lines, strict=False):
            print(f"  probe at {moment}: {memory_probe.summary(orjson.loads(line))}")
            print_python(orjson.loads(line)["python"])
    default = args.sinks == ["duckdb", "redis", "search"] and not args.set
    figures = Figures("memory", variant="" if default else "_" + "_".join(args.sinks))
    figures.add("idle_rss_mb", result["idle_kb"] / 1024)
    figures.add("tx_peak_rss_mb", result["peak_kb"] / 1024)
    figures.add("idle_after_tx_rss_mb", result["idle_after_kb"] / 1024)
    figures.emit()


def print_python(python: dict[str, Any] | None) -> None:
    """The top allocation sites of Python objects (``--trace``)."""
    for site, kb, count in (python or {}).get("top", [])[:8]:
        print(f"    {kb / 1024:7.1f} MB {count:9,} blocks  {site}")


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument("--sinks", default="duckdb,redis,search")
    parser.add_argument("--set", action="append", default=[], metavar="SINK.KEY=VALUE")
    parser.add_argument("--idle-s", type=float, default=10.0)
    parser.add_argument("--interval-s", type=float, default=0.2)
    parser.add_argument("--probe", action="store_true")
    parser.add_argument("--trace", action="store_true")
    parser.add_argument("--keep", type=Path, help="work in this directory and keep it")
    args = parser.parse_args(argv)
    args.probe = args.probe or args.trace
    names = [] if args.sinks == "none" else [s for s in args.sinks.split(",") if s]
    unknown = [s for s in names if s not in SINKS]
    if unknown:
        parser.error(f"--sinks: unknown {unknown}; choose from {list(SINKS)}")
    args.sinks = names or ["jsonl"]
    return args


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    from tests.services.postgres import LocalPostgres
    from tests.services.redis import LocalRedis

    with contextlib.ExitStack() as stack:
        pg = stack.enter_context(LocalPostgres())
        work = args.keep or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mem-")))
        work.mkdir(parents=True, exist_ok=True)
        dsn = pg.dsn_for(dbname=pg.create_database("bench"))
        env = {**os.environ, "MEM_PG_DSN": dsn, "PYTHONPATH": str(ROOT)}
        if "redis" in args.sinks:
            env["MEM_REDIS_URL"] = stack.enter_context(LocalRedis()).url
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(DDL)
            conn.execute(INSERT, (1, args.seed))
        report(args, measure(args, work, env, dsn), work)


if __name__ == "__main__":
    main(sys.argv[1:])
