"""Benchmark: ``cdc verify`` on large tables, PostgreSQL against a DuckDB sink: time and peak RSS.

Starts a throwaway PostgreSQL 15 (``LocalPostgres``) and runs a real pipeline (``cdc run``) on a
10-row table of six columns (``bigint`` key, ``text``, ``integer``, ``numeric(12,2)``,
``timestamptz``, ``boolean``) into a DuckDB sink, so that the log holds the table's schema and
the DuckDB file the sink's own tables and state; then stops it. For each size N the table is
refilled with N rows in PostgreSQL (``generate_series``) and the same N rows are written into the
sink's DuckDB table directly, in bulk SQL (through a pipeline, 10M rows would take the sink's
apply time, not verify's), with ``--tamper`` of them changed and as many deleted in DuckDB.
Then ``python -m cdc.cli.main verify FILE --json --attempts 1`` runs in a subprocess, as a user
runs it, timed (wall and CPU) with its own peak RSS (``VmHWM``, written by the process itself
as it exits: :data:`PEAK`); it must find exactly the tampered keys.

Not ``ru_maxrss`` (of ``wait4`` or the child's ``getrusage``): Linux keeps it across ``execve``,
and a child spawned by ``vfork`` (as ``subprocess`` does) starts from this process's own peak.
This process writes the N rows into DuckDB itself, so its peak grows with N (about 160 MB at 1M
rows, 185 MB at 3M), and ``ru_maxrss`` showed that growth as verify's: verify's own peak was
140 MB at 1M rows and 144 MB at 3M when ``ru_maxrss`` said 159 and 182 MB.

Baseline (``--baseline``, the smallest size only): the former comparison's memory, both sides
held as canonical JSON by key (what ``cdc verify`` did before the range digests), measured the
same way in a subprocess over the same readers.

The figures end with one JSON line a metric (:mod:`bench.report`); ``peak_rss_mb`` per size
shows memory flat as the table grows.

Usage: ``python -m bench.verify [--rows 1000000,10000000] [--tamper 100] [--baseline]``
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import duckdb
import orjson
import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.report import Figures  # noqa: E402

PIPELINE = "vbench"
COLUMNS = "id, customer, qty, amount, updated_at, paid"
PG_ROWS = (
    "SELECT g, 'customer-' || g, (g % 100)::int, ((g % 100000) / 100.0)::numeric(12,2), "
    "timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second', g % 2 = 0 "
    "FROM generate_series(1, {n}) g"
)
DUCK_ROWS = (
    "SELECT g, 'customer-' || g, (g % 100)::INTEGER, ((g % 100000) / 100.0)::DECIMAL(12,2), "
    "TIMESTAMPTZ '2024-01-01 00:00:00+00' + to_seconds(g), g % 2 = 0, 0, 0 "
    "FROM range(1, {n} + 1) t(g)"
)


def pipeline_yaml() -> str:
    return (
        f"version: 1\nname: {PIPELINE}\nsource:\n  type: postgres\n  dsn: ${{VB_PG_DSN}}\n"
        "  tables: [public.orders]\n  snapshot: initial\n  status_interval_s: 1\n"
        "sinks:\n  - name: warehouse\n    type: duckdb\n    path: out/w.duckdb\n"
    )


def cdc(work: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cdc.cli.main", *args],
        cwd=work,
        env=env,
        text=True,
        capture_output=True,
        timeout=3600,
    )


def prepare(work: Path, env: dict[str, str], dsn: str) -> None:
    """The table, and a real pipeline run until the sink holds its 10 rows."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE public.orders (id bigint PRIMARY KEY, customer text, qty integer, "
            "amount numeric(12,2), updated_at timestamptz, paid boolean)"
        )
        conn.execute(f"INSERT INTO public.orders {PG_ROWS.format(n=10)}")  # type: ignore[arg-type]
    (work / "p.yaml").write_text(pipeline_yaml())
    run = subprocess.Popen(
        [sys.executable, "-m", "cdc.cli.main", "run", "p.yaml"],
        cwd=work,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        done = cdc(work, env, "verify", "p.yaml", "--wait", "120")
        if done.returncode != 0:
            raise SystemExit(f"the pipeline did not fill the sink: {done.stdout}{done.stderr}")
    finally:
        run.terminate()
        run.wait(60)


def fill(work: Path, dsn: str, n: int, tamper: int) -> None:
    """``n`` rows on both sides; ``tamper`` changed and ``tamper`` deleted in DuckDB."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE public.orders")
        conn.execute(f"INSERT INTO public.orders {PG_ROWS.format(n=n)}")  # type: ignore[arg-type]
        conn.execute("VACUUM ANALYZE public.orders")
    step = max(1, n // max(1, tamper))
    with duckdb.connect(str(work / "out" / "w.duckdb")) as db:
        db.execute('DELETE FROM "public"."orders"')
        db.execute(
            f'INSERT INTO "public"."orders" ({COLUMNS}, __cdc_position, __cdc_sequence) '
            + DUCK_ROWS.format(n=n)
        )
        db.execute(f'UPDATE "public"."orders" SET qty = -1 WHERE id % {step} = 1')
        db.execute(f'DELETE FROM "public"."orders" WHERE id % {step} = 2')
        db.execute("CHECKPOINT")


#: Runs ``-m MODULE ARGS...`` or ``-c CODE`` as ``python`` would, and as the process exits
#: writes its own peak RSS (``VmHWM`` of ``/proc/self/status``, kB) to the file named by
#: ``CDC_BENCH_PEAK``: the peak of this process's memory alone (see the module's docstring).
PEAK = """
import atexit, os, runpy, sys

def peak():
    with open("/proc/self/status") as status:
        kb = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
    with open(os.environ["CDC_BENCH_PEAK"], "w") as out:
        out.write(kb)

atexit.register(peak)
how, what, *rest = sys.argv[1:]
if how == "-m":
    sys.argv = [what, *rest]
    runpy.run_module(what, run_name="__main__", alter_sys=True)
else:
    sys.argv = ["-c", *rest]
    exec(compile(what, "<string>", "exec"), {"__name__": "__main__"})
"""


def measured(work: Path, env: dict[str, str], *args: str) -> tuple[dict[str, float], str]:
    """Run a command (``-m MODULE ...`` or ``-c CODE``); its wall and CPU seconds and own peak
    RSS (MB), and its stdout."""
    out, peak = work / "out.json", work / "peak.kb"
    peak.unlink(missing_ok=True)
    started = time.monotonic()
    with out.open("w") as stdout:
        process = subprocess.Popen(
            [sys.executable, "-c", PEAK, *args],
            cwd=work,
            env={**env, "CDC_BENCH_PEAK": str(peak)},
            stdout=stdout,
            stderr=subprocess.DEVNULL,
        )
        _, status, usage = os.wait4(process.pid, 0)
    wall = time.monotonic() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    figures = {
        "wall_s": round(wall, 2),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "peak_rss_mb": round(int(peak.read_text()) / 1024, 1),
        # What this bench reported before: at least this process's own peak (docstring).
        "ru_maxrss_mb": round(usage.ru_maxrss / 1024, 1),
    }
    return figures, out.read_text()


def verify_once(work: Path, env: dict[str, str], n: int, tamper: int) -> dict[str, float]:
    figures, stdout = measured(
        work, env, "-m", "cdc.cli.main", "verify", "p.yaml", "--json", "--attempts", "1"
    )
    (result,) = orjson.loads(stdout)
    found = (len(result["different"]), len(result["missing_in_sink"]))
    print(
        f"{n:>10,} rows: {figures['wall_s']} s wall, {figures['cpu_s']} s CPU, "
        f"peak RSS {figures['peak_rss_mb']} MB (wait4's ru_maxrss {figures['ru_maxrss_mb']} MB); "
        f"state {result['state']}, "
        f"different/missing shown {found} (tampered {tamper} + {tamper}); "
        f"load {os.getloadavg()[0]:.2f} (1 min)",
        flush=True,
    )
    if result["state"] != "different" or result["source"]["count"] != n:
        raise SystemExit(f"unexpected verify result: {result}")
    return figures


BASELINE = """
import sys
from cdc.config.pipeline import load
from cdc.contracts import plugins
from cdc.log.factory import open_log
from cdc.runtime.schemas import SchemaCatalog
from cdc.verify.compare import _decoding, _entry

pipeline = load("p.yaml")
log = open_log(pipeline)
schema = SchemaCatalog(log, pipeline.name, wait_s=0).get("public", "orders")
source = plugins.load(plugins.SOURCE_GROUP, "postgres").read_rows
sink = plugins.load(plugins.SINK_GROUP, "duckdb").read_rows
states = []
for read in (
    _decoding(lambda: source(pipeline.source, "public", "orders", envelope=pipeline.envelope),
              schema, pipeline.envelope),
    lambda: sink(pipeline.sinks[0], "public", "orders", pipeline=pipeline.name),
):
    state = {}
    for key, row in read():
        k, r = _entry(key, row, schema)
        state[k] = r
    states.append(state)
print(len(states[0]), len(states[1]))
"""


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1000000,10000000")
    parser.add_argument("--tamper", type=int, default=100)
    parser.add_argument("--baseline", action="store_true")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.rows.split(",")]
    from tests.services.postgres import LocalPostgres

    figures = Figures("verify")
    with contextlib.ExitStack() as stack:
        pg = stack.enter_context(LocalPostgres())
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="cdc-vbench-")))
        dsn = pg.dsn_for(dbname=pg.create_database("bench"))
        env = {**os.environ, "VB_PG_DSN": dsn, "PYTHONPATH": str(ROOT)}
        prepare(work, env, dsn)
        stack.callback(lambda: cdc(work, env, "drop", "p.yaml", "--yes"))
        print(f"load: {os.getloadavg()[0]:.2f} (1 min) at the start", flush=True)
        baseline: dict[str, Any] = {}
        for n in sizes:
            fill(work, dsn, n, args.tamper)
            ours = verify_once(work, env, n, args.tamper)
            if args.baseline and n == sizes[0]:
                baseline, _ = measured(work, env, "-c", BASELINE)
                print(f"{n:>10,} rows, baseline (both sides in memory): {baseline}", flush=True)
            label = f"{n // 1_000_000}m" if n >= 1_000_000 else f"{n // 1000}k"
            figures.add(f"{label}_rows_wall_s", ours["wall_s"])
            figures.add(f"{label}_rows_cpu_us_per_row", ours["cpu_s"] * 1e6 / n)
            figures.add(
                f"{label}_rows_peak_rss_mb", ours["peak_rss_mb"], baseline.get("peak_rss_mb")
            )
        print(f"load: {os.getloadavg()[0]:.2f} (1 min) at the end", flush=True)
    figures.emit()


if __name__ == "__main__":
    main(sys.argv[1:])
