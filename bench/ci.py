"""Run every bench once with small sizes, as CI does, and print all their figures at the end.

Not a test: the figures never fail it, they are printed so that every CI log carries them (a
small run's figures are rougher than a full run's: compare them with care). A bench that crashes,
or runs past ``--timeout-s``, makes this exit non-zero. Each bench runs in a process of its own,
one after another (two at once would share the cores they measure); its output is printed as it
comes, and every figure line it printed (``{"bench": ...}``, :mod:`bench.report`) is printed
again at the end, followed by this run's own figures: each bench's wall-clock seconds.

A new bench gets its small sizes in :data:`RUNS` (``tests/unit/test_bench_ci.py`` fails until it
has them, or is named in :data:`COVERED`).

Usage: ``python bench/ci.py [--only NAME ...] [--list] [--timeout-s 900]`` (``make bench-ci``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script

from bench.report import Figures

ROOT = Path(__file__).resolve().parent.parent
FIGURE_PREFIX = '{"bench"'


@dataclass(frozen=True)
class Run:
    """One bench run: its name and the interpreter's arguments (``-m bench.NAME ...``)."""

    name: str
    argv: tuple[str, ...]


def _bench(name: str, *args: str, module: str | None = None) -> Run:
    return Run(name, ("-m", f"bench.{module or name}", *args))


#: Every bench, small: each mostly pays its servers' start (PostgreSQL, Kafka, a JVM); all of them
#: together took 7.7 minutes on the 2-core machine under load 12-14 (2026-12-06).
RUNS: tuple[Run, ...] = (
    _bench("pgoutput_decode", "--rounds", "50", "--repeat", "3"),
    _bench("pg_assemble", "--rows", "20000", "--repeat", "3"),
    _bench("log_throughput", "--records", "100000"),
    _bench("pg_stream", "--rows", "50000", "--big", "50000", "--steady-s", "3"),
    _bench("pg_filters", "--filters", "--rows", "10000", "--rounds", "1", module="pg_stream"),
    _bench("pg_snapshot", "--rows", "100000"),
    _bench("sinks", "--changes", "20000"),
    _bench("kafka_log", "--records", "20000"),
    _bench("kafka_snapshot", "--rows", "20000"),
    _bench("mongo_source", "--docs", "5000", "--events", "1000"),
    _bench("memory", "--rows", "20000", "--idle-s", "1"),
    _bench("peer_debezium", "--rows", "10000", "--big", "10000"),
    _bench("scale", "--dimension", "tx_size", "--sizes", "1000,20000"),
    _bench("fence", "--writes", "20"),
    _bench("rebuild", "--changes", "20000"),
    _bench("trace", "--rows", "20000", "--keys", "3"),
    _bench("views", "--customers", "100", "--orders-per", "20", "--renames", "20"),
    _bench("verify", "--rows", "20000", "--tamper", "20"),
)
#: Bench scripts another run covers: ``sinks`` runs every sink's bench, ``memory`` its probe.
COVERED = {
    **{
        f"sinks_{name}": "sinks"
        for name in ("duckdb", "redis_search", "postgres", "opensearch", "http", "iceberg")
    },
    "memory_probe": "memory",
}


@dataclass
class Outcome:
    """What the runs left: every figure line, in order, and each run's exit and seconds."""

    figures: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    exits: dict[str, int | str] = field(default_factory=dict)


def present(runs: Sequence[Run] = RUNS) -> list[Run]:
    """The runs whose bench module exists in this checkout."""
    return [r for r in runs if r.argv[:1] != ("-m",) or _module_file(r.argv[1]).is_file()]


def _module_file(module: str) -> Path:
    return ROOT.joinpath(*module.split(".")).with_suffix(".py")


def run_all(runs: Sequence[Run], timeout_s: float) -> Outcome:
    """Run ``runs`` one after another, printing their output as it comes."""
    outcome = Outcome()
    for run in runs:
        print(f"\n==> bench {run.name}: python {' '.join(run.argv)}", flush=True)
        started = time.perf_counter()
        code = _run_one(run, timeout_s, outcome.figures)
        outcome.seconds[run.name] = time.perf_counter() - started
        outcome.exits[run.name] = code
        if code != 0:
            outcome.failed.append(run.name)
        print(f"<== bench {run.name}: exit {code} in {outcome.seconds[run.name]:.1f} s", flush=True)
    return outcome


def _run_one(run: Run, timeout_s: float, figures: list[str]) -> int | str:
    """The bench's exit code (``"timeout"`` when it was stopped), its figure lines appended.

    The bench runs in a process group of its own, ended once the bench exits: a server it
    started and did not stop would otherwise keep running after CI, and hold its output open.
    """
    process = subprocess.Popen(
        [sys.executable, *run.argv],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    assert process.stdout is not None
    reader = threading.Thread(target=_forward, args=(process.stdout, figures), daemon=True)
    reader.start()
    code: int | str
    try:
        code = process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        code = "timeout"
    if _end_group(process.pid) and code != "timeout":
        print(f"<== bench {run.name}: processes it left running were ended", flush=True)
    process.wait()
    reader.join(timeout=10)
    if isinstance(code, int) and code < 0:
        code = signal.Signals(-code).name  # killed: SIGSEGV, SIGKILL...
    return code


def _forward(stream: IO[str], figures: list[str]) -> None:
    for line in stream:
        print(line, end="", flush=True)
        if line.startswith(FIGURE_PREFIX):
            figures.append(line.rstrip("\n"))


def _end_group(group: int, grace_s: float = 5.0) -> bool:
    """End every process left in ``group`` (SIGTERM, then SIGKILL); whether there were any."""
    try:
        os.killpg(group, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGKILL)
    return True


def report(outcome: Outcome) -> None:
    """The runs' outcomes, then every figure line again, this run's own last."""
    print("\n==> bench runs")
    for name, seconds in outcome.seconds.items():
        print(f"{name:<20} exit {outcome.exits[name]!s:<8} {seconds:7.1f} s")
    if outcome.failed:
        print(f"==> FAILED (crashed or timed out): {', '.join(outcome.failed)}")
    print(f"\n==> bench figures ({len(outcome.figures)} lines)", flush=True)
    for line in outcome.figures:
        print(line)
    figures = Figures("ci")
    for name, seconds in outcome.seconds.items():
        figures.add(f"{name}_run_s", seconds)
    figures.emit()


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    names = [r.name for r in RUNS]
    parser.add_argument("--only", nargs="+", choices=names, metavar="NAME", help=", ".join(names))
    parser.add_argument("--list", action="store_true", help="print the commands, run nothing")
    parser.add_argument("--timeout-s", type=float, default=900.0, help="per bench")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _arguments(argv)
    runs = [r for r in present() if not args.only or r.name in args.only]
    if args.list:
        for run in runs:
            print(json.dumps({"name": run.name, "argv": ["python", *run.argv]}))
        return 0
    outcome = run_all(runs, args.timeout_s)
    report(outcome)
    return 1 if outcome.failed else 0


if __name__ == "__main__":
    sys.exit(main())
