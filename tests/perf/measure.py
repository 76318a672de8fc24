"""Measure one hot path's work per row in a fresh interpreter, and say where the calls go.

A fresh process makes the count repeatable: first imports, warmed caches and the garbage a test
suite leaves behind would otherwise depend on what ran before. ``PYTHONHASHSEED`` is fixed, so
sets and dicts of strings iterate alike in every run, and the native extensions must be there
(the budgets are those of the shipped path, not of the pure-Python fallback).

Usage (prints the figures as one JSON object; ``--top`` also where the calls go)::

    python -m tests.perf.measure stream --dsn postgresql://... [--top]
    python -m tests.perf.measure snapshot --dsn postgresql://...
    python -m tests.perf.measure duckdb
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PATHS = ("stream", "snapshot", "duckdb")
#: The paths that read from PostgreSQL (``--dsn``).
NEEDS_PG = ("stream", "snapshot")
#: The libraries whose Python code runs on the measured paths (a new release may move a count).
LIBRARIES = ("psycopg", "duckdb", "orjson", "structlog")


def measure(path: str, dsn: str | None = None, timeout_s: float = 600) -> dict[str, Any]:
    """Run ``path``'s measurement in a child interpreter; returns its figures
    (:meth:`tests.perf.counting.Work.to_json`).

    Raises:
        RuntimeError: the child failed (its stderr's end is in the message).
    """
    argv = [sys.executable, "-m", "tests.perf.measure", path]
    if dsn is not None:
        argv += ["--dsn", dsn]
    env = {k: v for k, v in os.environ.items() if k != "CDC_NATIVE"}
    env["PYTHONHASHSEED"] = "0"
    result = subprocess.run(
        argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s, check=False
    )
    if result.returncode != 0:
        tail = "\n".join(result.stderr.strip().splitlines()[-30:])
        raise RuntimeError(f"measuring {path} failed (exit {result.returncode}):\n{tail}")
    figures: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return figures


def _child(args: argparse.Namespace) -> dict[str, Any]:
    from cdc.log.embedded import appender
    from cdc.support.logging import configure
    from connectors.postgres.types import row_encoder
    from tests.perf import paths

    configure(level="warning", json=True)  # on stderr: stdout carries the figures

    if not (row_encoder.available() and appender.available()):
        raise SystemExit(
            "the native row encoder or log appender is not built: the budgets count the shipped "
            "path (build them with `make install`)"
        )
    if args.path in NEEDS_PG and not args.dsn:
        raise SystemExit(f"{args.path} needs --dsn")
    with tempfile.TemporaryDirectory(prefix=f"cdc-perf-{args.path}-") as tmp:
        if args.path == "stream":
            work = paths.measure_stream(args.dsn, Path(tmp))
        elif args.path == "snapshot":
            work = paths.measure_snapshot(args.dsn, Path(tmp))
        else:
            work = paths.measure_duckdb(Path(tmp))
    return {**work.to_json(), "versions": versions()}


def versions() -> dict[str, str]:
    """Python's and the counted libraries' versions: their own calls are part of the count."""
    import platform
    from importlib import metadata

    return {"python": platform.python_version()} | {p: metadata.version(p) for p in LIBRARIES}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("path", choices=PATHS)
    parser.add_argument("--dsn", help="a database to create the fixed table in (stream, snapshot)")
    parser.add_argument("--top", action="store_true", help="print where the calls go first")
    args = parser.parse_args()
    figures = _child(args)
    if args.top:
        for kind in ("top_python", "top_builtin"):
            print(f"{kind}: (calls per row, function)")
            for name, calls in figures[kind]:
                print(f"  {calls / figures['rows']:8.3f}  {name}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
